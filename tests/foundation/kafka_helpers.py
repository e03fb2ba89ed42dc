"""Small raw-aiokafka helpers for tests that check the broker itself, not our runtime."""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic


async def create_topic(
    bootstrap: str, name: str, partitions: int = 1, replication: int = 1, **configs: str
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name, partitions, replication, topic_configs=dict(configs))]
        )
    finally:
        await admin.close()


async def read_all(
    bootstrap: str, topic: str, isolation_level: str, partitions: int = 1
) -> list[bytes]:
    """Every record of ``topic`` visible at ``isolation_level``, read up to the end offsets."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        # read_committed stops at the last stable offset; read_uncommitted at the high watermark.
        end = await consumer.end_offsets(tps)
        values: list[bytes] = []
        for tp in tps:
            while await consumer.position(tp) < end[tp]:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                for records in batch.values():
                    values.extend(r.value for r in records)
        return values
    finally:
        await consumer.stop()


async def committed_when_settled(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    probe: TopicPartition,
    probe_value: int,
    timeout: float = 15.0,
) -> int | None:
    """The committed offset of ``tp`` once every earlier transaction of the group has completed.

    EndTxn returns before the coordinator writes the commit/abort markers into
    ``__consumer_offsets``; a plain OffsetFetch meanwhile still answers the previous value. The
    caller commits ``probe_value`` for ``probe`` in a *later* transaction: once that is visible,
    every earlier marker of the group (same ``__consumer_offsets`` partition, written in order)
    has been applied, so the answer for ``tp`` is final.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while await consumer.committed(probe) != probe_value:
        if loop.time() > deadline:
            raise AssertionError(f"the probe offset {probe_value} never became visible")
        await asyncio.sleep(0.05)
    return await consumer.committed(tp)
