"""Helpers for the Kafka client layer tests (real broker, no mocks)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams_app.kafka import KafkaAdmin, StableConsumer, TransactionalProducer
from streams_app.transport.base import TopicSpec


async def create_topics(bootstrap: str, *specs: TopicSpec) -> None:
    admin = KafkaAdmin(bootstrap)
    await admin.start()
    try:
        await admin.create_topics(list(specs))
    finally:
        await admin.close()


async def eventually(
    condition: Callable[[], Any | Awaitable[Any]], timeout: float = 30.0, what: str = ""
) -> Any:
    """Poll ``condition`` until it returns something truthy (Kafka offers no event for it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        await asyncio.sleep(0.05)


async def stable_and_high_watermark(bootstrap: str, tp: tuple[str, int]) -> tuple[int, int]:
    """(last stable offset, high watermark): equal when no transaction is open on ``tp``."""
    tp = TopicPartition(*tp)
    committed = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await committed.start()
    await uncommitted.start()
    try:
        lso = (await committed.end_offsets([tp]))[tp]
        hw = (await uncommitted.end_offsets([tp]))[tp]
        return lso, hw
    finally:
        await committed.stop()
        await uncommitted.stop()


async def no_open_transaction(bootstrap: str, tp: tuple[str, int], timeout: float = 5.0) -> int:
    """Wait until the last stable offset of ``tp`` reaches its high watermark; return it.

    EndTxn returns before the coordinator has written the markers, so this takes a moment
    even after a commit or abort. ``timeout`` is far below the tests' transaction timeout
    (60 s): a transaction left open (an abort that never reached the broker) still fails.
    """

    async def settled() -> int | None:
        lso, hw = await stable_and_high_watermark(bootstrap, tp)
        return hw if lso == hw else None

    result: int = await eventually(settled, timeout, what=f"no open transaction on {tp}")
    return result


async def read_committed(bootstrap: str, tp: tuple[str, int]) -> list[bytes | None]:
    """Every value of ``tp`` a read_committed consumer sees once no transaction is open."""
    tp = TopicPartition(*tp)
    await no_open_transaction(bootstrap, tp)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        values: list[bytes | None] = []
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            values.extend(record.value for record in batch.get(tp, []))
        return values
    finally:
        await consumer.stop()


def member(bootstrap: str, group: str, **overrides: Any) -> StableConsumer:
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": group,
        "enable_auto_commit": False,
        "isolation_level": "read_committed",
        "auto_offset_reset": "earliest",
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 500,
    }
    settings.update(overrides)
    return StableConsumer(**settings)


def transactional(bootstrap: str, transactional_id: str, **overrides: Any) -> TransactionalProducer:
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "transactional_id": transactional_id,
        # Long enough that nothing in a test is aborted by the broker's timeout: an open
        # transaction that disappears "by itself" would hide a missing EndTxn(ABORT).
        "transaction_timeout_ms": 60_000,
    }
    settings.update(overrides)
    return TransactionalProducer(**settings)


async def joined(consumer: StableConsumer, topics: list[str]) -> None:
    """Subscribe and wait for the first assignment."""
    consumer.subscribe(topics)
    await eventually(consumer.assignment, what="an assignment")
