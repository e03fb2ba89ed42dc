"""Where each task runs: active, standby and warm-up placement by lag (KIP-441's idea).

Pure logic, no Kafka: the group leader's assignor (:mod:`streams_app.runtime.assignor`) turns
the members' subscriptions into :class:`Client` values and the changelogs' end offsets into
``ends``, calls :func:`place`, and turns the result back into partitions.

The rules, in the order they are applied:

1. **Balanced and sticky target.** Stateful tasks are spread evenly (every worker gets
   ``floor(tasks / workers)``, the first ``tasks mod workers`` to reach it one more). A task
   stays with the worker that ran it last while that worker has room; the others go to the
   workers below their share first, preferring one that is caught up, then the smallest lag.
2. **Availability before balance.** A worker is *caught up* on a task when its local state for
   the task is within ``acceptable_recovery_lag`` changelog records of the end (the task's
   owner of the last generation always is: its lag is its own commit markers). If the target
   worker is not caught up but another worker is, the task runs on a caught-up worker (the
   previous owner first, then the least loaded) and the target gets a *warm-up*: a standby
   that builds the state, bounded by ``max_warmup_replicas`` for the whole group. The task
   moves at a later (probing) rebalance, once the warm-up has caught up, so no task ever waits
   on a long restore just to even out the load. If no worker is caught up the target keeps
   the task: somebody must restore it.
3. **Standbys.** Each stateful task gets up to ``standby_replicas`` standbys on distinct
   workers other than its active one, preferring workers that already hold state for it (the
   smallest lag: standbys stay where they are warm), then the fewest standbys. A warm-up
   counts as one of them.
4. **Stateless tasks** are spread evenly and stickily; they have no state to be warm.

Every task is one partition number of a co-partitioned topic group, so moving a task moves
all its partitions together: the co-partitioning guarantee does not depend on the placement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from streams_app.runtime.task import TaskId


@dataclass(frozen=True)
class Client:
    """One group member, as its subscription describes it."""

    #: Stable and sortable (the member id); ties are broken by it, so the leader's choice is
    #: deterministic.
    id: str
    #: Tasks it ran at the previous generation (stickiness).
    previous_active: frozenset[TaskId] = frozenset()
    #: Sum over each task's changelog partitions of the offset its local state has reached,
    #: for every task it holds state for (active, standby or left on disk).
    offsets: Mapping[TaskId, int] = field(default_factory=dict)
    #: Task groups it can run (it subscribes to all their topics); None: all of them.
    groups: frozenset[int] | None = None

    def can_run(self, task: TaskId) -> bool:
        return self.groups is None or task.group in self.groups


@dataclass(frozen=True)
class PlacementConfig:
    standby_replicas: int = 0
    acceptable_recovery_lag: int = 10_000
    max_warmup_replicas: int = 2


@dataclass
class Placement:
    """One client's share."""

    active: set[TaskId] = field(default_factory=set)
    standby: set[TaskId] = field(default_factory=set)
    #: Standbys placed to move a task here later (never also in ``standby``).
    warmup: set[TaskId] = field(default_factory=set)
    #: The lag the leader measured for each of this client's standbys and warm-ups.
    lags: dict[TaskId, int] = field(default_factory=dict)


class Lags:
    """Lag of each client on each stateful task, against the changelogs' ends."""

    def __init__(self, ends: Mapping[TaskId, int], acceptable: int) -> None:
        self.ends = ends
        self.acceptable = acceptable

    def lag(self, client: Client, task: TaskId) -> int | None:
        """Changelog records behind the end; None when the client holds no state for it.

        The task's owner of the last generation is never behind (Kafka Streams reports a
        running active task as ``LATEST_OFFSET``): whatever lies between its store and the
        end is its own commit markers and uncommitted tail, which it has no need to restore.
        """
        if task in client.previous_active:
            return 0
        offset = client.offsets.get(task)
        if offset is None:
            return None
        return max(0, self.ends.get(task, 0) - offset)

    def rank(self, client: Client, task: TaskId) -> int:
        """Records to restore: without state, the whole changelog (its end offsets; an
        upper bound, compaction and retention only make it less), one more than any client
        with state at the same offsets."""
        lag = self.lag(client, task)
        return self.ends.get(task, 0) + 1 if lag is None else lag

    def caught_up(self, client: Client, task: TaskId) -> bool:
        """Within ``acceptable_recovery_lag``: for a client without state, the changelog is
        that short (as in Kafka Streams, a small table moves at once, warm-up or not)."""
        lag = self.lag(client, task)
        return (self.ends.get(task, 0) if lag is None else lag) <= self.acceptable


class _Quota:
    """An even share: ``base`` per client, ``extra`` clients may take one more."""

    def __init__(self, tasks: int, clients: int) -> None:
        self.base, self.extra = divmod(tasks, clients) if clients else (0, 0)
        self.load: Counter[str] = Counter()

    def room(self, client: str) -> bool:
        load = self.load[client]
        return load < self.base or (load == self.base and self.extra > 0)

    def full(self, client: str) -> bool:
        """At or above its base share (it may still have room for an extra)."""
        return self.load[client] >= self.base

    def take(self, client: str) -> None:
        if self.load[client] == self.base:
            self.extra -= 1
        self.load[client] += 1


