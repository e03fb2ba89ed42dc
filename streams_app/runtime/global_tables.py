"""GlobalTable: every worker restores and keeps reading every changelog partition.

At start, before the worker subscribes, each global table's changelog partitions are restored
into its store (``read_committed``, to the end, as
:func:`~streams_app.state.restore.restore_partitions` does).
Then a background reader keeps applying what other workers commit. A partition this worker's
own task owns is left to that task: its commits write the store (with their changelog offsets)
and its restore on assignment brings it up to date, exactly as for a plain table; the reader
only applies partitions no local task owns, and goes back to a partition's stored offset when
a rebalance takes it away from this worker.

Going back matters because the reader keeps fetching an owned partition and skips its records:
its position runs ahead of the store, which only the task writes. When the task goes away
(a rebalance, or ``close_all`` after a commit whose outcome is unknown, before the next
assignment), the store is at the task's last commit ``S`` while the position is at some ``P``
beyond it; applying the next record at ``P`` or later would store an offset past the records
in ``[S, P)``, never applied. So a partition skipped as owned since the last
:meth:`GlobalTables.reposition` is, when first seen unowned, sought back to its store's offset
and that batch dropped: the store's offset never passes a committed record it lacks.

**A GlobalTable built from a topic** (``app.GlobalTable(name, source=topic)``) has that topic as
its changelog, written by producers outside this app. Its records go through the table's
:func:`~streams_app.runtime.joins.sources.restore_filter`, in the restore at start and in the
reader alike, as a partitioned table's restore and standbys do: a key written with other JSON
spacing is stored as the table's codec writes it (the row ``lookup`` finds), and a record
processing would dead-letter (undecodable, no valid time) is skipped. Skipped, not
dead-lettered: the reader runs outside any task's transaction, so a dead-letter write there
could be neither atomic with the position it reads at nor fenced. A warning names the topic,
partition, offsets and count (never the record's bytes); Kafka Streams leaves such a record to
its deserialization exception handler, and this is what its log-and-continue handler does.
Before, the topic's raw bytes were stored: an undecodable value raised on every ``lookup`` of
its key, and a key spelled differently was a row no lookup found.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streams_app.aio import cancel_and_wait
from streams_app.runtime.joins.sources import restore_filter
from streams_app.state.base import Store
from streams_app.state.restore import Accept, changelog_batch, restore_partitions
from streams_app.topology.contract import MISSING
from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    ConsumerConfig,
    RecordLike,
    TopicPartition,
    Transport,
)

if TYPE_CHECKING:
    from streams_app.app.table import Table
    from streams_app.topology.contract import TableLike

log = logging.getLogger(__name__)


@dataclass
class _Rejected:
    """The records of one partition a source table's filter rejected: how many, and where."""

    count: int = 0
    first: int = -1
    last: int = -1

    def add(self, offset: int) -> None:
        if not self.count:
            self.first = offset
        self.count += 1
        self.last = offset


