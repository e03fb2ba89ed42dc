"""The Kafka transport's direct batch path against aiokafka's own ``BatchBuilder.append``.

The runtime fills a batch through the C builder's ``append`` and then says how many records
it holds (``seal_batch``): the bytes sent and the record count (by which the producer's
sequence numbers advance) must be exactly what ``BatchBuilder.append`` would have made. No
broker here: the same path runs against the real broker in tests/runtime/test_send_batching.py
and every exactly-once test.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.producer.message_accumulator import BatchBuilder

from streams_app.transport.base import DirectBatchingProducerClient, ProducerConfig
from streams_app.transport.kafka import KafkaProducerClient

RECORDS: list[tuple[int | None, bytes | None, bytes | None, list[tuple[str, bytes]]]] = [
    (1_700_000_000_000 + i, b"key-%d" % i, None if i % 7 == 0 else b"v" * i, headers)
    for i, headers in enumerate([[], [("h", b"1")], [("lineage", b"x" * 30), ("n", b"")]] * 40)
]


def _client() -> KafkaProducerClient:
    # Never started: raw_append and seal_batch touch only the batch.
    return KafkaProducerClient("127.0.0.1:1", ProducerConfig(transactional_id="t"), {})


def _batch(size: int = 1 << 20, **kwargs: Any) -> BatchBuilder:
    return BatchBuilder(size, 0, is_transactional=True, **kwargs)


async def test_direct_appends_build_the_same_batch_and_count() -> None:
    client = _client()
    assert isinstance(client, DirectBatchingProducerClient)
    plain, direct = _batch(), _batch()
    raw = client.raw_append(direct)
    assert raw is not None
    for n, (timestamp, key, value, headers) in enumerate(RECORDS):
        a = plain.append(timestamp=timestamp, key=key, value=value, headers=headers)
        b = raw(n, timestamp, key, value, headers)
        assert a is not None and b is not None
        assert (a.offset, a.size, a.timestamp) == (b.offset, b.size, b.timestamp)
    client.seal_batch(direct, len(RECORDS))
    plain.close()
    assert direct.closed()
    assert direct.record_count() == plain.record_count() == len(RECORDS)
    # Same producer state, as the sender sets it: then the same bytes on the wire.
    for batch in (plain, direct):
        batch._set_producer_state(producer_id=42, producer_epoch=3, base_sequence=17)
    assert direct._build() == plain._build()


async def test_a_full_batch_says_so_as_append_does() -> None:
    client = _client()
    plain, direct = _batch(200), _batch(200)
    raw = client.raw_append(direct)
    assert raw is not None
    n = 0
    while True:
        a = plain.append(timestamp=0, key=b"k", value=b"x" * 40, headers=[])
        b = raw(n, 0, b"k", b"x" * 40, [])
        assert (a is None) == (b is None)
        if b is None:
            break
        n += 1
    assert n == plain.record_count() > 1


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(lambda: _batch(key_serializer=str.encode), id="with-a-serializer"),
        pytest.param(lambda: _used(), id="already-appended-to"),
        pytest.param(lambda: object(), id="not-aiokafka's"),
    ],
)
async def test_no_direct_path_where_append_would_do_more(batch: Any) -> None:
    assert _client().raw_append(batch()) is None


def _used() -> BatchBuilder:
    batch = _batch()
    batch.append(timestamp=0, key=b"k", value=b"v", headers=[])
    return batch
