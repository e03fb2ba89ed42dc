"""The fault schedule: which faults, against what, when, and for how long, drawn from a seed.

The same seed and options give the same schedule, so a failing run can be replayed (the systems'
own timing still varies from run to run: the schedule fixes what is done and when it is started).
Every kind in the mix is used at least once when there are enough faults; the rest are drawn by
weight and the order is shuffled. Fault start times are spread uniformly over the generator's
duration; a fault whose recovery outlasts the gap to the next one delays it (faults never overlap,
so each one's recovery time can be measured).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: Worker faults.
SIGTERM = "sigterm"
SIGKILL = "sigkill"
ZOMBIE = "zombie"
STATE_WIPE = "state_wipe"
#: Broker faults (kill -9, then restart on the same data directory).
BROKER_KILL = "broker_kill"
TXN_COORDINATOR_KILL = "txn_coordinator_kill"
GROUP_COORDINATOR_KILL = "group_coordinator_kill"
#: SIGSTOP a broker (its connections hang, its session expires), then SIGCONT.
BROKER_PAUSE = "broker_pause"

#: Network faults (the networked mode only: each broker and worker in its own namespace).
#: A worker cut from every broker, longer than the session timeout (the group moves on) ...
WORKER_CUT = "worker_cut"
#: ... and shorter (it keeps its partitions; its requests stall, then go through).
WORKER_BLIP = "worker_blip"
#: A worker cut from its group and transaction coordinators while it still reaches the
#: leaders of its partitions (moved off the coordinators' brokers first): the zombie that can
#: still write.
COORDINATORS_CUT = "coordinators_cut"
#: A broker cut from the other brokers while clients still reach it (the old leader).
BROKER_ISOLATED = "broker_isolated"
#: The reverse: every worker cut from a broker that still reaches the other brokers (the
#: generator, the test's driver, keeps writing to it, so that the stall shows).
BROKER_UNREACHABLE = "broker_unreachable"
#: A worker's transaction coordinator cut from one partition leader: markers cannot be written.
MARKERS_CUT = "markers_cut"
#: One direction of a link only (variant 0: worker -> brokers, 1: brokers -> worker, 2: one
#: broker -> another).
ONE_WAY_CUT = "one_way_cut"
#: A worker's links to every broker cut and healed again and again.
FLAPPING_LINK = "flapping_link"
#: A worker's link throttled (token bucket: queueing delay, and loss past its latency).
SLOW_LINK = "slow_link"

WORKER_FAULTS = (SIGTERM, SIGKILL, ZOMBIE, STATE_WIPE)
BROKER_FAULTS = (BROKER_KILL, TXN_COORDINATOR_KILL, GROUP_COORDINATOR_KILL, BROKER_PAUSE)
NETWORK_FAULTS = (
    WORKER_CUT,
    WORKER_BLIP,
    COORDINATORS_CUT,
    BROKER_ISOLATED,
    BROKER_UNREACHABLE,
    MARKERS_CUT,
    ONE_WAY_CUT,
    FLAPPING_LINK,
    SLOW_LINK,
)
PROCESS_FAULTS = WORKER_FAULTS + BROKER_FAULTS
KINDS = PROCESS_FAULTS + NETWORK_FAULTS
#: Network faults whose victim the rest of the cluster can work around while the cut holds
#: (the group gives the cut worker's partitions to the others): their liveness is judged from
#: the strike, like a process fault's. The others stop some progress until the link heals
#: (a leader, a coordinator or a link nobody can replace), so theirs is judged from the heal.
ROUTED_AROUND = (WORKER_CUT, COORDINATORS_CUT)
#: Throttle rates of slow_link (kbit/s), by variant.
SLOW_LINK_RATES = (128, 256, 512, 1024)
#: One-way cut variants.
ONE_WAY_VARIANTS = ("worker -> brokers", "brokers -> worker", "broker -> broker")

DESCRIPTIONS = {
    SIGTERM: "SIGTERM a worker (graceful: commit, leave), restart it on its state dir",
    SIGKILL: "SIGKILL a worker mid-transaction, restart it on its state dir",
    ZOMBIE: "SIGSTOP a worker past the session timeout (the group moves on), then SIGCONT",
    STATE_WIPE: "SIGKILL a worker, delete its state dir, restart it (new transactional id)",
    BROKER_KILL: "SIGKILL a random broker, restart it",
    TXN_COORDINATOR_KILL: "SIGKILL the broker coordinating a worker's transactions, restart it",
    GROUP_COORDINATOR_KILL: "SIGKILL the group coordinator broker, restart it",
    BROKER_PAUSE: "SIGSTOP a random broker (hung connections, expired session), then SIGCONT",
    WORKER_CUT: "cut a worker from every broker for longer than the session timeout",
    WORKER_BLIP: "cut a worker from every broker for less than half the session timeout",
    COORDINATORS_CUT: "cut a worker from its group and transaction coordinators only "
    "(leaders moved off them first: the zombie can still write)",
    BROKER_ISOLATED: "cut a broker from the other brokers; clients still reach it",
    BROKER_UNREACHABLE: "cut every worker from a broker that still reaches the other brokers",
    MARKERS_CUT: "cut a worker's transaction coordinator from one partition leader",
    ONE_WAY_CUT: "drop one direction only (worker -> brokers, brokers -> worker, or "
    "broker -> broker)",
    FLAPPING_LINK: "cut and heal a worker's links to every broker again and again",
    SLOW_LINK: "throttle a worker's link (token bucket: delay, and loss past 500 ms)",
}

#: The network kinds' weights, added to the mix by ``--network``.
NETWORK_MIX: dict[str, float] = dict.fromkeys(NETWORK_FAULTS, 1.0)

DEFAULT_MIX: dict[str, float] = {
    SIGTERM: 2.0,
    SIGKILL: 3.0,
    ZOMBIE: 2.0,
    STATE_WIPE: 1.0,
    BROKER_KILL: 1.0,
    TXN_COORDINATOR_KILL: 1.0,
    GROUP_COORDINATOR_KILL: 1.0,
    BROKER_PAUSE: 1.0,
}


@dataclass(frozen=True)
class Fault:
    index: int
    kind: str
    #: Seconds after the generator started.
    at: float
    #: The worker it hits (worker faults; for coordinator faults, whose transactions).
    worker: int
    #: A broker node id (broker_kill, broker_pause; coordinators are looked up when it fires).
    node: int
    #: How long the victim stays down (stopped worker, dead broker) or frozen (zombie), or
    #: how long a network fault holds before it heals.
    down: float
    #: Network faults: the one-way cut's direction, the slow link's rate, the flapping
    #: pattern's seed (see the kinds above); 0 for the others.
    variant: int = 0

    @property
    def by_node(self) -> bool:
        return self.kind in (BROKER_KILL, BROKER_PAUSE, BROKER_ISOLATED, BROKER_UNREACHABLE) or (
            self.kind == ONE_WAY_CUT and self.variant == 2
        )

    def describe(self) -> str:
        target = f"node {self.node}" if self.by_node else f"worker {self.worker}"
        extra = ""
        if self.kind == ONE_WAY_CUT:
            extra = f", {ONE_WAY_VARIANTS[self.variant]}"
        elif self.kind == SLOW_LINK:
            extra = f", {SLOW_LINK_RATES[self.variant]} kbit/s"
        return (
            f"#{self.index} {self.kind} ({target}{extra}, {self.down:.1f}s down) at {self.at:.1f}s"
        )

    def asdict(self) -> dict[str, Any]:
        return asdict(self)


def parse_mix(text: str) -> dict[str, float]:
    """``"sigkill=3,zombie=2,broker_kill"`` (a kind without a weight weighs 1)."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, weight = part.partition("=")
        name = name.strip()
        if name not in KINDS:
            raise ValueError(f"unknown fault kind {name!r}; use {', '.join(KINDS)}")
        value = float(weight) if weight else 1.0
        if value < 0:
            raise ValueError(f"fault weight of {name} must not be negative")
        mix[name] = value
    if not any(mix.values()):
        raise ValueError("the fault mix is empty")
    return mix


