"""The group's partition assignor: tasks, standbys and warm-ups placed by lag (KIP-441).

Kafka's consumer protocol lets each member attach bytes to its JoinGroup subscription and the
leader attach bytes to each member's assignment. Kafka Streams uses that channel to carry each
member's task offsets to the leader and the standby tasks back; so do we:

- **Subscription** (every member, at every join): its process id and transactional id, the
  tasks it ran at the last generation, the changelog offset sum its local state has reached
  for every task it holds state for (active, standby, or left on disk by an earlier run), and
  the members of the last generation it knows of.
- **Leader** (:meth:`StreamsAssignor.prepare`, then :meth:`StreamsAssignor.assign`): reads the
  changelogs' end offsets (as Kafka Streams' leader lists offsets), turns every member's
  offsets into a lag per task, places active tasks, standbys and warm-ups
  (:mod:`streams_app.runtime.placement`), and maps each active task back to its partitions: all
  topics of the task's co-partitioned group, partition ``p``, to one member.
- **Assignment** (every member): its active tasks, standbys and warm-ups with the lag the
  leader measured, the members of this generation, the transactional ids of members that left
  since the last one (the new owners fence them: see :mod:`streams_app.runtime.fencing`), and
  when to probe (a rebalance that moves warmed-up tasks).

Task ids are derived from partition counts alone (topics with the same count form a group,
numbered in count order, as :mod:`streams_app.topology.plan` numbers them), so the leader
needs no topic names of its own and every member of one topology agrees on them.

The assignor never touches the commit protocol: it decides who owns what. A member that gets
an active task still restores its changelog tail to the end offset, read_committed, before
processing (:mod:`streams_app.runtime.task_manager`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams_app.runtime.placement import Client, Lags, PlacementConfig, place, warmups_pending
from streams_app.runtime.task import TaskId
from streams_app.topology.plan import TopologyPlan
from streams_app.transport.base import MemberAssignment, MemberSubscription, TopicPartition

log = logging.getLogger(__name__)

#: The protocol name: every member must offer it for the group to use it (else: range).
PROTOCOL = "streams_app"
#: Leads our user data, so that bytes of another assignor are never misread.
MAGIC = b"SA1"
#: How long the leader waits for the changelogs' end offsets before assigning with the last
#: ones it read (a stale end makes lags look smaller, never the state less committed).
END_OFFSETS_TIMEOUT = 10.0

EndOffsets = Callable[[Collection[TopicPartition]], Awaitable[dict[TopicPartition, int]]]


def _task_key(task: TaskId) -> str:
    return f"{task.group}_{task.partition}"


def _parse_task(text: Any) -> TaskId | None:
    if not isinstance(text, str):
        return None
    group, sep, partition = text.partition("_")
    if not sep or not group.isdigit() or not partition.isdigit():
        return None
    return TaskId(int(group), int(partition))


def _tasks(values: Any) -> frozenset[TaskId]:
    if not isinstance(values, list):
        return frozenset()
    return frozenset(t for t in map(_parse_task, values) if t is not None)


def _task_ints(values: Any) -> dict[TaskId, int]:
    out: dict[TaskId, int] = {}
    if isinstance(values, dict):
        for key, value in values.items():
            task = _parse_task(key)
            if task is not None and isinstance(value, int) and not isinstance(value, bool):
                out[task] = value
    return out


def _members(values: Any) -> dict[str, str | None]:
    if not isinstance(values, dict):
        return {}
    return {
        str(pid): (txn if isinstance(txn, str) else None)
        for pid, txn in values.items()
        if isinstance(pid, str)
    }


def _decode(data: bytes) -> dict[str, Any] | None:
    if not data.startswith(MAGIC):
        return None
    try:
        payload = json.loads(data[len(MAGIC) :])
    except ValueError:
        log.warning("ignoring undecodable assignor user data (%d bytes)", len(data))
        return None
    return payload if isinstance(payload, dict) else None


def _encode(payload: Mapping[str, Any]) -> bytes:
    return MAGIC + json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class SubscriptionInfo:
    """What a member tells the leader at every join."""

    process_id: str
    transactional_id: str | None = None
    previous_active: frozenset[TaskId] = frozenset()
    #: Changelog offset sum of the member's local state, per task it holds state for.
    offsets: Mapping[TaskId, int] = field(default_factory=dict)
    #: The members (process id -> transactional id) of the last generation it took part in.
    known_members: Mapping[str, str | None] = field(default_factory=dict)

    def encode(self) -> bytes:
        return _encode(
            {
                "pid": self.process_id,
                "txn": self.transactional_id,
                "active": sorted(map(_task_key, self.previous_active)),
                "offsets": {_task_key(t): o for t, o in sorted(self.offsets.items())},
                "known": dict(self.known_members),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> SubscriptionInfo | None:
        payload = _decode(data)
        if payload is None or not isinstance(payload.get("pid"), str):
            return None
        txn = payload.get("txn")
        return cls(
            process_id=payload["pid"],
            transactional_id=txn if isinstance(txn, str) else None,
            previous_active=_tasks(payload.get("active")),
            offsets=_task_ints(payload.get("offsets")),
            known_members=_members(payload.get("known")),
        )


@dataclass(frozen=True)
class AssignmentInfo:
    """What the leader tells one member, besides its partitions."""

    active: frozenset[TaskId] = frozenset()
    standby: frozenset[TaskId] = frozenset()
    warmup: frozenset[TaskId] = frozenset()
    #: The leader's measure of this member's lag on each of its tasks (-1: no local state).
    lags: Mapping[TaskId, int] = field(default_factory=dict)
    #: This generation's members: process id -> transactional id.
    members: Mapping[str, str | None] = field(default_factory=dict)
    #: Transactional ids of members that left since the previous generation: whoever takes
    #: over their tasks fences them first (their open transactions abort at once).
    fence: tuple[str, ...] = ()
    #: Seconds until this member should trigger a probing rebalance (it holds warm-ups).
    probe_after: float | None = None
    #: ``time.monotonic()`` when this member received it (not sent).
    received_at: float = 0.0

    def encode(self) -> bytes:
        return _encode(
            {
                "active": sorted(map(_task_key, self.active)),
                "standby": sorted(map(_task_key, self.standby)),
                "warmup": sorted(map(_task_key, self.warmup)),
                "lags": {_task_key(t): lag for t, lag in sorted(self.lags.items())},
                "members": dict(self.members),
                "fence": list(self.fence),
                "probe": self.probe_after,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> AssignmentInfo | None:
        payload = _decode(data)
        if payload is None:
            return None
        probe = payload.get("probe")
        fence = payload.get("fence")
        return cls(
            active=_tasks(payload.get("active")),
            standby=_tasks(payload.get("standby")),
            warmup=_tasks(payload.get("warmup")),
            lags=_task_ints(payload.get("lags")),
            members=_members(payload.get("members")),
            fence=tuple(t for t in fence if isinstance(t, str)) if isinstance(fence, list) else (),
            probe_after=float(probe) if isinstance(probe, int | float) and probe > 0 else None,
            received_at=time.monotonic(),
        )

    def describe(self) -> dict[str, Any]:
        """Plain data (JSON-ready), for logs and the web server."""
        return {
            "active": sorted(map(str, self.active)),
            "standby": sorted(map(str, self.standby)),
            "warmup": sorted(map(str, self.warmup)),
            "lags": {str(t): lag for t, lag in sorted(self.lags.items())},
            "members": len(self.members),
            "fenced": list(self.fence),
            "probe_after": self.probe_after,
        }


class StreamsAssignor:
    """The runtime's :class:`~streams_app.transport.base.GroupAssignor` (see the module doc).

    ``local_offsets`` is read at every join (:meth:`subscription_data`): it must be cheap and
    must not block. ``end_offsets`` is the admin client's (high watermarks).
    """

    name = PROTOCOL

    def __init__(
        self,
        plan: TopologyPlan,
        *,
        process_id: str,
        transactional_id: str | None,
        local_offsets: Callable[[], Mapping[TaskId, int]],
        end_offsets: EndOffsets,
        placement: PlacementConfig,
        probing_interval: float,
    ) -> None:
        self.plan = plan
        self.process_id = process_id
        self.transactional_id = transactional_id
        self._local_offsets = local_offsets
        self._end_offsets = end_offsets
        self.placement = placement
        self.probing_interval = probing_interval
        #: Changelog end offsets as of the last ``prepare`` (leader only).
        self.ends: dict[TopicPartition, int] = {}
        #: The last assignment received (None before the first, or when range was used).
        self.last: AssignmentInfo | None = None
        #: The last few, oldest first (diagnostics and tests).
        self.history: deque[AssignmentInfo] = deque(maxlen=32)
        #: How many assignments this member computed as the leader.
        self.assignments_made = 0

    # -- member side -----------------------------------------------------------------------

    def subscription_data(self) -> bytes:
        last = self.last
        return SubscriptionInfo(
            process_id=self.process_id,
            transactional_id=self.transactional_id,
            previous_active=last.active if last is not None else frozenset(),
            offsets=dict(self._local_offsets()),
            known_members=dict(last.members) if last is not None else {},
        ).encode()

    def on_assignment(self, assignment: MemberAssignment) -> None:
        info = AssignmentInfo.decode(assignment.user_data)
        self.last = info
        if info is not None:
            self.history.append(info)

    def forget_active(self) -> None:
        """Our tasks were taken from us (fenced): do not claim them as ours at the next join."""
        if self.last is not None:
            self.last = AssignmentInfo(members=self.last.members, received_at=self.last.received_at)

    # -- leader side -----------------------------------------------------------------------

    def changelog_partitions(self) -> dict[TaskId, list[TopicPartition]]:
        """Every stateful task's changelog partitions (from this member's topology plan)."""
        counts = {index: count for count, index in self.plan.groups.items()}
        out: dict[TaskId, list[TopicPartition]] = {}
        for group, tables in self.plan.tables_by_group.items():
            for partition in range(counts.get(group, 0)):
                out[TaskId(group, partition)] = [
                    TopicPartition(self.plan.changelog_topics[table], partition) for table in tables
                ]
        return out

    async def prepare(self) -> None:
        tps = [tp for tps in self.changelog_partitions().values() for tp in tps]
        if not tps:
            return
        try:
            async with asyncio.timeout(END_OFFSETS_TIMEOUT):
                self.ends.update(await self._end_offsets(tps))
        except Exception as exc:  # assign with what we have: lags may look smaller
            log.warning(
                "assignor: reading the changelogs' end offsets failed (%s); using the last "
                "ones read",
                type(exc).__name__,
            )

    def assign(
        self,
        members: Mapping[str, MemberSubscription],
        partition_counts: Mapping[str, int],
    ) -> dict[str, MemberAssignment]:
        infos = {
            member_id: SubscriptionInfo.decode(sub.user_data)
            or SubscriptionInfo(process_id=member_id)
            for member_id, sub in members.items()
        }
        # Topics in co-partitioned groups by partition count, numbered as the plan numbers them.
        subscribed = {t for sub in members.values() for t in sub.topics if t in partition_counts}
        numbering = {c: i for i, c in enumerate(sorted({partition_counts[t] for t in subscribed}))}
        topics_of: dict[int, list[str]] = {}
        for topic in sorted(subscribed):
            topics_of.setdefault(numbering[partition_counts[topic]], []).append(topic)
        all_tasks = [TaskId(group, p) for count, group in numbering.items() for p in range(count)]

        changelogs = self.changelog_partitions()
        ends: dict[TaskId, int] = {}
        for task, tps in changelogs.items():
            if task.group not in topics_of:
                continue
            reported = [info.offsets[task] for info in infos.values() if task in info.offsets]
            # A stale or missing end never reads below what a member already holds.
            ends[task] = max([sum(self.ends.get(tp, 0) for tp in tps), *reported])

        clients = [
            Client(
                id=member_id,
                previous_active=infos[member_id].previous_active,
                offsets=infos[member_id].offsets,
                groups=frozenset(
                    g for g, topics in topics_of.items() if set(topics) <= set(sub.topics)
                ),
            )
            for member_id, sub in members.items()
        ]
        placements = place(all_tasks, ends, clients, self.placement)
        lags = Lags(ends, self.placement.acceptable_recovery_lag)

        current = {info.process_id: info.transactional_id for info in infos.values()}
        departed = {
            pid: txn
            for info in infos.values()
            for pid, txn in info.known_members.items()
            if pid not in current and txn
        }
        probe = self.probing_interval if warmups_pending(placements) else None
        out: dict[str, MemberAssignment] = {}
        by_id = {c.id: c for c in clients}
        for member_id, share in placements.items():
            client = by_id[member_id]
            partitions = tuple(
                TopicPartition(topic, task.partition)
                for task in sorted(share.active)
                for topic in topics_of.get(task.group, ())
            )
            task_lags = {
                task: (-1 if (lag := lags.lag(client, task)) is None else lag)
                for task in share.active | share.standby | share.warmup
                if task in ends
            }
            info = AssignmentInfo(
                active=frozenset(share.active),
                standby=frozenset(share.standby),
                warmup=frozenset(share.warmup),
                lags=task_lags,
                members=current,
                fence=tuple(sorted(set(departed.values()))),
                probe_after=probe if share.warmup else None,
            )
            out[member_id] = MemberAssignment(partitions, info.encode())
        self.assignments_made += 1
        self._log(placements, infos, departed, len(all_tasks), len(ends))
        return out

    def _log(
        self,
        placements: Mapping[str, Any],
        infos: Mapping[str, SubscriptionInfo],
        departed: Mapping[str, str | None],
        tasks: int,
        stateful: int,
    ) -> None:
        moved = sum(
            1
            for member_id, share in placements.items()
            for task in share.active
            if task not in infos[member_id].previous_active
        )
        log.info(
            "assignment for %d member(s): %d task(s) (%d stateful), %d newly placed, "
            "%d standby(s), %d warm-up(s)%s",
            len(placements),
            tasks,
            stateful,
            moved,
            sum(len(s.standby) for s in placements.values()),
            sum(len(s.warmup) for s in placements.values()),
            f", {len(departed)} departed member(s) to fence" if departed else "",
        )
