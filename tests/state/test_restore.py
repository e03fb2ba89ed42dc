"""Restoring store partitions from changelogs written by a transactional producer, on the real
embedded broker: committed state only, tail-only restores, wipes, refusals, and stalls on open
transactions.

The consumer and offsets sources are thin adapters over raw aiokafka (a read_committed consumer,
and a read_uncommitted one for high watermarks), shaped like the ConsumerClient / AdminClient
protocols restore is written against.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as KTP
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete

from streams_app.state import (
    RestoreStalledError,
    Store,
    StorePartition,
    restore_partitions,
)
from streams_app.state.errors import ChangelogBeyondEnd
from streams_app.transport.base import TopicPartition

pytestmark = pytest.mark.kafka


class RestoreConsumer:
    """read_committed, no group, never resets: the ConsumerClient subset restore uses."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="none",
        )
        self.fetched = 0

    def assign(self, partitions: Collection[TopicPartition]) -> None:
        self.consumer.assign([KTP(*tp) for tp in partitions])

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.consumer.seek(KTP(*tp), offset)

    async def getmany(
        self, timeout_ms: int, max_records: int | None = None
    ) -> Mapping[TopicPartition, Sequence[Any]]:
        batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        self.fetched += sum(len(records) for records in batches.values())
        return {TopicPartition(*tp): records for tp, records in batches.items()}

    async def position(self, tp: TopicPartition) -> int:
        return int(await self.consumer.position(KTP(*tp)))


class Offsets:
    """Beginning offsets and high watermarks (read_uncommitted ListOffsets)."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level="read_uncommitted"
        )

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        got = await self.consumer.beginning_offsets([KTP(*tp) for tp in partitions])
        return {TopicPartition(*tp): o for tp, o in got.items()}

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        got = await self.consumer.end_offsets([KTP(*tp) for tp in partitions])
        return {TopicPartition(*tp): o for tp, o in got.items()}


@pytest.fixture
async def clients(bootstrap_servers: str) -> AsyncIterator[tuple[RestoreConsumer, Offsets]]:
    consumer, offsets = RestoreConsumer(bootstrap_servers), Offsets(bootstrap_servers)
    await consumer.consumer.start()
    await offsets.consumer.start()
    try:
        yield consumer, offsets
    finally:
        await consumer.consumer.stop()
        await offsets.consumer.stop()


async def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


class Changelog:
    """A transactional producer writing changelog records to chosen partitions."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        self.topic = topic
        self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=txn_id)

    async def transaction(
        self, records: Sequence[tuple[bytes, bytes | None]], *, commit: bool, partition: int = 0
    ) -> None:
        await self.producer.begin_transaction()
        for key, value in records:
            await self.producer.send_and_wait(self.topic, value, key=key, partition=partition)
        if commit:
            await self.producer.commit_transaction()
        else:
            await self.producer.abort_transaction()


@pytest.fixture
async def changelog(bootstrap_servers: str, unique: str) -> AsyncIterator[Changelog]:
    topic = f"changelog-{unique}"
    await create_topic(bootstrap_servers, topic, partitions=3)
    log = Changelog(bootstrap_servers, topic, f"restore-test-{unique}")
    await log.producer.start()
    try:
        yield log
    finally:
        await log.producer.stop()


async def test_restore_committed_state_then_only_the_tail_then_refuse_when_beyond_end(
    store: Store, changelog: Changelog, clients: tuple[RestoreConsumer, Offsets]
) -> None:
    consumer, offsets = clients
    tp = TopicPartition(changelog.topic, 0)
    await changelog.transaction([(b"k1", b"v1"), (b"k2", b"v2"), (b"k3", b"v3")], commit=True)
    await changelog.transaction([(b"k1", b"aborted"), (b"k4", b"aborted")], commit=False)
    await changelog.transaction([(b"k2", None), (b"k5", b"v5"), (b"k1", b"v1b")], commit=True)
    # offsets: 0-2 txn1, 3 marker, 4-5 aborted, 6 marker, 7-9 txn3, 10 marker -> end 11
    part = store.partition(0)
    progress: list[tuple[int, int]] = []

    results = await restore_partitions(
        {tp: part},
        consumer,
        offsets,
        on_progress=lambda _tp, pos, end: progress.append((pos, end)),
    )

    first = results[tp]
    assert (first.stored_offset, first.from_offset, first.to_offset) == (None, 0, 11)
    assert first.records == 6 and not first.wiped and first.read_anything
    assert part.changelog_offset == 11
    assert dict(part.items()) == {b"k1": b"v1b", b"k3": b"v3", b"k5": b"v5"}
    assert progress[0] == (0, 11) and progress[-1] == (11, 11)  # the start, then the end
    assert consumer.consumer.assignment() == set()  # unassigned when done

    # More commits (and an aborted transaction at the very end): only the tail is read.
    await changelog.transaction([(b"k3", None), (b"k6", b"v6")], commit=True)
    await changelog.transaction([(b"k7", b"aborted")], commit=False)
    # offsets: 11-12 txn4, 13 marker, 14 aborted, 15 marker -> end 16
    fetched_before = consumer.fetched
    second = (await restore_partitions({tp: part}, consumer, offsets))[tp]
    assert (second.stored_offset, second.from_offset, second.to_offset) == (11, 11, 16)
    assert second.records == 2 and not second.wiped
    assert consumer.fetched - fetched_before == 2  # the consumer itself read only the tail
    assert part.changelog_offset == 16
    assert dict(part.items()) == {b"k1": b"v1b", b"k5": b"v5", b"k6": b"v6"}

    # Up to date: nothing to read, the consumer is not even assigned.
    third = (await restore_partitions({tp: part}, consumer, offsets))[tp]
    assert (third.from_offset, third.to_offset, third.records) == (16, 16, 0)
    assert not third.read_anything

    # A stored offset beyond the end (the changelog was deleted and recreated): the store may
    # hold the only copy of the table, so restore refuses, and leaves the store as it is.
    part.write({b"only-here": b"x"}, 1000)
    with pytest.raises(ChangelogBeyondEnd) as info:
        await restore_partitions({tp: part}, consumer, offsets)
    assert info.value.partitions == {(tp.topic, tp.partition): (1000, 16)}
    assert dict(part.items())[b"only-here"] == b"x"
    assert part.changelog_offset == 1000