def build_schedule(
    *,
    seed: int,
    faults: int,
    duration: float,
    mix: Mapping[str, float],
    workers: int,
    brokers: int,
    session_timeout: float,
    transaction_timeout: float,
    back_to_back: bool = False,
    max_down: float | None = None,
    min_per_kind: int = 1,
) -> list[Fault]:
    """The faults of a run. ``min_per_kind``: each kind of the mix at least that often (as far
    as ``faults`` goes), the rest drawn by weight. ``back_to_back``: every fault due early on,
    so each strikes as soon as the one before has recovered (short runs that must fit their
    faults into the input); ``max_down``: no network fault holds longer (kinds that must outlast
    the session timeout still do)."""
    rng = random.Random(f"chaos-schedule-{seed}")
    kinds = [k for k in KINDS if mix.get(k, 0) > 0]
    chosen = (kinds * max(1, min_per_kind))[:faults]
    weights = [mix[k] for k in kinds]
    chosen += rng.choices(kinds, weights=weights, k=max(0, faults - len(chosen)))
    rng.shuffle(chosen)
    times = sorted(rng.uniform(0.05, 0.85) * duration for _ in chosen)
    schedule = []
    for index, (kind, at) in enumerate(zip(chosen, times, strict=True)):
        if kind in (ZOMBIE, WORKER_CUT, COORDINATORS_CUT):
            # Past the session timeout for sure; sometimes past the transaction timeout too
            # (then the broker aborts the zombie's transaction before it wakes up).
            down = rng.uniform(session_timeout + 2.0, session_timeout + transaction_timeout + 3.0)
        elif kind in BROKER_FAULTS:
            down = rng.uniform(2.0, 8.0)
        elif kind in NETWORK_FAULTS:
            down = _network_down(rng, kind, session_timeout, transaction_timeout)
        else:
            down = rng.uniform(0.0, 3.0)
        if max_down is not None and kind in NETWORK_FAULTS:
            floor = session_timeout + 2.0 if kind in (WORKER_CUT, COORDINATORS_CUT) else 0.5
            down = max(floor, min(down, max_down))
        worker = rng.randrange(workers)
        node = rng.randrange(brokers) + 1
        # Drawn for network kinds only, so process-only schedules stay what their seeds gave.
        variant = _variant(rng, kind) if kind in NETWORK_FAULTS else 0
        schedule.append(
            Fault(
                index=index + 1,
                kind=kind,
                at=round(0.05 * duration if back_to_back else at, 2),
                worker=worker,
                node=node,
                down=round(down, 2),
                variant=variant,
            )
        )
    return schedule


