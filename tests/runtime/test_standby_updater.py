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
from streams_app.runtime.replicas import committed_reader
from streams_app.runtime.standby import StandbyTask, StandbyUpdater
from streams_app.runtime.task import TaskId
from streams_app.state import RocksDBStore
from streams_app.state.restore import Accept, restore_partitions
from streams_app.transport.base import ConsumerConfig, TopicPartition
from streams_app.transport.kafka import KafkaTransport
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


def source_filter(bootstrap_servers: str, topic: str) -> Accept:
    """What processing stores of ``topic``'s records, for a table built from it (JSON keys and
    values; the topic, compacted, is the table's changelog)."""
    app = streams_app.App(f"app-{topic}", broker=f"kafka://{bootstrap_servers}")
    source = app.topic(
        topic, key_serializer="json", value_serializer="json", config={"cleanup.policy": "compact"}
    )
    table = app.Table("customers", source=source)
    assert table.changelog_is_source
    return restore_filter(table)


#: One committed transaction (offsets 0-4, marker 5) of a table built from a topic: a key
#: written with two spellings, a value processing dead-letters, a value never decodable.
SOURCE_RECORDS: list[tuple[bytes, bytes | None]] = [
    (b'{"id": 1}', b'{"name": "anna"}'),  # the key spelled with a space
    (b'{"id":1}', b'{"name": "bea"}'),  # the same key: overwrites it
    (b'{"id":2}', b'{"name": "carl"}'),
    (b'{"id":2}', b"not json"),  # dead-lettered by processing: changes nothing
    (b'{"id": 3}', b"\xff"),  # never a table row
]


async def test_a_standby_of_a_table_built_from_a_topic_stores_what_processing_and_restore_do(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """The table's changelog is its source topic: the standby applies each record as restore
    does (``TaskManager.source_filters``), so a record processing dead-letters changes nothing
    and a JSON key written with other spacing is the same row. Before, the standby stored the
    topic's raw bytes: an undecodable value in the table, and one row per key spelling."""
    topic = f"standby-source-{unique}"
    await create_topic(bootstrap_servers, topic)
    accept = source_filter(bootstrap_servers, topic)
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
        await writer.transaction(SOURCE_RECORDS, commit=True)  # offsets 0-4, marker 5
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


async def test_a_standby_of_a_table_built_from_a_topic_stops_at_the_groups_committed_offset(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """Kafka Streams' offset limit for source changelogs: a standby applies the source topic
    only below the group's committed offset (what the active task has processed), so that the
    promotion's restore, limited to that offset, keeps the standby's store instead of wiping
    it. The updater runs as in a worker: its consumer and the group member's committed offsets
    through the real transport (``committed_reader``, as runtime/replicas.py wires it)."""
    topic = f"standby-limit-{unique}"
    await create_topic(bootstrap_servers, topic, partitions=2)
    accept = source_filter(bootstrap_servers, topic)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    writer = Changelog(bootstrap_servers, topic, f"standby-limit-{unique}")
    await writer.producer.start()
    transport = KafkaTransport(bootstrap_servers)
    member = transport.consumer(ConsumerConfig(group_id=f"standby-limit-{unique}"))
    standby_consumer = transport.consumer(ConsumerConfig(group_id=None))
    offsets, restorer = Offsets(bootstrap_servers), RestoreConsumer(bootstrap_servers)
    for client in (member, standby_consumer, offsets.consumer, restorer.consumer):
        await client.start()
    member.assign([tp0, tp1])  # commits as the group's member processing the topic would
    updater = StandbyUpdater(
        standby_consumer,
        offsets,  # type: ignore[arg-type]
        accept={topic: accept},
        committed=committed_reader(member),
        lag_interval=0.2,
    )
    updater.start()
    standby_store = RocksDBStore("customers", tmp_path / "standby")
    restored_store = RocksDBStore("customers", tmp_path / "restored")
    try:
        await writer.transaction(SOURCE_RECORDS, commit=True)  # 0-4, marker 5
        await writer.transaction(
            [(b'{"id": 4}', b'{"name": "dan"}'), (b'{"id":1}', None)], commit=True
        )  # 6-7, marker 8
        await writer.transaction([(b'{"id":9}', b'{"name": "ida"}')], commit=True, partition=1)
        await member.commit({tp0: 3})  # records 0-2 processed; nothing of partition 1
        s0, s1 = standby_store.partition(0), standby_store.partition(1)
        updater.update(
            {
                TaskId(0, 0): StandbyTask(TaskId(0, 0), {tp0: s0}),
                TaskId(0, 1): StandbyTask(TaskId(0, 1), {tp1: s1}),
            }
        )
        await wait_until(lambda: s0.changelog_offset == 3 and s1.changelog_offset == 0, 30)
        first = {b'{"id":1}': b'{"name":"bea"}', b'{"id":2}': b'{"name":"carl"}'}
        assert dict(s0.items()) == first
        assert dict(s1.items()) == {}

        # Partition 1's limit moves: once the standby has followed it, it has read the limits
        # again, and partition 0 stayed at its own.
        await member.commit({tp0: 3, tp1: 2})
        await wait_until(lambda: s1.changelog_offset == 2, timeout=30)
        assert dict(s1.items()) == {b'{"id":9}': b'{"name":"ida"}'}
        assert s0.changelog_offset == 3 and dict(s0.items()) == first

        # Partition 0's limit moves past the dead-lettered records and the marker.
        await member.commit({tp0: 6, tp1: 2})
        await wait_until(lambda: s0.changelog_offset == 6, timeout=30)
        assert dict(s0.items()) == first

        # Promotion with the group at 8 (the last transaction processed): the restore keeps
        # the standby's store and reads only the tail; the result is a full restore's.
        updater.update({})
        results = await restore_partitions(
            {tp0: s0}, restorer, offsets, limits={tp0: 8}, accept={tp0: accept}
        )  # type: ignore[arg-type]
        assert not results[tp0].wiped
        assert (results[tp0].from_offset, results[tp0].to_offset) == (6, 8)
        restored = restored_store.partition(0)
        await restore_partitions(
            {tp0: restored}, restorer, offsets, limits={tp0: 8}, accept={tp0: accept}
        )  # type: ignore[arg-type]
        expected = {b'{"id":2}': b'{"name":"carl"}', b'{"id":4}': b'{"name":"dan"}'}
        assert dict(restored.items()) == expected
        assert dict(s0.items()) == expected
    finally:
        await updater.stop()  # stops its consumer too
        for client in (member, offsets.consumer, restorer.consumer):
            await client.stop()
        await writer.producer.stop()
        standby_store.close()
        restored_store.close()
