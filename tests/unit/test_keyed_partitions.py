"""A keyed record's partition from the producer's remembered answers (``keyed_partitions``),
without ``choose_partition``'s calls: the same answers, and none kept past a metadata update.
Unit test of our own caching, on an unstarted ``TransactionalProducer`` whose metadata is
updated by hand (aiokafka's ``ClusterMetadata``); that records land where Java's murmur2 puts
them is checked against Kafka Streams and Faust on the real broker."""

from __future__ import annotations

from typing import Any

from aiokafka.cluster import ClusterMetadata
from aiokafka.partitioner import DefaultPartitioner

from streams_app.kafka.producer import TransactionalProducer
from streams_app.runtime.producer import StreamsProducer
from streams_app.transport.base import ProducerConfig


def _metadata(partitions: int) -> dict[str, Any]:
    """A metadata response's fields for topic "out" with ``partitions`` partitions."""
    return {
        "brokers": [(0, "127.0.0.1", 1, None)],
        "topics": [(0, "out", False, [(0, p, 0, [0], [0]) for p in range(partitions)])],
    }


def _update(metadata: ClusterMetadata, partitions: int) -> None:
    from aiokafka.protocol.metadata import MetadataResponse_v1

    fields = _metadata(partitions)
    metadata.update_metadata(MetadataResponse_v1(fields["brokers"], 0, fields["topics"]))


async def test_keyed_partitions_are_choose_partitions_answers_and_die_with_the_metadata() -> None:
    producer = TransactionalProducer(bootstrap_servers="127.0.0.1:1")
    try:
        assert producer.keyed_partitions("out") is None  # no metadata yet
        _update(producer._metadata, 4)
        keys = [b"k%d" % i for i in range(50)]
        chosen = {k: producer.choose_partition("out", k, None) for k in keys}
        assert chosen == {k: DefaultPartitioner()(k, [0, 1, 2, 3], [0, 1, 2, 3]) for k in keys}
        live = producer.keyed_partitions("out")
        assert live == chosen
        _update(producer._metadata, 6)  # more partitions: every answer may change
        assert live == {}  # a holder of the old dict misses from now on
        assert producer.keyed_partitions("out") is None
        again = {k: producer.choose_partition("out", k, None) for k in keys}
        assert again == {k: DefaultPartitioner()(k, list(range(6)), list(range(6))) for k in keys}
        assert again != chosen and producer.keyed_partitions("out") == again
    finally:
        await producer.stop()


class _Chooser:
    """A batcher's partition choice only: counts the calls, remembers keyed answers."""

    def __init__(self) -> None:
        self.calls = 0
        self.by_key: dict[bytes, int] = {}

    def choose_partition(self, topic: str, key: bytes | None, partition: int | None) -> int:
        self.calls += 1
        if partition is not None:
            return partition
        chosen = 3 if key is None else len(key) % 4
        if key is not None:
            self.by_key[key] = chosen
        return chosen

    def keyed_partitions(self, topic: str) -> dict[bytes, int]:
        return self.by_key


def test_the_runtime_producer_keeps_the_batchers_own_dict_and_refreshes_it_on_a_miss() -> None:
    producer = StreamsProducer(None, ProducerConfig(transactional_id="tx"))  # type: ignore[arg-type]
    chooser = _Chooser()
    producer._keyed_of = chooser.keyed_partitions
    assert producer._choose(chooser, "out", b"ab", None) == 2  # type: ignore[arg-type]
    assert producer._keyed["out"] is chooser.by_key
    assert producer._choose(chooser, "out", None, None) == 3  # type: ignore[arg-type]
    assert producer._choose(chooser, "out", b"ab", 1) == 1  # type: ignore[arg-type]
    assert chooser.by_key == {b"ab": 2}  # explicit partitions and keyless records: not kept
    chooser.by_key = {}  # the batcher's metadata moved on: a new dict
    assert producer._choose(chooser, "out", b"xyz", None) == 3  # type: ignore[arg-type]
    assert producer._keyed["out"] is chooser.by_key == {b"xyz": 3}


def test_a_keyed_record_found_in_the_dict_asks_the_batcher_nothing() -> None:
    producer = StreamsProducer(None, ProducerConfig(transactional_id="tx"))  # type: ignore[arg-type]
    chooser = _Chooser()
    producer._keyed_of = chooser.keyed_partitions
    assert producer._partition_of(chooser, "out", b"abc", None) == 3  # type: ignore[arg-type]
    assert chooser.calls == 1
    assert producer._partition_of(chooser, "out", b"abc", None) == 3  # type: ignore[arg-type]
    assert chooser.calls == 1  # from the dict
    assert producer._partition_of(chooser, "out", b"abc", 0) == 0  # type: ignore[arg-type]
    assert producer._partition_of(chooser, "out", None, None) == 3  # type: ignore[arg-type]
    assert chooser.calls == 3  # explicit partitions and keyless records are always asked
