"""Task: the unit of work and ownership — one partition number of a co-partitioned topic group.

Topics with the same partition count form a *group*; the range assignor gives partition ``p`` of
every topic in a group to the same worker, so task ``(group, p)`` owns those input partitions
and partition ``p`` of each table of the group. A task tracks, per input partition, how far it
has processed and what is committed, and holds its pending table writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from streams_app.errors import TopologyError
from streams_app.state.base import PartitionTransaction, Store
from streams_app.state.cache import ReadCache
from streams_app.transport.base import TopicPartition

if TYPE_CHECKING:
    from streams_app.app.context import SendFuture
    from streams_app.app.table import Table


class TaskId(NamedTuple):
    group: int
    partition: int

    def __str__(self) -> str:
        return f"{self.group}_{self.partition}"


RESTORING = "restoring"
RUNNING = "running"
CLOSED = "closed"


class Task:
    __slots__ = (
        "cache",
        "changelog_last",
        "committed",
        "id",
        "offsets",
        "partition_count",
        "partitions",
        "state",
        "stores",
        "tables",
    )

    def __init__(
        self,
        task_id: TaskId,
        partition_count: int,
        partitions: set[TopicPartition],
        stores: Mapping[str, Store],
        cache: ReadCache | None = None,
    ) -> None:
        self.id = task_id
        self.partition_count = partition_count
        self.partitions = partitions
        self.stores = stores
        #: The worker's read cache, shared by every task and table.
        self.cache = cache if cache is not None else ReadCache(0)
        #: Next offset to process per input partition (processed up to here).
        self.offsets: dict[TopicPartition, int] = {}
        #: What the group has committed per input partition.
        self.committed: dict[TopicPartition, int] = {}
        #: Pending writes per table, opened on first use.
        self.tables: dict[str, PartitionTransaction] = {}
        #: Per table, the future of the last changelog record sent in the open transaction.
        self.changelog_last: dict[str, SendFuture] = {}
        self.state = RESTORING

    def open_table(self, table: Table) -> PartitionTransaction:
        """The task's pending-writes view of ``table``; checks co-partitioning on first use."""
        if table.partitions is not None and table.partitions != self.partition_count:
            raise TopologyError(
                f"table {table.name!r} has {table.partitions} partitions but is used while "
                f"processing a topic with {self.partition_count}: tables must be "
                "co-partitioned with the topics that update them (same partition count)"
            )
        store = self.stores.get(table.name)
        if store is None:
            raise TopologyError(f"table {table.name!r} has no store on this worker")
        tx = PartitionTransaction(
            store.partition(self.id.partition), table.key_codec, table.value_codec, self.cache
        )
        self.tables[table.name] = tx
        return tx

    @property
    def has_uncommitted(self) -> bool:
        if self.offsets != self.committed:
            return True
        return any(tx.dirty for tx in self.tables.values())

    def rewind(self) -> None:
        """Forget everything since the last commit."""
        for tx in self.tables.values():
            tx.discard()
        self.changelog_last.clear()
        self.offsets = dict(self.committed)

    def mark_committed(self) -> None:
        self.committed = dict(self.offsets)

    def __repr__(self) -> str:
        return f"<Task {self.id} {self.state}>"
