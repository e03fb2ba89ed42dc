"""Task: the unit of work and ownership — one partition number of a co-partitioned topic group.

Topics with the same partition count form a *group*; the range assignor gives partition ``p`` of
every topic in a group to the same worker, so task ``(group, p)`` owns those input partitions
and partition ``p`` of each table of the group. A task tracks, per input partition, how far it
has processed and what is committed, and holds its pending table writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from streams_app.errors import TopologyError
from streams_app.runtime.partition_group import PartitionGroup
from streams_app.runtime.stream_time import UNKNOWN, PartitionMetadata, encode_metadata
from streams_app.state.base import PartitionTransaction, Store
from streams_app.state.cache import ReadCache
from streams_app.transport.base import TopicPartition

if TYPE_CHECKING:
    from streams_app.topology.contract import Event, SendFuture, TableLike, WindowedState

#: Makes the PartitionGroup of a stage's partitions (the worker knows the settings and lag).
GroupFactory = Callable[[list[TopicPartition]], PartitionGroup]


class Sealed(NamedTuple):
    """A task's progress as a commit in flight carries it (:meth:`Task.seal`)."""

    offsets: dict[TopicPartition, int]
    partition_times: dict[TopicPartition, int]
    table_times: dict[str, int]


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
        "_group_factory",
        "_groups",
        "cache",
        "changelog_last",
        "committed",
        "committed_partition_times",
        "committed_table_times",
        "id",
        "join_states",
        "late",
        "offsets",
        "partition_count",
        "partition_times",
        "partitions",
        "stages",
        "state",
        "stores",
        "tables",
        "timer_due",
        "touched",
        "windowed_states",
    )
    #: A task owns its partitions (see ``TaskScope.outside_processing``).
    outside_processing = False

    def __init__(
        self,
        task_id: TaskId,
        partition_count: int,
        partitions: set[TopicPartition],
        stores: Mapping[str, Store],
        cache: ReadCache | None = None,
        *,
        stages: Mapping[str, int] | None = None,
        group_factory: GroupFactory | None = None,
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
        #: An ``on_leader`` timer ran for this task: its offsets go into the next commit even
        #: unchanged, so a deposed leader's commit is fenced by the group generation (KIP-447).
        self.touched = False
        # -- stream time (runtime.stream_time) --
        #: Largest timestamp processed per input partition; and as of the last commit.
        self.partition_times: dict[TopicPartition, int] = {}
        self.committed_partition_times: dict[TopicPartition, int] = {}
        #: Windowed table -> observed stream time as of the last commit.
        self.committed_table_times: dict[str, int] = {}
        #: Windowed table -> its windows in this task (rebuilt after every abort).
        self.windowed_states: dict[str, WindowedState] = {}
        #: A join's (or versioned table's) views over its stores in this task: in-memory hints
        #: valid within one line of transactions, so rebuilt after every abort (:meth:`join_state`).
        self.join_states: dict[str, Any] = {}
        #: Records late for a windowed table since the last batch ended: (event, table, the
        #: table's observed stream time when it was judged late).
        self.late: list[tuple[Event, TableLike, int]] = []
        #: Stream-time timer -> the stream time at which it fires next (ms).
        self.timer_due: dict[str, int] = {}
        self.stages: Mapping[str, int] = stages or {}
        self._group_factory = group_factory
        self._groups: dict[TopicPartition, PartitionGroup | None] | None = None

    # -- what tables and timers see (topology.contract.TaskScope) -------------------------

    @property
    def partition(self) -> int:
        return self.id.partition

    @property
    def stream_time(self) -> int:
        return max(self.partition_times.values(), default=UNKNOWN)

    def windowed(self, table: TableLike) -> WindowedState:
        state = self.windowed_states.get(table.name)
        if state is None:
            tx = self.tables.get(table.name)
            if tx is None:
                tx = self.open_table(table)
            observed = self.committed_table_times.get(table.name, UNKNOWN)
            state = self.windowed_states[table.name] = table.open_windowed(tx, observed)
        return state

    def join_state(self, name: str, opener: Callable[[], Any]) -> Any:
        state = self.join_states.get(name)
        if state is None:
            state = self.join_states[name] = opener()
        return state

    def record_late(self, event: Event, table: TableLike) -> None:
        late = self.late
        if not late or late[-1][0] is not event or late[-1][1] is not table:
            state = self.windowed_states.get(table.name)
            late.append((event, table, state.observed if state is not None else UNKNOWN))

    # -- stream time ----------------------------------------------------------------------

    def restore_times(self, found: Mapping[TopicPartition, PartitionMetadata]) -> None:
        """Stream time as the last commit left it (from the committed offsets' metadata)."""
        for tp, meta in found.items():
            self.partition_times[tp] = self.committed_partition_times[tp] = meta.partition_time
            for name, observed in meta.tables.items():
                if observed > self.committed_table_times.get(name, UNKNOWN):
                    self.committed_table_times[name] = observed

    def table_times(self) -> dict[str, int]:
        times = dict(self.committed_table_times)
        for name, state in self.windowed_states.items():
            times[name] = state.observed
        return times

    def offset_metadata(
        self, tps: list[TopicPartition], committer: str | None = None
    ) -> dict[TopicPartition, str]:
        tables = self.table_times()
        times = self.partition_times
        return {tp: encode_metadata(times.get(tp, UNKNOWN), tables, committer) for tp in tps}

    def group_for(self, tp: TopicPartition) -> PartitionGroup | None:
        """The PartitionGroup ordering ``tp`` with its stage's other partitions (None when it is
        its stage's only partition: nothing to order)."""
        groups = self._groups
        if groups is None:
            groups = self._groups = {}
            by_stage: dict[int, list[TopicPartition]] = {}
            for part in self.partitions:
                by_stage.setdefault(self.stages.get(part.topic, 0), []).append(part)
            for members in by_stage.values():
                group = None
                if len(members) > 1 and self._group_factory is not None:
                    group = self._group_factory(members)
                for part in members:
                    groups[part] = group
        return groups.get(tp)

    def groups(self) -> list[PartitionGroup]:
        if not self._groups:
            return []
        return list({id(g): g for g in self._groups.values() if g is not None}.values())

    def buffered(self, tp: TopicPartition) -> bool:
        group = self.group_for(tp) if self._groups is not None else None
        return group is not None and group.has_buffered(tp)

    def open_table(self, table: TableLike) -> PartitionTransaction:
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
            store.partition(self.id.partition),
            table.key_codec,
            table.value_codec,
            self.cache if table.read_cache else None,
            scan_cache=self.cache if table.scan_cache else None,
        )
        self.tables[table.name] = tx
        return tx

    @property
    def has_uncommitted(self) -> bool:
        if self.touched or self.offsets != self.committed:
            return True
        return any(tx.dirty for tx in self.tables.values())

    def rewind(self) -> list[TopicPartition]:
        """Forget everything since the last commit; returns partitions paused for buffering
        (to resume: the consumer seeks back and fetches them again)."""
        for tx in self.tables.values():
            tx.discard()
        self.changelog_last.clear()
        self.offsets = dict(self.committed)
        self.touched = False
        self.partition_times = dict(self.committed_partition_times)
        self.windowed_states.clear()
        self.join_states.clear()
        self.late.clear()
        self.timer_due.clear()
        paused: list[TopicPartition] = []
        for group in self.groups():
            paused += group.clear()
        return paused

    def mark_committed(self) -> None:
        self.committed = dict(self.offsets)
        self.touched = False
        self.committed_partition_times = dict(self.partition_times)
        for name, state in self.windowed_states.items():
            self.committed_table_times[name] = state.observed

    def seal(self) -> Sealed:
        """What a commit now in flight carries (its tables seal their own writes): the worker
        processes on meanwhile, and only this becomes committed if the commit succeeds."""
        self.touched = False
        return Sealed(
            dict(self.offsets),
            dict(self.partition_times),
            {name: state.observed for name, state in self.windowed_states.items()},
        )

    def mark_sealed_committed(self, sealed: Sealed) -> None:
        self.committed = sealed.offsets
        self.committed_partition_times = sealed.partition_times
        self.committed_table_times.update(sealed.table_times)

    def __repr__(self) -> str:
        return f"<Task {self.id} {self.state}>"
