"""Read topics back the way a downstream consumer sees them.

Used by the demo, the test suites and the chaos verifier: read every partition of some topics up
to their end offsets, ``read_committed`` by default, so exactly what committed transactions
produced is returned, in partition order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient


@dataclass(frozen=True)
class ReadRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


async def read_topics(
    bootstrap: str,
    topics: Collection[str],
    *,
    isolation_level: str = "read_committed",
    timeout: float = 60.0,
    security: dict[str, Any] | None = None,
) -> dict[str, list[ReadRecord]]:
    """Every record of ``topics`` up to the end offsets at call time, per topic, in partition
    order. ``read_committed`` stops at the last stable offset, so a transaction still open
    would make this wait: it raises TimeoutError after ``timeout`` seconds in that case."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        **(security or {}),
    )
    await consumer.start()
    try:
        tps: list[TopicPartition] = []
        for topic in topics:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                await consumer._client.force_metadata_update()
                partitions = consumer.partitions_for_topic(topic) or set()
            tps.extend(TopicPartition(topic, p) for p in sorted(partitions))
        out: dict[str, list[ReadRecord]] = {t: [] for t in topics}
        if not tps:
            return out
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # LSO when read_committed
        by_tp: dict[TopicPartition, list[ReadRecord]] = {tp: [] for tp in tps}
        remaining = {tp for tp in tps if ends[tp] > 0}

        async def drain() -> None:
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=500)
                for tp, records in batch.items():
                    by_tp[tp].extend(
                        ReadRecord(
                            r.topic,
                            r.partition,
                            r.offset,
                            r.timestamp,
                            r.key,
                            r.value,
                            tuple(r.headers),
                        )
                        for r in records
                        if r.offset < ends[tp]
                    )
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)

        await asyncio.wait_for(drain(), timeout)
        for tp in tps:
            out[tp.topic].extend(by_tp[tp])
        return out
    finally:
        await consumer.stop()


async def last_stable_equals_high_watermark(
    bootstrap: str, topics: Collection[str], security: dict[str, Any] | None = None
) -> dict[TopicPartition, tuple[int, int]]:
    """Partitions whose last stable offset is below the high watermark (open transactions)."""
    result: dict[TopicPartition, tuple[int, int]] = {}
    committed = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", **(security or {})
    )
    uncommitted = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_uncommitted", **(security or {})
    )
    await committed.start()
    await uncommitted.start()
    try:
        tps: list[TopicPartition] = []
        for t in topics:
            partitions = committed.partitions_for_topic(t)
            if not partitions:  # not in the metadata cache yet: ask for it
                await committed._client.force_metadata_update()
                partitions = committed.partitions_for_topic(t) or set()
            tps.extend(TopicPartition(t, p) for p in sorted(partitions))
        if not tps:
            return result
        lso = await committed.end_offsets(tps)
        hw = await uncommitted.end_offsets(tps)
        for tp in tps:
            if lso[tp] != hw[tp]:
                result[tp] = (lso[tp], hw[tp])
        return result
    finally:
        await committed.stop()
        await uncommitted.stop()


async def group_lag(
    bootstrap: str,
    group_id: str,
    topics: Collection[str],
    *,
    security: dict[str, Any] | None = None,
) -> dict[tuple[str, int], int]:
    """Per input partition, how far the group's committed offset is behind the end offset.

    An empty answer means everything written to ``topics`` so far has been processed and
    committed: the worker commits the position after the transaction markers (see
    ``Worker._sync_positions``), so a drained partition has committed == end exactly.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **(security or {})
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **(security or {}))
    await consumer.start()
    try:
        await admin.start()
        tps: list[TopicPartition] = []
        for topic in topics:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                await consumer._client.force_metadata_update()
                partitions = consumer.partitions_for_topic(topic) or set()
            tps.extend(TopicPartition(topic, p) for p in sorted(partitions))
        ends = await consumer.end_offsets(tps)
        found = await admin.list_consumer_group_offsets(group_id, partitions=tps)
        lag: dict[tuple[str, int], int] = {}
        for tp in tps:
            meta = found.get(tp)
            committed = meta.offset if meta is not None and meta.offset >= 0 else 0
            if ends[tp] > committed:
                lag[(tp.topic, tp.partition)] = ends[tp] - committed
        return lag
    finally:
        await consumer.stop()
        await admin.close()