def place(
    tasks: Iterable[TaskId],
    ends: Mapping[TaskId, int],
    clients: Sequence[Client],
    config: PlacementConfig,
) -> dict[str, Placement]:
    """Each client's active tasks, standbys and warm-ups.

    ``ends`` holds, for every *stateful* task, the sum of its changelog partitions' end
    offsets; tasks absent from it are stateless.
    """
    ordered = sorted(clients, key=lambda c: c.id)
    out = {c.id: Placement() for c in ordered}
    if not ordered:
        return out
    all_tasks = sorted(set(tasks))
    stateful = [t for t in all_tasks if t in ends]
    stateless = [t for t in all_tasks if t not in ends]
    lags = Lags(ends, config.acceptable_recovery_lag)

    target = _balanced_sticky(stateful, ordered, lags)
    active = _prefer_caught_up(stateful, target, ordered, lags, config, out)
    for task, client in active.items():
        out[client].active.add(task)
    _place_standbys(stateful, active, ordered, lags, config, out)
    for task, client in _balanced_sticky(stateless, ordered, None, active).items():
        out[client].active.add(task)
    return out


def _balanced_sticky(
    tasks: Sequence[TaskId],
    clients: Sequence[Client],
    lags: Lags | None,
    already: Mapping[TaskId, str] | None = None,
) -> dict[TaskId, str]:
    """Rule 1 (and rule 4 with ``lags=None``): an even, sticky spread of ``tasks``."""
    quota = _Quota(len(tasks), len(clients))
    other_load = Counter(already.values()) if already else Counter[str]()
    target: dict[TaskId, str] = {}

    def alternatives(task: TaskId) -> int:
        """Caught-up clients that did not run it: a previous owner above its share keeps
        first the tasks nobody else could take over without a restore."""
        if lags is None:
            return 0
        return sum(1 for c in clients if task not in c.previous_active and lags.caught_up(c, task))

    for task in sorted(tasks, key=lambda t: (alternatives(t), t)):
        owners = [c for c in clients if task in c.previous_active and c.can_run(task)]
        if lags is not None:
            owners.sort(key=lambda c: (lags.rank(c, task), c.id))
        for owner in owners:
            if quota.room(owner.id):
                target[task] = owner.id
                quota.take(owner.id)
                break
    for task in tasks:
        if task in target:
            continue
        candidates = [c for c in clients if c.can_run(task)]
        if not candidates:
            continue  # nobody subscribes to its topics: left unassigned
        with_room = [c for c in candidates if quota.room(c.id)] or candidates

        def key(c: Client, task: TaskId = task) -> tuple[bool, bool, int, int, str]:
            if lags is None:
                return (quota.full(c.id), False, 0, quota.load[c.id] + other_load[c.id], c.id)
            return (
                quota.full(c.id),
                not lags.caught_up(c, task),
                lags.rank(c, task),
                quota.load[c.id],
                c.id,
            )

        chosen = min(with_room, key=key)
        target[task] = chosen.id
        quota.take(chosen.id)
    return target


def _prefer_caught_up(
    tasks: Sequence[TaskId],
    target: Mapping[TaskId, str],
    clients: Sequence[Client],
    lags: Lags,
    config: PlacementConfig,
    out: dict[str, Placement],
) -> dict[TaskId, str]:
    """Rule 2: run each task on a caught-up client; warm the target up instead."""
    by_id = {c.id: c for c in clients}
    active = dict(target)
    load = Counter(active.values())
    warmups_left = config.max_warmup_replicas

    def caught_up_on(task: TaskId) -> list[Client]:
        return [c for c in clients if c.can_run(task) and lags.caught_up(c, task)]

    # Tasks with the fewest caught-up clients first: they have the least choice.
    for task in sorted(tasks, key=lambda t: (len(caught_up_on(t)), t)):
        if task not in active:
            continue
        chosen = by_id[active[task]]
        caught = caught_up_on(task)
        if not caught or chosen in caught:
            continue
        source = min(
            caught,
            key=lambda c: (task not in c.previous_active, load[c.id], lags.rank(c, task), c.id),
        )
        active[task] = source.id
        load[chosen.id] -= 1
        load[source.id] += 1
        if warmups_left > 0:
            warmups_left -= 1
            out[chosen.id].warmup.add(task)
            out[chosen.id].lags[task] = lags.rank(chosen, task)
    return active


def _place_standbys(
    tasks: Sequence[TaskId],
    active: Mapping[TaskId, str],
    clients: Sequence[Client],
    lags: Lags,
    config: PlacementConfig,
    out: dict[str, Placement],
) -> None:
    """Rule 3: ``standby_replicas`` standbys per task on distinct other clients."""
    if config.standby_replicas <= 0:
        return
    load: Counter[str] = Counter()
    for client_id, placement in out.items():
        load[client_id] += len(placement.warmup)
    for task in tasks:
        holders = {cid for cid, p in out.items() if task in p.warmup}
        needed = config.standby_replicas - len(holders)
        if needed <= 0:
            continue
        candidates = [
            c
            for c in clients
            if c.can_run(task) and c.id != active.get(task) and c.id not in holders
        ]

        def rank(c: Client, task: TaskId = task) -> tuple[bool, int, int, int, str]:
            # Caught-up clients first, spread by load among them; then the least behind.
            caught = lags.caught_up(c, task)
            behind = 0 if caught else lags.rank(c, task)
            return (not caught, behind, load[c.id], lags.rank(c, task), c.id)

        for client in sorted(candidates, key=rank)[:needed]:
            out[client.id].standby.add(task)
            out[client.id].lags[task] = lags.rank(client, task)
            load[client.id] += 1


def warmups_pending(placements: Mapping[str, Placement]) -> bool:
    """Whether a probing rebalance is needed to finish moving tasks."""
    return any(p.warmup for p in placements.values())
