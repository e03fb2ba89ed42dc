"""What a worker does with the assignor's decisions beyond its active partitions.

At every assignment (inside ``on_partitions_assigned``, before committed offsets are read and
before any restore starts), in this order:

1. **Standbys.** The worker's standby and warm-up tasks become exactly those the leader
   placed here (:class:`~streams_app.runtime.standby.StandbyUpdater`, synchronously: a task
   made active here is out of the standby set before its restore can begin).
2. **Fencing.** If this worker takes over tasks and members left the group since the last
   generation, their transactional ids are fenced (:mod:`streams_app.runtime.fencing`), so
   their open transactions abort now instead of at ``transaction_timeout``: the restore, the
   committed offsets (``require_stable``) and downstream readers stop waiting on them. Then,
   just before the stable offsets are read, whoever last committed the partitions taken over,
   or holds a transaction open under one of this app's ids, and is no member of this
   generation is fenced too (:meth:`Replicas.fence_predecessors`).
3. **Probing.** If the leader placed warm-ups here, a rebalance is requested after
   ``probing_rebalance_interval``: the leader then moves the tasks whose warm-ups caught up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

from streams_app.runtime import guarantees
from streams_app.runtime.assignor import AssignmentInfo, StreamsAssignor
from streams_app.runtime.fencing import fence_predecessors, fence_transactional_ids
from streams_app.runtime.standby import CommittedReader, StandbyTask, StandbyUpdater
from streams_app.runtime.task import TaskId
from streams_app.runtime.task_manager import TaskManager
from streams_app.settings import Settings
from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    RebalanceRequester,
    TopicPartition,
    Transport,
)

log = logging.getLogger(__name__)


class Replicas:
    """One worker's standby tasks, the fencing of departed members, and probing rebalances."""

    def __init__(
        self,
        conf: Settings,
        transport: Transport,
        admin: AdminClient,
        tasks: TaskManager,
        assignor: StreamsAssignor,
    ) -> None:
        self.conf = conf
        self.transport = transport
        self.admin = admin
        self.tasks = tasks
        self.assignor = assignor
        self.updater: StandbyUpdater | None = None
        self._probe: asyncio.TimerHandle | None = None
        self._previous_active: frozenset[TaskId] = frozenset()
        #: Transactional ids this worker fenced (diagnostics).
        self.fenced: list[str] = []
        self._stopped = False

    async def on_assignment(self, consumer: ConsumerClient) -> AssignmentInfo | None:
        """Apply the last assignment's standbys, fencing and probing (see the module doc)."""
        info = self.assignor.last
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None
        if self._stopped:
            return None  # a rebalance while the worker shuts down: it is leaving anyway
        if info is None:  # the group fell back to range (a member of an older version)
            await self._set_standbys({}, consumer)
            self._previous_active = frozenset()
            return None
        standbys = {
            task_id: StandbyTask(
                task_id,
                self.tasks.changelog_partitions(task_id),
                warmup=task_id in info.warmup,
                lag_at_assignment=info.lags.get(task_id),
            )
            for task_id in sorted(info.standby | info.warmup)
            if task_id not in info.active and self.tasks.stateful(task_id)
        }
        await self._set_standbys(standbys, consumer)
        taking_over = info.active - self._previous_active
        self._previous_active = info.active
        if info.fence and taking_over and self.conf.exactly_once:
            mine = self.assignor.transactional_id
            departed = [tid for tid in info.fence if tid != mine]
            self.fenced += await fence_transactional_ids(
                self.transport, departed, client_id=f"{self.conf.id}-fencer"
            )
        if info.probe_after is not None and isinstance(consumer, RebalanceRequester):
            loop = asyncio.get_running_loop()
            self._probe = loop.call_later(info.probe_after, self._request_probe, consumer)
        return info

    async def fence_predecessors(
        self, consumer: ConsumerClient, partitions: list[TopicPartition]
    ) -> None:
        """Fence predecessors no member knew of (who last committed ``partitions``, just taken
        over, or holds a transaction open under one of this app's ids) if they are not members
        of this generation (:mod:`streams_app.runtime.fencing`)."""
        info = self.assignor.last
        if info is None or not partitions or not self.conf.exactly_once or self._stopped:
            return  # under range (an older member), who is live is unknown: fence nobody
        members = {tid for tid in info.members.values() if tid}
        members.update(info.fence)  # fenced a moment ago, in on_assignment
        if self.assignor.transactional_id:
            members.add(self.assignor.transactional_id)
        self.fenced += await fence_predecessors(
            consumer,
            self.admin,
            self.transport,
            partitions,
            app_id=self.conf.id,
            members=members,
            client_id=f"{self.conf.id}-fencer",
        )

    def forget_active(self) -> None:
        """Our tasks were taken from us (fenced): claim none of them at the next join."""
        self._previous_active = frozenset()
        self.assignor.forget_active()

    def _request_probe(self, consumer: RebalanceRequester) -> None:
        self._probe = None
        log.info("probing rebalance: asking the group to move warmed-up tasks")
        consumer.request_rebalance()

    async def _set_standbys(
        self, standbys: dict[TaskId, StandbyTask], consumer: ConsumerClient
    ) -> None:
        self.tasks.set_standbys(standbys)
        if self.updater is None:
            if not standbys:
                return
            reader = self.transport.consumer(guarantees.standby_consumer_config(self.conf))
            await reader.start()
            self.updater = StandbyUpdater(
                reader,
                self.admin,
                caught_up_lag=self.conf.acceptable_recovery_lag,
                accept=self.tasks.source_filters,
            )
            self.updater.start()
        self.updater.committed = committed_reader(consumer)
        self.updater.update(standbys)

    async def stop(self) -> None:
        self._stopped = True
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None
        if self.updater is not None:
            await self.updater.stop()
            self.updater = None

    def describe(self) -> dict[str, Any]:
        """Plain data for ``/assignment``: the last assignment and the standbys' progress."""
        info = self.assignor.last
        return {
            "assignment": info.describe() if info is not None else None,
            "standby": [task.describe() for _, task in sorted(self.tasks.standbys.items())],
            "fenced": list(self.fenced),
        }


def committed_reader(consumer: ConsumerClient) -> CommittedReader:
    """The group's last committed offsets, read through its member ``consumer``: where the
    standbys of tables built from topics stop (runtime/standby.py). Not ``require_stable``:
    the last committed offset is never beyond the one a promotion's restore waits for and
    reads to, so a standby held there is never wiped at promotion; waiting out a pending
    transaction would only hold the standby's loop."""

    async def committed(partitions: Collection[TopicPartition]) -> dict[TopicPartition, int | None]:
        found = await consumer.committed_offsets_with_metadata(partitions, stable=False)
        return {tp: None if entry is None else entry.offset for tp, entry in found.items()}

    return committed
