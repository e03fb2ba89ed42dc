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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from streams_app.aio import cancel_and_wait
from streams_app.state.base import Store
from streams_app.state.restore import restore_partitions
from streams_app.topology.contract import MISSING
from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    ConsumerConfig,
    TopicPartition,
    Transport,
)

if TYPE_CHECKING:
    from streams_app.topology.contract import TableLike

log = logging.getLogger(__name__)


class GlobalTables:
    def __init__(
        self,
        tables: Sequence[TableLike],
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
        self.applied = 0

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
        await restore_partitions(parts, consumer, admin, stall_timeout=timeout)
        self.reposition()
        self._reader = asyncio.ensure_future(self._read())

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
                writes = {
                    r.key: r.value for r in records if r.offset >= stored and r.key is not None
                }
                last = records[-1].offset + 1
                if last > stored:
                    part.write(writes, last)
                    self.applied += len(writes)

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
