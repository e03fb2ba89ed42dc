"""A standby task's store holds exactly the committed changelog, on the real broker.

The changelog is written by transactional producers (committed, open and aborted
transactions); the :class:`StandbyUpdater` tails it read_committed into a RocksDB store
partition. Kafka offers no event for "the standby has seen this", so every negative claim (an
open transaction not applied, a dropped standby not written) is checked after the updater has
demonstrably applied something written *later* to another partition it follows: its fetches
had passed the moment in question.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from streams_app.runtime.standby import StandbyTask, StandbyUpdater
from streams_app.runtime.task import TaskId
from streams_app.state import RocksDBStore
from streams_app.transport.base import TopicPartition
from tests.runtime.helpers import wait_until
from tests.state.test_restore import Changelog, Offsets, RestoreConsumer, create_topic

pytestmark = pytest.mark.kafka


@pytest.fixture
async def updater(bootstrap_servers: str) -> AsyncIterator[StandbyUpdater]:
    consumer, offsets = RestoreConsumer(bootstrap_servers), Offsets(bootstrap_servers)
    await consumer.consumer.start()
    await offsets.consumer.start()
    updater = StandbyUpdater(consumer, offsets, caught_up_lag=0, lag_interval=0.2)  # type: ignore[arg-type]
    updater.start()
    try:
        yield updater
    finally:
        await updater.stop()  # stops the consumer too
        await offsets.consumer.stop()


async def test_a_standby_applies_committed_transactions_only_and_stops_writing_when_dropped(
    bootstrap_servers: str, unique: str, tmp_path: Path, updater: StandbyUpdater
) -> None:
    topic = f"standby-changelog-{unique}"
    await create_topic(bootstrap_servers, topic, partitions=2)
    writer = Changelog(bootstrap_servers, topic, f"standby-a-{unique}")
    other = Changelog(bootstrap_servers, topic, f"standby-b-{unique}")
    await writer.producer.start()
    await other.producer.start()
    store = RocksDBStore("table", tmp_path / "table")
    try:
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        part0, part1 = store.partition(0), store.partition(1)

        def at(part: object, offset: int) -> Callable[[], bool]:
            return lambda: part.changelog_offset == offset  # type: ignore[attr-defined]

        await writer.transaction([(b"k1", b"v1"), (b"k2", b"v2")], commit=True)  # 0-1, marker 2
        tasks = {
            TaskId(0, 0): StandbyTask(TaskId(0, 0), {tp0: part0}),
            TaskId(0, 1): StandbyTask(TaskId(0, 1), {tp1: part1}),
        }
        updater.update(tasks)
        await wait_until(at(part0, 3), timeout=30)
        assert dict(part0.items()) == {b"k1": b"v1", b"k2": b"v2"}

        # An open transaction on partition 0, then a commit on partition 1 after it: once the
        # standby has applied the latter, it has fetched past the former's records.
        await writer.producer.begin_transaction()
        await writer.producer.send_and_wait(topic, b"open", key=b"k1", partition=0)
        await writer.producer.send_and_wait(topic, b"open", key=b"k3", partition=0)
        await other.transaction([(b"p1", b"x")], commit=True, partition=1)  # 0, marker 1
        await wait_until(at(part1, 2), timeout=30)
        assert dict(part0.items()) == {b"k1": b"v1", b"k2": b"v2"}
        assert part0.changelog_offset == 3  # held at the open transaction's first record
        await writer.producer.abort_transaction()  # 3-4 aborted, marker 5

        await writer.transaction([(b"k2", None), (b"k4", b"v4")], commit=True)  # 6-7, marker 8
        await wait_until(at(part0, 9), timeout=30)
        assert dict(part0.items()) == {b"k1": b"v1", b"k4": b"v4"}  # nothing of the aborted
        await wait_until(lambda: tasks[TaskId(0, 0)].lag == 0, timeout=30)
        assert tasks[TaskId(0, 0)].caught_up_at is not None

        # Partition 0 made active elsewhere (dropped from the standby set): no more writes.
        updater.update({TaskId(0, 1): tasks[TaskId(0, 1)]})
        await writer.transaction([(b"k5", b"v5")], commit=True)  # 9, marker 10
        await other.transaction([(b"p2", b"y")], commit=True, partition=1)  # 2, marker 3
        await wait_until(at(part1, 4), timeout=30)
        assert part0.changelog_offset == 9
        assert dict(part0.items()) == {b"k1": b"v1", b"k4": b"v4"}
    finally:
        await writer.producer.stop()
        await other.producer.stop()
        store.close()
