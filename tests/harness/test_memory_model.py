"""The in-memory Kafka model on its own, and what only it can do (freeze a worker)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from streams_app.testing import (
    DriverFactory,
    ManualClock,
    MemoryBackend,
    MemoryKafka,
    assert_output,
    assert_table,
)
from streams_app.testing.memory import MemoryConsumer
from streams_app.transport.base import ConsumerConfig, ProducerConfig, TopicPartition
from tests.harness.test_count import KEYS
from tests.harness.test_count import running_counts as running
from topologies import count


class Listener:
    def __init__(self) -> None:
        self.assigned: set[TopicPartition] = set()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.assigned = set()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned = set(assigned)


@pytest.mark.streams_backends("memory")
async def test_a_frozen_zombie_is_fenced_by_its_generation(
    topology_driver: DriverFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # A transaction timeout far beyond the freeze: the group generation (KIP-447) is what
    # fences the zombie, not the transaction coordinator.
    async with topology_driver(count.app, workers=2, transaction_timeout=120.0) as driver:
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
        await driver.process()  # both workers hold an open transaction
        driver.pause(0)  # SIGSTOP
        await driver.advance_time(12)  # its session expires; the survivor takes over
        assert len(driver.worker(1).tasks.by_tp) == 4
        with caplog.at_level(logging.WARNING, logger="streams_app.runtime.worker"):
            driver.resume(0)  # SIGCONT: the zombie tries to commit on revocation
            await driver.run_until_idle()
        assert "commit on revocation failed (CommitFailedError)" in caplog.text
        assert driver.worker(0).producer.transactions_aborted >= 1

        assert_output(await driver.read("count-output"), running(KEYS))
        assert_table(await driver.table("counts"), dict(Counter(KEYS)), table="counts")


@pytest.mark.streams_backends("memory")
async def test_restore_from_a_compacted_changelog(topology_driver: DriverFactory) -> None:
    async with topology_driver(count.app, store="memory://") as driver:
        for _ in range(3):
            await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
            await driver.run_until_idle()
        assert isinstance(driver.backend, MemoryBackend)
        removed = driver.backend.broker.compact()  # only the changelog is compacted
        assert removed > 0
        await driver.crash()
        await driver.restart()  # memory store: restored from the compacted changelog
        expected = dict(Counter(KEYS * 3))
        assert await driver.table("counts", source="store") == expected
        assert await driver.table("counts") == expected


async def test_an_idempotent_producer_drops_a_retried_send() -> None:
    broker = MemoryKafka()
    broker.create_topic("t", 1)
    transport = broker.transport()
    idempotent = transport.producer(ProducerConfig(transactional_id=None))
    plain = transport.producer(
        ProducerConfig(transactional_id=None, acks=1, enable_idempotence=False)
    )
    for producer in (idempotent, plain):
        await producer.start()
        producer.duplicate_next_send = True  # the ack is lost, the client retries
        await producer.send("t", key=b"k", value=b"v")
    # One copy from the idempotent producer, two from the other.
    assert [r.offset for r in broker.read("t")] == [0, 1, 2]


async def test_getmany_waits_on_the_clock_without_spinning() -> None:
    clock = ManualClock()
    broker = MemoryKafka(clock)
    broker.create_topic("t", 1)
    consumer = broker.transport("w").consumer(ConsumerConfig(group_id=None))
    await consumer.start()
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    fetch = asyncio.ensure_future(consumer.getmany(timeout_ms=1_000))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not fetch.done()
    assert clock.parked("w") == 1  # one wait, parked: no loop around it
    assert clock.next_deadline() == 1.0
    clock.advance(0.999)
    await asyncio.sleep(0)
    assert not fetch.done()
    broker.append(tp, key=b"k", value=b"v")  # data ends the wait at once
    batch = await fetch
    assert [r.offset for r in batch[tp]] == [0]
    assert clock.parked("w") == 0

    empty = asyncio.ensure_future(consumer.getmany(timeout_ms=500))
    await asyncio.sleep(0)
    clock.advance(0.5)
    assert await empty == {}


async def test_max_records_never_skips_a_record() -> None:
    broker = MemoryKafka()
    broker.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    for i in range(5):
        broker.append(tp, key=b"%d" % i, value=b"v")
    consumer = broker.transport().consumer(ConsumerConfig(group_id=None))
    await consumer.start()
    consumer.assign([tp])
    consumer.seek(tp, 0)
    seen = []
    while len(seen) < 5:
        batch = await consumer.getmany(timeout_ms=0, max_records=2)
        seen += [r.offset for r in batch.get(tp, ())]
        assert await consumer.position(tp) == seen[-1] + 1
    assert seen == [0, 1, 2, 3, 4]


async def test_a_member_that_stops_polling_is_expelled_by_the_rebalance_timeout() -> None:
    clock = ManualClock()
    broker = MemoryKafka(clock)
    broker.create_topic("t", 2)
    config = ConsumerConfig(group_id="g", max_poll_interval_ms=60_000)
    first, second = broker.transport("a").consumer(config), broker.transport("b").consumer(config)
    one, two = Listener(), Listener()
    for consumer, listener in ((first, one), (second, two)):
        await consumer.start()
        consumer.subscribe(["t"], listener)
    await first.getmany(0)
    assert len(one.assigned) == 2
    await second.getmany(0)  # joins; the group waits for the first to rejoin
    assert broker.groups["g"].state == "PreparingRebalance"
    clock.advance(59)
    assert broker.groups["g"].state == "PreparingRebalance"
    clock.advance(1)  # the first never polled: expelled, the rebalance completes
    await second.getmany(0)
    assert len(two.assigned) == 2
    assert isinstance(first, MemoryConsumer)
    # The expelled member finds out on its next poll: it loses everything and rejoins.
    await first.getmany(0)
    assert one.assigned == set()


async def test_a_killed_member_is_expelled_after_its_session_timeout() -> None:
    clock = ManualClock()
    broker = MemoryKafka(clock)
    broker.create_topic("t", 2)
    config = ConsumerConfig(group_id="g", session_timeout_ms=10_000)
    dead, alive = broker.transport("a").consumer(config), broker.transport("b").consumer(config)
    listener = Listener()
    await dead.start()
    dead.subscribe(["t"], Listener())
    await dead.getmany(0)
    dead.kill()  # no LeaveGroup
    await alive.start()
    alive.subscribe(["t"], listener)
    await alive.getmany(0)
    assert listener.assigned == set()
    clock.advance(10)
    await alive.getmany(0)
    assert len(listener.assigned) == 2


async def run_crash_scenario(tmp: str) -> list[tuple[object, ...]]:
    """A crash, a restart and a second worker, in memory; everything observable, with offsets."""
    from streams_app.testing import TopologyDriver

    driver = TopologyDriver.memory(count.app, store="memory://", state_dir=tmp)
    async with driver:
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
        await driver.process()
        await driver.crash()
        await driver.restart()
        await driver.add_worker()
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
        await driver.run_until_idle()
        records = await driver.read("count-output", committed=False)
        return [
            (driver.clock.monotonic(),),
            *(
                (r.partition, r.offset, r.key, r.value, r.timestamp - driver.stream_time)
                for r in records
            ),
        ]


async def test_memory_runs_are_deterministic(tmp_path: object) -> None:
    first = await run_crash_scenario(f"{tmp_path}/a")
    second = await run_crash_scenario(f"{tmp_path}/b")
    assert first == second
    assert first[0][0] > 0  # the session timeout of the crashed worker passed on the clock