async def test_a_tail_of_only_aborted_records_and_markers_still_reaches_the_end(
    store: Store, changelog: Changelog, clients: tuple[RestoreConsumer, Offsets]
) -> None:
    consumer, offsets = clients
    tp = TopicPartition(changelog.topic, 1)
    await changelog.transaction([(b"a", b"1")], commit=True, partition=1)
    part = store.partition(1)
    await restore_partitions({tp: part}, consumer, offsets)
    assert part.changelog_offset == 2
    await changelog.transaction([(b"a", b"x"), (b"b", b"y")], commit=False, partition=1)
    await changelog.transaction([], commit=True, partition=1)  # an empty transaction
    result = (await restore_partitions({tp: part}, consumer, offsets, stall_timeout=10))[tp]
    assert result.records == 0
    assert result.from_offset == 2 and result.to_offset == 5
    assert part.changelog_offset == 5
    assert dict(part.items()) == {b"a": b"1"}


async def test_several_partitions_at_once_each_from_its_own_offset(
    store: Store, changelog: Changelog, clients: tuple[RestoreConsumer, Offsets]
) -> None:
    consumer, offsets = clients
    tps = [TopicPartition(changelog.topic, p) for p in range(3)]
    for p in (0, 1):
        await changelog.transaction(
            [(f"k{i}".encode(), f"p{p}-{i}".encode()) for i in range(50)], commit=True, partition=p
        )
    parts: dict[TopicPartition, StorePartition] = {tp: store.partition(tp[1]) for tp in tps}
    # Partition 1 already holds the first 20 records (as if restored before, or committed).
    parts[tps[1]].write({f"k{i}".encode(): f"p1-{i}".encode() for i in range(20)}, 20)

    results = await restore_partitions(parts, consumer, offsets, max_records=7)

    assert (results[tps[0]].from_offset, results[tps[0]].records) == (0, 50)
    assert (results[tps[1]].from_offset, results[tps[1]].records) == (20, 30)
    assert (results[tps[2]].from_offset, results[tps[2]].to_offset) == (0, 0)
    assert parts[tps[2]].changelog_offset == 0  # an empty changelog is restored too
    for p in (0, 1):
        assert parts[tps[p]].changelog_offset == 51
        assert dict(parts[tps[p]].items()) == {
            f"k{i}".encode(): f"p{p}-{i}".encode() for i in range(50)
        }


async def test_offset_before_the_beginning_wipes_and_restores_what_remains(
    store: Store,
    changelog: Changelog,
    clients: tuple[RestoreConsumer, Offsets],
    bootstrap_servers: str,
) -> None:
    consumer, offsets = clients
    tp = TopicPartition(changelog.topic, 2)
    await changelog.transaction([(b"old", b"1")], commit=True, partition=2)  # 0, marker 1
    await changelog.transaction([(b"new", b"2")], commit=True, partition=2)  # 2, marker 3
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_records({KTP(*tp): RecordsToDelete(before_offset=2)})
    finally:
        await admin.close()
    part = store.partition(2)
    part.write({b"mine": b"x"}, 1)  # the store stopped at 1, which retention has since removed

    result = (await restore_partitions({tp: part}, consumer, offsets))[tp]

    assert result.wiped and (result.from_offset, result.to_offset, result.records) == (2, 4, 1)
    assert dict(part.items()) == {b"new": b"2"}


