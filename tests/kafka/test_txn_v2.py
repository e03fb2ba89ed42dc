"""Transaction version 2 (KIP-890 part 2) against the real Kafka 4.x broker.

The embedded broker finalizes ``transaction.version`` 2 (Kafka 4's default), so the producer
uses it unless told otherwise; every other test in this directory runs on it too. These pin
what is specific to it: which requests go out, the epoch bump at every EndTxn, and that
version 1 (aiokafka's own requests) still works when asked for.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import aiokafka.errors as aerrors
import pytest
from aiokafka import TopicPartition

from streams_app.kafka import TransactionalProducer
from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import (
    create_topics,
    joined,
    member,
    no_open_transaction,
    read_committed,
    transactional,
)

pytestmark = pytest.mark.kafka

PRODUCE, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 0, 24, 25, 26, 28


def record_requests(producer: TransactionalProducer) -> Counter[tuple[int, int | None]]:
    """Count (API key, version) of every request the producer's client sends from now on."""
    sent: Counter[tuple[int, int | None]] = Counter()
    client: Any = producer.client
    original = client.send

    async def send(node_id: int, request: Any, **kwargs: Any) -> Any:
        version = getattr(request, "version", None)
        if request.API_KEY == END_TXN:
            version = 5 if type(request).__name__ == "EndTxnRequestV5" else 0
        elif request.API_KEY == PRODUCE:
            version = 12 if type(request).__name__ == "ProduceRequestV12" else None
        sent[(request.API_KEY, version)] += 1
        return await original(node_id, request, **kwargs)

    client.send = send
    return sent


async def test_version_2_adds_partitions_and_offsets_without_asking_and_bumps_the_epoch(
    bootstrap_servers: str, unique: str
) -> None:
    source, sink, group = f"in-{unique}", f"out-{unique}", f"g-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(source, 1, 1), TopicSpec(sink, 2, 1))
    src, out0, out1 = TopicPartition(source, 0), TopicPartition(sink, 0), TopicPartition(sink, 1)
    consumer = member(bootstrap_servers, group)
    producer = transactional(bootstrap_servers, f"tx-{unique}")
    await consumer.start()
    await producer.start()
    try:
        assert producer.transaction_version == 2
        await joined(consumer, [source])
        membership = consumer.group_metadata()
        sent = record_requests(producer)
        pid, epoch = producer.producer_id_and_epoch

        for round_ in range(3):
            await producer.begin_transaction()
            a = await producer.send(sink, b"a%d" % round_, partition=0)
            b = await producer.send(sink, b"b%d" % round_, partition=1)
            # Acknowledged first, as the runtime does: offsets sent while a partition's first
            # write is in flight race with it on the broker, and one of them is retried.
            await a
            await b
            await producer.send_offsets_to_transaction({src: round_ + 1}, membership)
            await producer.commit_transaction()
            # Every EndTxn ends the transaction under a new epoch, same producer id.
            assert producer.producer_id_and_epoch == (pid, epoch + round_ + 1)

        assert await read_committed(bootstrap_servers, out0) == [b"a0", b"a1", b"a2"]
        assert await read_committed(bootstrap_servers, out1) == [b"b0", b"b1", b"b2"]
        assert await consumer.committed_offsets([src]) == {src: 3}
        assert sent[(ADD_PARTITIONS, None)] == 0 and sent[(ADD_OFFSETS, None)] == 0
        assert sent[(END_TXN, 5)] == 3 and sent[(END_TXN, 0)] == 0
        assert sent[(TXN_OFFSET_COMMIT, 5)] == 3
        assert sent[(PRODUCE, 12)] >= 3 and sent[(PRODUCE, None)] == 0

        # An abort bumps the epoch too, and hides records and offsets; sequence numbers restart
        # with the new epoch, so the next transaction's batches are accepted.
        await producer.begin_transaction()
        await producer.send(sink, b"aborted", partition=0)
        await producer.send_offsets_to_transaction({src: 99}, membership)
        await producer.abort_transaction()
        assert producer.producer_id_and_epoch == (pid, epoch + 4)
        await producer.begin_transaction()
        await producer.send(sink, b"after", partition=0)
        await producer.commit_transaction()
        assert await read_committed(bootstrap_servers, out0) == [b"a0", b"a1", b"a2", b"after"]
        assert await consumer.committed_offsets([src]) == {src: 3}
        await no_open_transaction(bootstrap_servers, out0)
    finally:
        await producer.stop()
        await consumer.stop()


async def test_version_1_is_used_when_asked_for(bootstrap_servers: str, unique: str) -> None:
    source, sink, group = f"in-{unique}", f"out-{unique}", f"g-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(source, 1, 1), TopicSpec(sink, 1, 1))
    src, out = TopicPartition(source, 0), TopicPartition(sink, 0)
    consumer = member(bootstrap_servers, group)
    producer = transactional(bootstrap_servers, f"tx-{unique}", transaction_version=1)
    await consumer.start()
    await producer.start()
    try:
        assert producer.transaction_version == 1
        await joined(consumer, [source])
        sent = record_requests(producer)
        pid, epoch = producer.producer_id_and_epoch
        for value in (b"x", b"y"):
            await producer.begin_transaction()
            await producer.send(sink, value)
            await producer.send_offsets_to_transaction({src: 1}, consumer.group_metadata())
            await producer.commit_transaction()
        assert producer.producer_id_and_epoch == (pid, epoch)  # no bump under version 1
        assert await read_committed(bootstrap_servers, out) == [b"x", b"y"]
        # (More than one each when the broker answered CONCURRENT_TRANSACTIONS while it was still
        # writing the previous transaction's markers, and the client asked again.)
        assert sent[(ADD_PARTITIONS, None)] >= 2 and sent[(ADD_OFFSETS, None)] >= 2
        assert sent[(END_TXN, 0)] == 2 and sent[(TXN_OFFSET_COMMIT, 3)] >= 2
        assert sent[(END_TXN, 5)] == 0 and sent[(PRODUCE, 12)] == 0
    finally:
        await producer.stop()
        await consumer.stop()


async def test_a_stale_epoch_is_fenced_under_version_2(bootstrap_servers: str, unique: str) -> None:
    """A newer producer with the same transactional id fences the older one, whose epoch has
    moved on by its own commits in the meantime."""
    sink = f"out-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(sink, 1, 1))
    old = transactional(bootstrap_servers, f"tx-{unique}")
    await old.start()
    new: TransactionalProducer | None = None
    try:
        for value in (b"1", b"2"):
            await old.begin_transaction()
            await old.send(sink, value)
            await old.commit_transaction()
        new = transactional(bootstrap_servers, f"tx-{unique}")
        await new.start()
        await old.begin_transaction()
        with pytest.raises(aerrors.ProducerFenced):
            await (await old.send(sink, b"zombie"))
            await old.commit_transaction()
        await new.begin_transaction()
        await new.send(sink, b"3")
        await new.commit_transaction()
        assert await read_committed(bootstrap_servers, TopicPartition(sink, 0)) == [
            b"1",
            b"2",
            b"3",
        ]
    finally:
        await old.stop()
        if new is not None:
            await new.stop()
