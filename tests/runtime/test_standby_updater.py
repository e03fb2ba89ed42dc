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

import streams_app
from streams_app.runtime.joins.sources import restore_filter
from streams_app.runtime.standby import StandbyTask, StandbyUpdater
from streams_app.runtime.task import TaskId
from streams_app.state import RocksDBStore
from streams_app.state.restore import restore_partitions
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


async def test_a_standby_of_a_table_built_from_a_topic_stores_what_processing_and_restore_do(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """The table's changelog is its source topic: the standby applies each record as restore
    does (``TaskManager.source_filters``), so a record processing dead-letters changes nothing
    and a JSON key written with other spacing is the same row. Before, the standby stored the
    topic's raw bytes: an undecodable value in the table, and one row per key spelling."""
    topic = f"standby-source-{unique}"
    await create_topic(bootstrap_servers, topic)
    app = streams_app.App(f"standby-source-{unique}", broker=f"kafka://{bootstrap_servers}")
    source = app.topic(
        topic,
        key_serializer="json",
        value_serializer="json",
        config={"cleanup.policy": "compact"},
    )
    table = app.Table("customers", source=source)
    assert table.changelog_is_source
    accept = restore_filter(table)
    writer = Changelog(bootstrap_servers, topic, f"standby-source-{unique}")
    await writer.producer.start()
    consumer, offsets = RestoreConsumer(bootstrap_servers), Offsets(bootstrap_servers)
    restorer = RestoreConsumer(bootstrap_servers)
    for started in (consumer.consumer, offsets.consumer, restorer.consumer):
        await started.start()
    updater = StandbyUpdater(consumer, offsets, accept={topic: accept})  # type: ignore[arg-type]
    updater.start()
    standby_store = RocksDBStore("customers", tmp_path / "standby")
    restored_store = RocksDBStore("customers", tmp_path / "restored")
    try:
        await writer.transaction(
            [
                (b'{"id": 1}', b'{"name": "anna"}'),  # the key spelled with a space
                (b'{"id":1}', b'{"name": "bea"}'),  # the same key: overwrites it
                (b'{"id":2}', b'{"name": "carl"}'),
                (b'{"id":2}', b"not json"),  # dead-lettered by processing: changes nothing
                (b'{"id": 3}', b"\xff"),  # never a table row
            ],
            commit=True,
        )  # offsets 0-4, marker 5
        tp = TopicPartition(topic, 0)
        standby = standby_store.partition(0)
        updater.update({TaskId(0, 0): StandbyTask(TaskId(0, 0), {tp: standby})})
        await wait_until(lambda: standby.changelog_offset == 6, timeout=30)
        expected = {b'{"id":1}': b'{"name":"bea"}', b'{"id":2}': b'{"name":"carl"}'}
        assert dict(standby.items()) == expected
        assert updater.tasks[TaskId(0, 0)].applied == 3

        # Restore (a task with the topic committed to its end) stores the same.
        restored = restored_store.partition(0)
        await restore_partitions(
            {tp: restored}, restorer, offsets, limits={tp: 6}, accept={tp: accept}
        )  # type: ignore[arg-type]
        assert restored.changelog_offset == 6
        assert dict(restored.items()) == expected

        # Promotion: the task restores from the standby's store, which it keeps as it is.
        updater.update({})
        results = await restore_partitions(
            {tp: standby}, restorer, offsets, limits={tp: 6}, accept={tp: accept}
        )  # type: ignore[arg-type]
        assert not results[tp].wiped and not results[tp].read_anything
        assert dict(standby.items()) == expected
    finally:
        await updater.stop()  # stops its consumer too
        for stopped in (offsets.consumer, restorer.consumer):
            await stopped.stop()
        await writer.producer.stop()
        standby_store.close()
        restored_store.close()
