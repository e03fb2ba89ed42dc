"""Test data for the Spark tests: transactional producers, expected results, small helpers.

The runtime is not what these tests check, so records are written with raw aiokafka producers
(``transactional_id`` set: committed, aborted and open transactions on purpose).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
from collections import defaultdict
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from topologies.orders.models import Reserved

T = TypeVar("T")

#: JVM options for test sessions: a C1-only JIT and the serial GC start Spark ~2 s faster and
#: run these small batches faster on a 2-core machine.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
TEST_CONF = {"spark.driver.extraJavaOptions": FAST_JVM}
#: The hour (UTC) test records are stamped from: recent, because the broker deletes segments
#: whose records are older than its retention (7 days) and rejects timestamps more than an hour
#: ahead; every record lies within the 3 hours after it, all in the past.
BASE_HOUR = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=4)).replace(
    minute=0, second=0, microsecond=0
)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on its own loop in a worker thread (the tests themselves are sync)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


@dataclass(frozen=True)
class Reservation:
    """One ``inventory`` record as a test writes it."""

    order_id: str
    item: str
    qty: int
    partition: int
    minutes: int  # after BASE_HOUR

    @property
    def timestamp(self) -> dt.datetime:
        return BASE_HOUR + dt.timedelta(minutes=self.minutes)

    @property
    def hour(self) -> dt.datetime:
        return self.timestamp.replace(minute=0, second=0, microsecond=0)

    def value(self) -> bytes:
        record = Reserved(order_id=self.order_id, item=self.item, qty=self.qty, stock_after=0)
        return bytes(record.dumps())  # faust adds "__faust": the reader ignores it


def reservations(prefix: str, count: int, *, qty: int = 1, start: int = 0) -> list[Reservation]:
    """``count`` reservations over 2 partitions, 2 items and 3 hours; distinct quantities."""
    items = ("apple", "pear")
    return [
        Reservation(
            order_id=f"{prefix}{i}",
            item=items[i % 2],
            qty=qty + i,
            partition=(i // 2) % 2,
            minutes=(i * 13) % 180,
        )
        for i in range(start, start + count)
    ]


def hourly_totals(records: Iterable[Reservation]) -> dict[tuple[str, dt.datetime], tuple[int, int]]:
    """What ``reserved_per_item_hour`` must hold: (item, hour) -> (reserved qty, orders)."""
    totals: dict[tuple[str, dt.datetime], list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        totals[(r.item, r.hour)][0] += r.qty
        totals[(r.item, r.hour)][1] += 1
    return {key: (qty, orders) for key, (qty, orders) in totals.items()}


async def create_topic(bootstrap: str, name: str, partitions: int = 2) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


def transactional_producer(
    bootstrap: str, transactional_id: str, *, transaction_timeout_ms: int = 60000
) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        transaction_timeout_ms=transaction_timeout_ms,
    )


async def send_transaction(
    producer: AIOKafkaProducer,
    topic: str,
    records: Sequence[Reservation],
    *,
    commit: bool | None = True,
) -> None:
    """One transaction holding ``records``: committed, aborted, or (None) left open."""
    await producer.begin_transaction()
    futures = [
        await producer.send(
            topic,
            r.value(),
            key=r.item.encode(),
            partition=r.partition,
            timestamp_ms=int(r.timestamp.timestamp() * 1000),
        )
        for r in records
    ]
    await asyncio.gather(*futures)
    if commit is True:
        await producer.commit_transaction()
    elif commit is False:
        await producer.abort_transaction()


async def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[int]:
    """Per partition: the last stable offset (read_committed) or the high watermark."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return [ends[tp] for tp in tps]
    finally:
        await consumer.stop()


async def wait_until_settled(bootstrap: str, topic: str, partitions: int, timeout: float) -> None:
    """Until no partition has an open transaction (last stable offset = high watermark).

    Kafka has no event for "the coordinator aborted a timed-out transaction", so poll.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        stable = await end_offsets(bootstrap, topic, partitions, "read_committed")
        high = await end_offsets(bootstrap, topic, partitions, "read_uncommitted")
        if stable == high:
            return
        if loop.time() > deadline:
            raise AssertionError(f"{topic}: transactions still open after {timeout}s")
        await asyncio.sleep(0.2)
