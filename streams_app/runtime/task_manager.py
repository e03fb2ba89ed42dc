"""TaskManager: which tasks this worker owns, and bringing their state up to date.

Assignment creates tasks in the *restoring* state with their input partitions paused; the worker
then restores each task's table partitions from their changelogs (read_committed, up to the end
offset) and only then lets records through. Revocation happens after the commit, so a task is
never given up with uncommitted work.

It also knows the worker's standby tasks (warm copies of other workers' tables, kept by
:mod:`streams_app.runtime.standby`) and the offsets of all local state, active or not, which the
assignor reports to the group so that tasks go where their state is.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from streams_app.errors import ChangelogBehindStore
from streams_app.runtime.progress import RestoreProgress
from streams_app.runtime.standby import StandbyTask
from streams_app.runtime.task import RESTORING, RUNNING, GroupFactory, Task, TaskId
from streams_app.state.base import PartitionTransaction, Store, StorePartition
from streams_app.state.cache import ReadCache
from streams_app.state.errors import ChangelogBeyondEnd
from streams_app.state.restore import RestoreResult, restore_partitions
from streams_app.topology.plan import TopologyPlan
from streams_app.transport.base import AdminClient, ConsumerClient, TopicPartition


class TaskManager:
    def __init__(
        self,
        plan: TopologyPlan,
        stores: Mapping[str, Store],
        cache: ReadCache | None = None,
        group_factory: GroupFactory | None = None,
    ) -> None:
        self.plan = plan
        self.stores = stores
        self.cache = cache if cache is not None else ReadCache(0)
        self.group_factory = group_factory
        self.tasks: dict[TaskId, Task] = {}
        self.by_tp: dict[TopicPartition, Task] = {}
        #: The latest restore of each changelog partition (one entry per partition, however
        #: many rebalances: /assignment shows it, and a long-running worker does not grow it).
        self.restores: dict[TopicPartition, RestoreResult] = {}
        #: This worker's standby tasks (and warm-ups), as of the last assignment.
        self.standbys: dict[TaskId, StandbyTask] = {}
        #: Reports restores (log lines or a progress bar, metrics); set by the worker.
        self.progress: RestoreProgress | None = None

    def task_id(self, tp: TopicPartition) -> TaskId:
        count = self.plan.partition_counts[tp.topic]
        return TaskId(self.plan.groups[count], tp.partition)

    def assign(self, partitions: Iterable[TopicPartition]) -> list[Task]:
        """Create tasks for newly assigned input partitions (they start restoring)."""
        created: list[Task] = []
        for tp in sorted(partitions):
            if tp in self.by_tp or tp.topic not in self.plan.partition_counts:
                continue
            task_id = self.task_id(tp)
            task = self.tasks.get(task_id)
            if task is None:
                count = self.plan.partition_counts[tp.topic]
                task = Task(
                    task_id,
                    count,
                    set(),
                    self.stores,
                    self.cache,
                    stages=self.plan.stages,
                    group_factory=self.group_factory,
                )
                self.tasks[task_id] = task
                created.append(task)
            task.partitions.add(tp)
            self.by_tp[tp] = task
        return created

    def close_all(self) -> list[Task]:
        """Drop every task (eager rebalance, or after being fenced). Stores stay open: they only
        ever hold committed state, so nothing needs wiping and a returning task reuses them."""
        closed = list(self.tasks.values())
        for task in closed:
            task.rewind()
            task.state = "closed"
        self.tasks.clear()
        self.by_tp.clear()
        return closed

    def transactions(self) -> Iterator[PartitionTransaction]:
        """The open table transactions of every task (their pending writes)."""
        for task in self.tasks.values():
            yield from task.tables.values()

    def running(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.state == RUNNING]

    def restoring(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.state == RESTORING]

    def changelog_partitions(self, task: Task | TaskId) -> dict[TopicPartition, StorePartition]:
        """The task's changelog partitions and the store partitions they feed."""
        task_id = task.id if isinstance(task, Task) else task
        out: dict[TopicPartition, StorePartition] = {}
        for table_name in self.plan.tables_by_group.get(task_id.group, ()):
            changelog = self.plan.changelog_topics[table_name]
            out[TopicPartition(changelog, task_id.partition)] = self.stores[table_name].partition(
                task_id.partition
            )
        return out

    def _behind(self, exc: ChangelogBeyondEnd) -> ChangelogBehindStore:
        """The first table concerned, named with its partitions (state/restore.py)."""
        tables = {topic: table for table, topic in self.plan.changelog_topics.items()}
        topic = min(t for t, _ in exc.partitions)
        return ChangelogBehindStore(
            tables.get(topic, topic),
            topic,
            {p: offsets for (t, p), offsets in exc.partitions.items() if t == topic},
        )

    def stateful(self, task_id: TaskId) -> bool:
        return bool(self.plan.tables_by_group.get(task_id.group))

    def local_offsets(self) -> dict[TaskId, int]:
        """For every task this worker holds any state for (active, standby, or left on disk
        by an earlier run): the sum of its store partitions' changelog offsets. What the
        assignor reports to the group's leader, which measures lags against the changelogs'
        end offsets. Opens the partitions it finds (the first call may take a moment)."""
        out: dict[TaskId, int] = {}
        for group, tables in self.plan.tables_by_group.items():
            partitions: set[int] = set()
            for table in tables:
                partitions |= self.stores[table].local_partitions()
            for partition in partitions:
                offsets = [self.stores[t].partition(partition).changelog_offset for t in tables]
                if any(offset is not None for offset in offsets):
                    out[TaskId(group, partition)] = sum(o or 0 for o in offsets)
        return out

    def set_standbys(self, standbys: Mapping[TaskId, StandbyTask]) -> None:
        self.standbys = dict(standbys)

    def describe(self) -> dict[str, Any]:
        """This worker's tasks as plain data (JSON-ready): active tasks with their state and
        partitions, standby tasks with their changelog offsets."""
        return {
            "active": [
                {
                    "task": str(task.id),
                    "state": task.state,
                    "partitions": [
                        {"topic": tp.topic, "partition": tp.partition}
                        for tp in sorted(task.partitions)
                    ],
                }
                for _, task in sorted(self.tasks.items())
            ],
            "standby": [standby.describe() for _, standby in sorted(self.standbys.items())],
        }

    async def restore(
        self,
        tasks: list[Task],
        consumer: ConsumerClient,
        admin: AdminClient,
        timeout: float,
    ) -> None:
        """Restore the tables of ``tasks`` and mark them running."""
        partitions: dict[TopicPartition, StorePartition] = {}
        for task in tasks:
            partitions.update(self.changelog_partitions(task))
        if partitions:
            progress = self.progress
            if progress is not None:
                progress.begin()
            ok = False
            try:
                results = await restore_partitions(
                    partitions, consumer, admin, stall_timeout=timeout, on_progress=progress
                )
                ok = True
            except ChangelogBeyondEnd as exc:
                raise self._behind(exc) from None
            finally:
                if progress is not None:
                    progress.end(ok)
            # restore_partitions logged each partition; the progress, the whole restore.
            self.restores.update((r.changelog, r) for r in results.values())
        for task in tasks:
            task.state = RUNNING
