"""What a chaos run does: sizes, durations, the seed, the fault mix, the systems, the timeouts."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from streams_app.chaos.schedule import DEFAULT_MIX, NETWORK_FAULTS
from streams_app.chaos.systems import FAUST, STREAMS_APP


@dataclass
class ChaosConfig:
    #: Input records for streams_app, spread over ``duration`` seconds.
    records: int = 1_000_000
    duration: float = 900.0
    #: Faults per system, spread over the duration.
    faults: int = 30
    #: Replay a run with its seed (printed at the start and stored in the results).
    seed: int = field(default_factory=lambda: random.randrange(1_000_000))
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    systems: tuple[str, ...] = (STREAMS_APP, FAUST)
    workers: int = 3
    partitions: int = 5
    keys: int = 20_000
    values: int = 10_000
    session_timeout: float = 6.0
    heartbeat_interval: float = 1.0
    transaction_timeout: float = 10.0
    #: None: the product's default (100 ms under exactly-once).
    commit_interval: float | None = None
    #: The networked mode: every broker, worker and the generator in a network namespace of
    #: its own (streams_app.broker.netns), so network faults can cut links. Needs root.
    network: bool = False
    #: Short runs: faults back to back from the start (each as soon as the one before has
    #: recovered), network faults held at most ``max_network_down`` seconds (but past the
    #: session timeout where the kind says so), so that all of them strike while input flows;
    #: once the last has recovered, the rest of the input is sent at once (the duration is an
    #: upper bound).
    back_to_back: bool = False
    max_network_down: float | None = None
    #: Each kind of the mix at least this often (long runs that must show every kind often).
    min_per_kind: int = 1
    #: Standby replicas per task, and static group membership, for every system's workers.
    standby_replicas: int = 0
    static_membership: bool = False
    #: None: exactly-once. Another guarantee is unsafe on purpose: only for showing that the
    #: verifier catches what it lets through.
    processing_guarantee: str | None = None
    #: faust-streaming's row: its size (it processes ~100 records/s here, see CHAOS.md), its
    #: duration and fault count (None: as streams_app's), and a hard limit on its whole run.
    faust_records: int = 30_000
    faust_duration: float | None = None
    faust_faults: int | None = None
    faust_time_limit: float = 2400.0
    #: Invariant 11: the client-level copier workload (per system's client layer).
    client_check: bool = True
    client_records: int = 60_000
    client_duration: float = 60.0
    client_faults: int = 3
    #: The concurrent read_committed reader of invariant 6 (reads every output during the run).
    concurrent_reader: bool = True
    #: Liveness bound = session timeout + transaction timeout + longest restore + this grace
    #: (process start, leader election after a broker death, the rebalance's join round).
    liveness_grace: float = 15.0
    #: How long to wait for the group to process everything after the last record.
    drain_timeout: float = 300.0
    #: How long a run may go without any progress before draining gives up.
    stall_timeout: float = 90.0
    #: Bounds on the phases after the run: each stop-and-restore step, and the verification.
    #: Past one, the run fails with every task's await chain and each broker's state, so that a
    #: hang says where it is instead of ending as the test runner's timeout.
    teardown_timeout: float = 180.0
    verify_timeout: float = 3600.0
    workdir: Path = Path(".chaos")
    output: Path = Path("chaos-results.json")

    def validate(self) -> None:
        if self.records < 1 or self.faults < 0 or self.duration <= 0:
            raise ValueError("records must be >= 1, faults >= 0, duration > 0")
        if self.workers < 2:
            raise ValueError("at least 2 workers: a fault must leave someone to take over")
        if self.heartbeat_interval * 3 > self.session_timeout:
            raise ValueError("heartbeat_interval must be at most a third of session_timeout")
        network_kinds = sorted(k for k in NETWORK_FAULTS if self.mix.get(k, 0) > 0)
        if network_kinds and not self.network:
            raise ValueError(
                f"the network fault kinds {', '.join(network_kinds)} need the networked mode "
                "(--network)"
            )
        if self.standby_replicas < 0 or self.standby_replicas >= self.workers:
            raise ValueError("standby replicas must be at least 0 and fewer than the workers")
        unknown = set(self.systems) - {STREAMS_APP, FAUST}
        if unknown:
            raise ValueError(f"unknown systems {sorted(unknown)}; use {STREAMS_APP}, {FAUST}")
