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

WORKER_FAULTS = (SIGTERM, SIGKILL, ZOMBIE, STATE_WIPE)
BROKER_FAULTS = (BROKER_KILL, TXN_COORDINATOR_KILL, GROUP_COORDINATOR_KILL, BROKER_PAUSE)
KINDS = WORKER_FAULTS + BROKER_FAULTS

DESCRIPTIONS = {
    SIGTERM: "SIGTERM a worker (graceful: commit, leave), restart it on its state dir",
    SIGKILL: "SIGKILL a worker mid-transaction, restart it on its state dir",
    ZOMBIE: "SIGSTOP a worker past the session timeout (the group moves on), then SIGCONT",
    STATE_WIPE: "SIGKILL a worker, delete its state dir, restart it (new transactional id)",
    BROKER_KILL: "SIGKILL a random broker, restart it",
    TXN_COORDINATOR_KILL: "SIGKILL the broker coordinating a worker's transactions, restart it",
    GROUP_COORDINATOR_KILL: "SIGKILL the group coordinator broker, restart it",
    BROKER_PAUSE: "SIGSTOP a random broker (hung connections, expired session), then SIGCONT",
}

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
    #: How long the victim stays down (stopped worker, dead broker) or frozen (zombie).
    down: float

    def describe(self) -> str:
        by_node = self.kind in (BROKER_KILL, BROKER_PAUSE)
        target = f"node {self.node}" if by_node else f"worker {self.worker}"
        return f"#{self.index} {self.kind} ({target}, {self.down:.1f}s down) at {self.at:.1f}s"

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
) -> list[Fault]:
    rng = random.Random(f"chaos-schedule-{seed}")
    kinds = [k for k in KINDS if mix.get(k, 0) > 0]
    chosen = list(kinds[:faults])
    weights = [mix[k] for k in kinds]
    chosen += rng.choices(kinds, weights=weights, k=max(0, faults - len(chosen)))
    rng.shuffle(chosen)
    times = sorted(rng.uniform(0.05, 0.85) * duration for _ in chosen)
    schedule = []
    for index, (kind, at) in enumerate(zip(chosen, times, strict=True)):
        if kind == ZOMBIE:
            # Past the session timeout for sure; sometimes past the transaction timeout too
            # (then the broker aborts the zombie's transaction before it wakes up).
            down = rng.uniform(session_timeout + 2.0, session_timeout + transaction_timeout + 3.0)
        elif kind in BROKER_FAULTS:
            down = rng.uniform(2.0, 8.0)
        else:
            down = rng.uniform(0.0, 3.0)
        schedule.append(
            Fault(
                index=index + 1,
                kind=kind,
                at=round(at, 2),
                worker=rng.randrange(workers),
                node=rng.randrange(brokers) + 1,
                down=round(down, 2),
            )
        )
    return schedule
