"""Reading topics for the verifier: a streaming scan, and a reader that runs during the faults.

:func:`scan` reads whole topics up to their end offsets (the last stable offset under
``read_committed``) and hands every record to a callback, in offset order per partition, without
keeping them: a million-record run has more than ten million output records, far too many to hold
as objects.

:class:`ConcurrentReader` is the Jepsen-style reader that runs *while* the faults happen: a
``read_committed`` consumer over every output, changelog and repartition partition that remembers
the offsets it was given. Every one of them must still be there, committed, at the end: an offset
it saw that the final read does not contain was an aborted (or otherwise uncommitted) record
handed to a ``read_committed`` consumer (invariant 6).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from array import array
from collections.abc import Callable, Collection
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams_app.aio import within

log = logging.getLogger(__name__)

RecordHandler = Callable[[Any], None]


async def partitions_of(consumer: Any, topics: Collection[str]) -> list[TopicPartition]:
    tps: list[TopicPartition] = []
    for topic in topics:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(topic) or set()
        tps.extend(TopicPartition(topic, p) for p in sorted(parts))
    return tps


def _consumer(bootstrap: str, isolation_level: str, client_id: str) -> Any:
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        client_id=client_id,
    )


async def scan(
    bootstrap: str,
    topics: Collection[str],
    handler: RecordHandler,
    *,
    isolation_level: str = "read_committed",
    timeout: float = 900.0,
) -> dict[TopicPartition, int]:
    """Call ``handler(record)`` for every record of ``topics`` below the end offsets read at
    the start; return those end offsets. Records of one partition come in offset order."""
    consumer = _consumer(bootstrap, isolation_level, "chaos-verifier")
    await consumer.start()
    try:
        tps = await partitions_of(consumer, topics)
        if not tps:
            return {}
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        remaining = {tp for tp in tps if ends[tp] > 0}

        async def drain() -> None:
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=500, max_records=20_000)
                for tp, records in batch.items():
                    end = ends[tp]
                    for record in records:
                        if record.offset < end:
                            handler(record)
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
                        consumer.pause(tp)

        await within(drain(), timeout)
        return ends
    finally:
        await consumer.stop()


class ConcurrentReader:
    """Reads ``topics`` read_committed from the beginning for as long as it runs."""

    def __init__(
        self,
        bootstrap: str,
        topics: Collection[str],
        value_of: Callable[[Any], int] | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self.offsets: dict[tuple[str, int], array[int]] = {}
        #: With ``value_of``: what it made of each record's value, beside its offset.
        self.values: dict[tuple[str, int], array[int]] = {}
        self._value_of = value_of
        self.records = 0
        self.errors = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="chaos-concurrent-reader")

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            task, self._task = self._task, None
            with contextlib.suppress(TimeoutError):
                await within(task, 60)  # past that, `within` cancelled it and waited for its end

    async def _run(self) -> None:
        consumer = _consumer(self.bootstrap, "read_committed", "chaos-concurrent-reader")
        await consumer.start()
        try:
            tps = await partitions_of(consumer, self.topics)
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            for tp in tps:
                self.offsets[(tp.topic, tp.partition)] = array("q")
                self.values[(tp.topic, tp.partition)] = array("q")
            value_of = self._value_of
            while not self._stop.is_set():
                try:
                    batch = await consumer.getmany(timeout_ms=200, max_records=5_000)
                except Exception as exc:  # a broker bounce: the consumer recovers by itself
                    self.errors += 1
                    log.debug("concurrent reader: %r", exc)
                    await asyncio.sleep(0.2)
                    continue
                for tp, records in batch.items():
                    seen = self.offsets[(tp.topic, tp.partition)]
                    seen.extend(r.offset for r in records)
                    if value_of is not None:
                        self.values[(tp.topic, tp.partition)].extend(value_of(r) for r in records)
                    self.records += len(records)
                await asyncio.sleep(0)
        finally:
            await consumer.stop()