def _network_down(
    rng: random.Random, kind: str, session_timeout: float, transaction_timeout: float
) -> float:
    """How long a network fault holds (WORKER_CUT and COORDINATORS_CUT: as a zombie)."""
    if kind == WORKER_BLIP:
        # Under half the session timeout: with TCP's retransmission back-off the first packet
        # after the heal may come a few seconds later, and the member must still be in time.
        return rng.uniform(0.5, session_timeout / 2)
    if kind == BROKER_ISOLATED:
        return rng.uniform(3.0, 15.0)  # across the brokers' 4 s session: leaders move, or not
    if kind == MARKERS_CUT:
        return rng.uniform(3.0, transaction_timeout + 5.0)
    if kind == ONE_WAY_CUT:
        return rng.uniform(2.0, session_timeout + 4.0)
    if kind == FLAPPING_LINK:
        return rng.uniform(8.0, 20.0)
    if kind == SLOW_LINK:
        return rng.uniform(5.0, 20.0)
    return rng.uniform(2.0, 10.0)  # BROKER_UNREACHABLE


def _variant(rng: random.Random, kind: str) -> int:
    if kind == ONE_WAY_CUT:
        return rng.randrange(len(ONE_WAY_VARIANTS))
    if kind == SLOW_LINK:
        return rng.randrange(len(SLOW_LINK_RATES))
    if kind == FLAPPING_LINK:
        return rng.randrange(1 << 16)
    return 0


def flapping_pattern(fault: Fault) -> list[tuple[bool, float]]:
    """A flapping link's phases, (cut?, seconds), from its variant: cut and up in turn,
    0.3-2.5 s each, starting cut and ending cut, within the fault's ``down``."""
    rng = random.Random(f"flapping-{fault.variant}")
    phases: list[tuple[bool, float]] = []
    total, cut = 0.0, True
    while total < fault.down:
        length = min(rng.uniform(0.3, 2.5), fault.down - total)
        phases.append((cut, length))
        total += length
        cut = not cut
    return phases