async def test_an_open_transaction_stalls_restore_with_a_clear_error(
    store: Store,
    changelog: Changelog,
    clients: tuple[RestoreConsumer, Offsets],
    bootstrap_servers: str,
    unique: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    consumer, offsets = clients
    tp = TopicPartition(changelog.topic, 0)
    await changelog.transaction([(b"a", b"1")], commit=True)  # 0, marker 1
    zombie = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, transactional_id=f"z-{unique}")
    await zombie.start()
    try:
        await zombie.begin_transaction()
        await zombie.send_and_wait(changelog.topic, b"never", key=b"b", partition=0)  # 2
        part = store.partition(0)
        with pytest.raises(RestoreStalledError, match=rf"{changelog.topic}\[0\]") as info:
            await restore_partitions({tp: part}, consumer, offsets, stall_timeout=1.5)
        assert info.value.stalled == {f"{changelog.topic}[0]": (2, 3)}
        assert "transaction.timeout.ms" in str(info.value)
        # Said once before the error, with the way out (the worker is not ready meanwhile).
        [warning] = [r.getMessage() for r in caplog.records if "no progress" in r.getMessage()]
        assert f"{changelog.topic}[0]: no progress" in warning and "txn hanging" in warning
        # What was committed before the open transaction is kept, with its offset.
        assert part.changelog_offset == 2
        assert dict(part.items()) == {b"a": b"1"}
        assert consumer.consumer.assignment() == set()

        await zombie.abort_transaction()  # 2 aborted, marker 3
        result = (await asyncio.wait_for(restore_partitions({tp: part}, consumer, offsets), 30))[tp]
        assert (result.from_offset, result.to_offset, result.records) == (2, 4, 0)
        assert dict(part.items()) == {b"a": b"1"}
    finally:
        await zombie.stop()


async def stable_at(bootstrap: str, tp: TopicPartition, offset: int) -> None:
    """Until a read_committed reader's end (the last stable offset) of ``tp`` reaches
    ``offset``: commit markers are written after ``commit_transaction`` returns."""
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await reader.start()
    try:
        while (await reader.end_offsets([KTP(*tp)]))[KTP(*tp)] < offset:
            await asyncio.sleep(0.01)
    finally:
        await reader.stop()


class GrowsAfterTheEnd:
    """High watermarks as :class:`Offsets` gives them, then one more committed transaction,
    stable up to ``until``, before they are returned: the changelog grows between restore
    reading its end and fetching, as when the partition's previous owner (or, for a zombie's
    restore, its new owner) is still writing."""

    def __init__(
        self,
        bootstrap: str,
        offsets: Offsets,
        changelog: Changelog,
        late: list[tuple[bytes, bytes | None]],
        until: int,
    ) -> None:
        self.bootstrap = bootstrap
        self.offsets = offsets
        self.changelog = changelog
        self.late = late
        self.until = until
        self.ends: dict[TopicPartition, int] = {}

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return await self.offsets.beginning_offsets(partitions)

    async def end_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        self.ends = await self.offsets.end_offsets(partitions)
        await self.changelog.transaction(self.late, commit=True)
        for tp in partitions:
            await stable_at(self.bootstrap, tp, self.until)
        return self.ends


async def test_records_committed_after_restore_read_the_end_are_applied_with_their_offset(
    store: Store,
    changelog: Changelog,
    clients: tuple[RestoreConsumer, Offsets],
    bootstrap_servers: str,
) -> None:
    """Issue 38's lost updates: the restore's last fetch returned records beyond the end it had
    read; they were dropped but the position past them was stored, so the store claimed writes
    it never had, and a worker resumed from the committed input offset with short sums."""
    consumer, offsets = clients
    tp = TopicPartition(changelog.topic, 0)
    await changelog.transaction([(b"a", b"1"), (b"b", b"1")], commit=True)  # 0-1, marker 2
    await stable_at(bootstrap_servers, tp, 3)
    late: list[tuple[bytes, bytes | None]] = [(b"b", b"2"), (b"c", b"2")]  # 3-4, marker 5
    grows = GrowsAfterTheEnd(bootstrap_servers, offsets, changelog, late, until=6)
    part = store.partition(0)

    result = (await restore_partitions({tp: part}, consumer, grows))[tp]

    assert grows.ends == {tp: 3}  # restore read the end before the late transaction
    # The first fetch returns the late transaction too: restore keeps it, and the offset it
    # stores has every committed write below it (before the fix, offset 6 was stored with
    # b=1 and without c).
    assert part.changelog_offset == result.to_offset == 6 and result.records == 4
    assert dict(part.items()) == {b"a": b"1", b"b": b"2", b"c": b"2"}

    # And the next restore, from that offset, reads nothing more.
    again = (await restore_partitions({tp: part}, consumer, offsets))[tp]
    assert (again.from_offset, again.to_offset, again.records) == (6, 6, 0)
