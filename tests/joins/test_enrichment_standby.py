"""A standby of a table built from a topic, promoted on the real broker: the table it brings is
the one processing built (review 1.1).

Two workers of ``tests.joins.enrichment_app`` with ``table_standby_replicas=1``: each holds a
standby of the other's ``customers`` partition, whose changelog is the ``customers`` topic
itself. Every customer's valid record is followed by an undecodable one, which processing
dead-letters (the table keeps the valid value). One worker stops; the other takes its task
over from its standby's store (not wiped, nothing left to read) and enriches orders with it.
Before, the standby stored the topic's raw bytes: the promoted table held the undecodable
values, and the orders met them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streams_app.readback import read_topics
from streams_app.testing.workers import WorkerProcess
from tests.joins.test_enrichment_kafka import COMPACTED
from tests.runtime.helpers import KafkaObserver, app_workers, wait_until
from tests.runtime.test_standby import (
    assignment,
    last_assignment,
    restores,
    start_with_standbys,
)
from tests.windows.test_vs_kafka_streams import create_topics

pytestmark = pytest.mark.kafka

CUSTOMERS = 8
ORDERS = 40


async def produce(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        sent = [await producer.send(topic, key=key.encode(), value=value) for key, value in records]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


async def standby_offsets(worker: WorkerProcess, topic: str) -> dict[int, int | None]:
    """Partition of ``topic`` -> the offset of this worker's standby store of it."""
    body = await assignment(worker)
    return {
        changelog["partition"]: changelog["offset"]
        for standby in body["standbys"]
        for changelog in standby["changelogs"]
        if changelog["topic"] == topic
    }


async def fail_over_to_standby(
    observer: KafkaObserver,
    leaving: WorkerProcess,
    staying: WorkerProcess,
    group: str,
    topic: str,
    store: str,
) -> dict[int, int]:
    """Start both workers with standbys of each other's tasks; once ``group`` has committed
    ``topic`` to its end and ``staying``'s standbys of ``leaving``'s partitions of it stand
    there, stop ``leaving``: ``staying`` takes those tasks over from its standby's ``store``,
    not wiped, with nothing left to read. Returns the end offset of each moved partition."""
    await start_with_standbys(leaving, staying)
    await wait_until(lambda: observer.committed_equals_end(group, topic), timeout=120, interval=0.2)
    moved = last_assignment(leaving)
    assert moved and moved.isdisjoint(last_assignment(staying)), "tasks not split"
    ends = {
        tp.partition: end
        for tp, end in (
            await observer.consumer.end_offsets(await observer.partitions(topic))
        ).items()
    }

    # The standby follows the committed offset (here the end: all processed).
    async def standby_caught_up() -> bool:
        found = await standby_offsets(staying, topic)
        return all(found.get(p) == ends[p] for p in moved)

    await wait_until(standby_caught_up, timeout=60, interval=0.2)

    assert leaving.terminate() == 0, leaving.tail()
    await wait_until(lambda: last_assignment(staying) == {0, 1}, timeout=60)

    async def took_over() -> bool:  # its restores done (the task is running)
        found = await restores(staying, store)
        return all(found.get(p) is not None for p in moved)

    await wait_until(took_over, timeout=60, interval=0.2)
    restored = await restores(staying, store)
    for p in moved:
        restore = restored[p]
        assert restore is not None
        assert not restore["wiped"], restore
        assert restore["stored_offset"] == restore["from_offset"] == ends[p], restore
    return {p: ends[p] for p in moved}


async def test_a_promoted_standby_of_a_table_built_from_a_topic_holds_what_processing_stored(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    customers, orders, enriched = f"customers-{unique}", f"orders-{unique}", f"enriched-{unique}"
    group = f"enrich-{unique}"
    await create_topics(bootstrap_servers, [customers, orders, enriched], 2, {customers: COMPACTED})
    valid = [(f"c{c}", json.dumps({"v": 1}).encode()) for c in range(CUSTOMERS)]
    await produce(bootstrap_servers, customers, valid + [(k, b"not json") for k, _ in valid])
    env = {
        "STREAMS_APP_BROKER": bootstrap_servers,
        "STREAMS_APP_SESSION_TIMEOUT": "3",
        "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
        "STREAMS_APP_TABLE_STANDBY_REPLICAS": "1",
        "TEST_SUFFIX": unique,
    }
    leaving, staying = app_workers(
        "tests.joins.enrichment_app", tmp_path, env, "leaving", "staying"
    )
    async with KafkaObserver(bootstrap_servers) as observer:
        try:
            await fail_over_to_standby(observer, leaving, staying, group, customers, "customers")

            await produce(
                bootstrap_servers,
                orders,
                [(f"c{i % CUSTOMERS}", json.dumps({"id": i}).encode()) for i in range(ORDERS)],
            )
            await wait_until(
                lambda: observer.committed_equals_end(group, orders), timeout=120, interval=0.2
            )
            assert staying.terminate() == 0, staying.tail()
        finally:
            for worker in (leaving, staying):
                if worker.running:
                    worker.kill()
    read = await read_topics(bootstrap_servers, [enriched])
    outputs = [json.loads(r.value) for r in read[enriched]]
    assert sorted(o["id"] for o in outputs) == list(range(ORDERS))
    wrong = [o for o in outputs if o["customer"] != {"v": 1}]
    assert not wrong, f"{len(wrong)} orders met another customer value, e.g. {wrong[:3]}"