class GlobalTables:
    def __init__(
        self,
        tables: Sequence[Table],
        stores: dict[str, Store],
        changelogs: dict[str, str],
        partitions: dict[str, int],
        *,
        owned: Callable[[TopicPartition], bool],
    ) -> None:
        self.tables = tables
        self.stores = stores
        self.changelogs = changelogs
        self.partitions = partitions
        self._owned = owned
        self._consumer: ConsumerClient | None = None
        self._reader: asyncio.Task[None] | None = None
        self._by_changelog = {changelogs[t.name]: t for t in tables}
        #: Partitions whose records the reader skipped as owned by a local task since the last
        #: reposition: its position there may be past the store's offset (module doc).
        self._skipped: set[TopicPartition] = set()
        #: Changelog topic -> what is stored of its records, for the tables built from a topic
        #: (module doc); the other changelogs are written by tasks, already encoded.
        self._filters: dict[str, Accept] = {
            changelogs[t.name]: restore_filter(t)
            for t in tables
            if t.source is not None and t.changelog_is_source
        }
        self.applied = 0
        #: Records of source topics skipped as processing would dead-letter them (module doc).
        self.rejected = 0

    def changelog_partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(self.changelogs[t.name], p)
            for t in self.tables
            for p in range(self.partitions[t.name])
        ]

    async def start(
        self, transport: Transport, admin: AdminClient, app_id: str, timeout: float
    ) -> None:
        if not self.tables:
            return
        consumer = transport.consumer(
            ConsumerConfig(
                group_id=None,
                isolation_level="read_committed",
                fetch_max_wait_ms=100,
                client_id=f"{app_id}-global",
            )
        )
        await consumer.start()
        self._consumer = consumer
        parts = {tp: self._store_partition(tp) for tp in self.changelog_partitions()}
        rejected = {tp: _Rejected() for tp in parts if tp.topic in self._filters}
        accept = {tp: self._counting(self._filters[tp.topic], r) for tp, r in rejected.items()}
        try:
            await restore_partitions(parts, consumer, admin, stall_timeout=timeout, accept=accept)
        finally:
            for tp, skipped in rejected.items():
                self._report(tp, skipped)
        self.reposition()
        self._reader = asyncio.ensure_future(self._read())

    @staticmethod
    def _counting(accept: Accept, rejected: _Rejected) -> Accept:
        """``accept``, noting each keyed record it rejects in ``rejected``."""

        def counted(record: RecordLike) -> tuple[bytes, bytes | None] | None:
            kept = accept(record)
            if kept is None and record.key is not None:
                rejected.add(record.offset)
            return kept

        return counted

    def _report(self, tp: TopicPartition, rejected: _Rejected) -> None:
        """One warning per batch (or restore) that skipped records: where, never what."""
        if not rejected.count:
            return
        self.rejected += rejected.count
        log.warning(
            "global table %s: skipped %d record(s) of %s[%d] at offsets %d-%d that cannot be "
            "decoded or have no valid timestamp (not dead-lettered: the global tables' reader "
            "is outside any transaction)",
            self._by_changelog[tp.topic].name,
            rejected.count,
            tp.topic,
            tp.partition,
            rejected.first,
            rejected.last,
        )

    def _store_partition(self, tp: TopicPartition) -> Any:
        table = self._by_changelog[tp.topic]
        return self.stores[table.name].partition(tp.partition)

    def reposition(self) -> None:
        """Read every partition from where its store is (after start, and after rebalances)."""
        consumer = self._consumer
        if consumer is None:
            return
        tps = self.changelog_partitions()
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, self._store_partition(tp).changelog_offset or 0)
        self._skipped.clear()

    async def _read(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            try:
                batch = await consumer.getmany(timeout_ms=200)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reading global changelogs failed (%s); retrying", type(exc).__name__)
                await asyncio.sleep(0.5)
                continue
            for raw_tp, records in batch.items():
                tp = TopicPartition(raw_tp[0], raw_tp[1])
                if not records:
                    continue
                if self._owned(tp):
                    self._skipped.add(tp)  # a local task keeps this partition itself
                    continue
                part = self._store_partition(tp)
                stored = part.changelog_offset or 0
                if tp in self._skipped:
                    # No longer owned here, and read past what its store holds: read again
                    # from the store's offset, and drop this batch (module doc).
                    self._skipped.discard(tp)
                    consumer.seek(tp, stored)
                    continue
                writes = self._writes(tp, records, stored)
                last = records[-1].offset + 1
                if last > stored:
                    part.write(writes, last)
                    self.applied += len(writes)

    def _writes(
        self, tp: TopicPartition, records: Sequence[RecordLike], stored: int
    ) -> dict[bytes, bytes | None]:
        """What the store gets of a batch: its keyed records from the store's offset on,
        through the table's filter where the changelog is a source topic (module doc)."""
        rejected = _Rejected()
        batch = changelog_batch(
            records, self._filters.get(tp.topic), since=stored, rejected=rejected.add
        )
        self._report(tp, rejected)
        return batch.writes

    def lookup(self, table: TableLike, key: Any) -> Any:
        raw_key = table.key_codec.dumps(key)
        store = self.stores[table.name]
        for partition in range(self.partitions[table.name]):
            raw = store.partition(partition).get(raw_key)
            if raw is not None:
                return table.value_codec.loads(raw)
        return MISSING

    async def stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            await cancel_and_wait({"global table reader": reader})
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()
