"""The broker behaviour everything else stands on, checked on the real embedded Kafka."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.structs import OffsetAndMetadata

from tests.foundation.kafka_helpers import committed_when_settled, create_topic, read_all


async def test_read_committed_sees_only_committed_transactions(
    bootstrap_servers: str, unique: str
) -> None:
    topic = f"txn-visibility-{unique}"
    await create_topic(bootstrap_servers, topic)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers, transactional_id=f"tx-{unique}"
    )
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed-1")
            await producer.send_and_wait(topic, b"committed-2")
        await producer.begin_transaction()
        await producer.send_and_wait(topic, b"aborted-1")
        await producer.abort_transaction()
        async with producer.transaction():
            await producer.send_and_wait(topic, b"committed-3")
    finally:
        await producer.stop()

    committed = await read_all(bootstrap_servers, topic, "read_committed")
    uncommitted = await read_all(bootstrap_servers, topic, "read_uncommitted")
    assert committed == [b"committed-1", b"committed-2", b"committed-3"]
    assert uncommitted == [b"committed-1", b"committed-2", b"aborted-1", b"committed-3"]


async def test_offsets_sent_in_a_transaction_commit_only_with_it(
    bootstrap_servers: str, unique: str
) -> None:
    topic, group = f"txn-offsets-{unique}", f"group-{unique}"
    await create_topic(bootstrap_servers, topic, partitions=2)
    tp, probe = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers, transactional_id=f"tx-{unique}"
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=group,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await producer.start()
    await consumer.start()

    async def offsets_in_transaction(offsets: dict[TopicPartition, int], commit: bool) -> None:
        await producer.begin_transaction()
        await producer.send_offsets_to_transaction(
            {t: OffsetAndMetadata(o, "") for t, o in offsets.items()}, group
        )
        if commit:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()

    try:
        consumer.assign([tp, probe])

        await offsets_in_transaction({tp: 5}, commit=False)
        await offsets_in_transaction({probe: 1}, commit=True)
        assert await committed_when_settled(consumer, tp, probe, 1) is None

        await offsets_in_transaction({tp: 7}, commit=True)
        await offsets_in_transaction({probe: 2}, commit=True)
        assert await committed_when_settled(consumer, tp, probe, 2) == 7

        await offsets_in_transaction({tp: 9}, commit=False)
        await offsets_in_transaction({probe: 3}, commit=True)
        assert await committed_when_settled(consumer, tp, probe, 3) == 7
    finally:
        await consumer.stop()
        await producer.stop()
