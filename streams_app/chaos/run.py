"""One chaos run of one system: topics, workers, generator, faults, drain, stop, verify.

The shape of Kafka's streams EOS system test: the driver writes while the workers process and
the faults strike; then the driver stops, the workers are allowed to catch up and are stopped
cleanly, and the verifier reads everything back ``read_committed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from streams_app.aio import within
from streams_app.broker import EmbeddedKafka
from streams_app.broker.netns import Network, start_in
from streams_app.chaos import invariants as inv
from streams_app.chaos.config import ChaosConfig
from streams_app.chaos.coordinators import CoordinatorLocator
from streams_app.chaos.copier import (
    AIOKAFKA_CLIENT,
    STREAMS_APP_CLIENT,
    CopierResult,
    run_copier_check,
)
from streams_app.chaos.faults import FaultInjector, FaultRecord, wait_fully_replicated
from streams_app.chaos.generator import Generator, GeneratorResult
from streams_app.chaos.partitions import (
    GENERATOR_HOST,
    NetworkFaults,
    worker_host,
    worker_octet,
)
from streams_app.chaos.progress import ProgressMonitor
from streams_app.chaos.reader import ConcurrentReader
from streams_app.chaos.schedule import (
    BROKER_KILL,
    GROUP_COORDINATOR_KILL,
    ROUTED_AROUND,
    build_schedule,
)
from streams_app.chaos.systems import (
    FAUST,
    STREAMS_APP,
    FaustSystem,
    StreamsAppSystem,
    System,
    WorkerSettings,
)
from streams_app.chaos.verifier import Verification, Verifier
from streams_app.chaos.watchdog import bounded
from streams_app.testing.workers import ASSIGNED

log = logging.getLogger(__name__)

#: Log lines that say a worker is up (streams_app: assigned partitions; faust: ready).
READY = {STREAMS_APP: ASSIGNED, FAUST: "[^Worker]: Ready"}


@dataclass
class SystemResult:
    system: str
    seed: int
    records: int = 0
    processed: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    #: Violations per check (the twelve invariants, then the partition checks); None: not
    #: checked in this run (e.g. no client check, no network fault).
    violations: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(inv.CHECKS, 0))
    max_resume_seconds: float | None = None
    #: Per fault kind: faults, the longest resume from the strike, and (network kinds) the
    #: longest from the heal; the figure liveness judges is marked in ``judged``.
    resume_by_kind: dict[str, dict[str, Any]] = field(default_factory=dict)
    liveness_bound_seconds: float = 0.0
    network: bool = False
    drained: bool = False
    seconds: float = 0.0
    generator: dict[str, Any] = field(default_factory=dict)
    fault_log: list[dict[str, Any]] = field(default_factory=list)
    examples: dict[str, list[str]] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    client_check: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def total_violations(self) -> int:
        return sum(v for v in self.violations.values() if v)

    def asdict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "processed": self.processed,
            "faults": self.faults,
            "violations": self.violations,
            "max_resume_seconds": self.max_resume_seconds,
            "resume_by_kind": self.resume_by_kind,
            "liveness_bound_seconds": self.liveness_bound_seconds,
            "network": self.network,
            "drained": self.drained,
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
            "generator": self.generator,
            "fault_log": self.fault_log,
            "examples": self.examples,
            "stats": self.stats,
            "client_check": self.client_check,
            "notes": self.notes,
        }


def make_system(name: str, bootstrap: str, workdir: Path, config: ChaosConfig) -> System:
    settings = WorkerSettings(
        session_timeout=config.session_timeout,
        heartbeat_interval=config.heartbeat_interval,
        transaction_timeout=config.transaction_timeout,
        commit_interval=config.commit_interval,
        replication_factor=3,
        standby_replicas=config.standby_replicas,
        static_membership=config.static_membership,
        processing_guarantee=config.processing_guarantee,
    )
    suffix = f"{'sa' if name == STREAMS_APP else 'fa'}{config.seed}-{uuid.uuid4().hex[:6]}"
    cls = StreamsAppSystem if name == STREAMS_APP else FaustSystem
    return cls(bootstrap, suffix, workdir / f"{name}-{suffix}", settings)


async def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="chaos-setup")
    await admin.start()
    try:
        await admin.create_topics([NewTopic(n, partitions, 3) for n in names])
    finally:
        await admin.close()


async def wait_topics(bootstrap: str, names: list[str], timeout: float) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="chaos-setup")
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            missing = set(names) - set(await admin.list_topics())
            if not missing:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topics {sorted(missing)} were not created in {timeout:.0f}s")
            await asyncio.sleep(0.5)
    finally:
        await admin.close()


class GeneratorRun:
    """The generator as a task: on this loop (loopback), or on a thread of its own inside the
    generator's network namespace (networked: a client the network faults can cut)."""

    def __init__(self, generator: Generator, namespace: str | None) -> None:
        self.generator = generator
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = False
        self._hurried = False
        self.task: asyncio.Future[GeneratorResult]
        if namespace is None:
            self.task = asyncio.ensure_future(generator.run())
        else:
            self.task = asyncio.wrap_future(
                start_in(namespace, lambda: asyncio.run(self._main()), "chaos-generator")
            )

    async def _main(self) -> GeneratorResult:
        self._loop = asyncio.get_running_loop()
        if self._stopped:
            self.generator.stop()
        if self._hurried:
            self.generator.hurry()
        return await self.generator.run()

    def stop(self) -> None:
        self._stopped = True
        self._call(self.generator.stop)

    def hurry(self) -> None:
        self._hurried = True
        self._call(self.generator.hurry)

    def _call(self, method: Callable[[], None]) -> None:
        """``method`` of the generator, on the loop it runs on."""
        loop = self._loop
        if loop is None:
            method()
        elif not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed in between: it has ended anyway
                loop.call_soon_threadsafe(method)


def _networked(network: Network, system: System, workers: int) -> None:
    """Each worker a host of its own (``w<i>``, keeping its address across restarts), and the
    generator's host."""
    for index in range(workers):
        network.add_host(worker_host(index), worker_octet(index))
    network.add_host(GENERATOR_HOST, 2)
    system.command_prefix = lambda index: network.command_prefix(worker_host(index))


async def run_system(
    cluster: EmbeddedKafka,
    name: str,
    config: ChaosConfig,
    *,
    records: int,
    duration: float,
    faults: int,
    time_limit: float | None = None,
    network: Network | None = None,
) -> SystemResult:
    started = time.monotonic()
    deadline = started + time_limit if time_limit else None
    bootstrap = cluster.bootstrap_servers
    workdir = config.workdir.resolve()
    system = make_system(name, bootstrap, workdir, config)
    system.workdir.mkdir(parents=True, exist_ok=True)
    result = SystemResult(system=name, seed=config.seed, network=network is not None)
    if network is not None:
        _networked(network, system, config.workers)
    topics = system.topics
    log.info("%s: run %s in %s", name, system.suffix, system.workdir)
    await create_topics(bootstrap, topics.external, config.partitions)

    workers = [system.worker(i) for i in range(config.workers)]
    locator = CoordinatorLocator(bootstrap)
    monitor: ProgressMonitor | None = None
    reader: ConcurrentReader | None = None
    injector: FaultInjector | None = None
    network_faults: NetworkFaults | None = None
    gen_run: GeneratorRun | None = None
    run_started = started
    generator = Generator(
        bootstrap,
        topics.data,
        records=records,
        duration=duration,
        seed=config.seed,
        keys=config.keys,
        values=config.values,
    )
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            await asyncio.to_thread(worker.wait_for_log, READY[name], 180.0)
        await wait_topics(bootstrap, topics.outputs, 120.0)
        await locator.start()
        monitor = ProgressMonitor(bootstrap, system.group_id, topics.inputs)
        await monitor.start()
        if config.concurrent_reader:
            reader = ConcurrentReader(bootstrap, topics.outputs)
            reader.start()
        schedule = build_schedule(
            seed=config.seed,
            faults=faults,
            duration=duration,
            mix=config.mix,
            workers=config.workers,
            brokers=len(cluster.nodes),
            session_timeout=config.session_timeout,
            transaction_timeout=system.transaction_timeout,
            back_to_back=config.back_to_back,
            max_down=config.max_network_down,
            min_per_kind=config.min_per_kind,
        )
        # Long enough to measure a resume well past the liveness bound (which also counts the
        # longest restore, known only at the end), short enough that a system that never
        # resumes does not eat the run.
        resume_timeout = (
            config.session_timeout + system.transaction_timeout + config.liveness_grace + 30.0
        )
        if network is not None:
            network_faults = NetworkFaults(
                network,
                cluster,
                system,
                workers,
                locator,
                bound=config.session_timeout + system.transaction_timeout + config.liveness_grace,
            )
        injector = FaultInjector(
            cluster,
            system,
            workers,
            monitor,
            locator,
            resume_timeout=resume_timeout,
            deadline=deadline,
            network=network_faults,
            transaction_timeout=system.transaction_timeout,
        )
        run_started = time.monotonic()
        gen_run = GeneratorRun(
            generator, network.namespace_of(GENERATOR_HOST) if network is not None else None
        )
        injector.input_running = lambda: not gen_run.task.done()
        await injector.run(schedule, run_started)
        if config.back_to_back:
            gen_run.hurry()  # the faults are over: the rest of the input at once
        if deadline is not None:
            remaining = max(1.0, deadline - time.monotonic())
            try:
                await within(asyncio.shield(gen_run.task), remaining)
            except TimeoutError:
                gen_run.stop()
                result.notes.append("the generator was stopped early by the time limit")
        await gen_run.task
        await injector.ensure_workers()
        result.drained = await _drain(monitor, config, deadline)
        log.info(
            "%s: %s at %.1fs",
            name,
            "drained" if result.drained else "NOT drained",
            time.monotonic() - run_started,
        )
        if not result.drained:
            result.notes.append(
                f"the group did not process all input (lag {monitor.lag()} records) in time"
            )
    finally:
        if network is not None:
            network.heal()  # whatever happened, no cut outlives the run
        if gen_run is not None and not gen_run.task.done():
            gen_run.stop()
            with contextlib.suppress(Exception):
                await gen_run.task
        # All at once: one by one, each stop was a rebalance for the workers still running.
        running = [(index, worker) for index, worker in enumerate(workers) if worker.running]
        codes = await asyncio.gather(
            *(asyncio.to_thread(worker.terminate, 60.0) for _index, worker in running)
        )
        for (index, _worker), code in zip(running, codes, strict=True):
            if code != 0:
                result.notes.append(f"worker {index} exited with {code} on the final SIGTERM")
        if network_faults is not None:
            await bounded(
                "the last hanging-transaction checks",
                _finish_network_checks(network_faults),
                config.teardown_timeout,
                lambda: _cluster_state(cluster),
            )
        await bounded(
            "stopping the reader and the monitor",
            _stop_observers(reader, monitor, locator),
            config.teardown_timeout,
            lambda: _cluster_state(cluster),
        )
    await bounded(
        "bringing every broker back",
        asyncio.to_thread(cluster.ensure_all_running),
        config.teardown_timeout,
        lambda: _cluster_state(cluster),
    )

    gen = generator.result
    result.generator = {
        "sent": gen.sent,
        "acked": len(gen.acked),
        "indeterminate": gen.indeterminate,
        "producers": gen.producers,
        "seconds": round(gen.seconds, 1),
    }
    assert injector is not None
    if injector.unexpected_exits:
        result.notes.extend(injector.unexpected_exits)
    # The operator's `txn hanging` at the end reads what the verifier reads: beside it.
    final_check: asyncio.Future[list[str] | None] | None = None
    if network is not None:
        final_check = asyncio.ensure_future(
            asyncio.to_thread(
                txn_hanging_cli, bootstrap, [*topics.external, *topics.outputs, topics.repartition]
            )
        )
    stores = [snap for i in range(config.workers) for snap in system.stores(i)]
    verifier = Verifier(
        bootstrap,
        system,
        stores=stores,
        concurrent=reader.offsets if reader is not None else None,
        acked=gen.acked,
        quiescence_timeout=system.transaction_timeout + 30.0,
    )
    try:
        verification = await bounded(
            "verification", verifier.run(), config.verify_timeout, lambda: _cluster_state(cluster)
        )
    finally:
        final_hanging = await final_check if final_check is not None else None
    _fill(result, system, verification, injector.records, workers, config)
    if network is not None:
        _fill_partition_checks(result, injector.records, final_hanging)
    result.seconds = time.monotonic() - started
    if monitor is not None:
        # The group's progress over the run, for diagnosis (seconds since the run started).
        (system.workdir / "progress.jsonl").write_text(
            "".join(
                json.dumps(
                    {
                        "t": round(at - run_started, 2),
                        "committed": {f"{t}[{p}]": o for (t, p), o in committed.items()},
                        "ends": {f"{t}[{p}]": o for (t, p), o in ends.items()},
                    }
                )
                + "\n"
                for at, committed, ends in monitor.history
            )
        )
    (system.workdir / "result.json").write_text(json.dumps(result.asdict(), indent=1))
    return result


async def _stop_observers(
    reader: ConcurrentReader | None, monitor: ProgressMonitor | None, locator: CoordinatorLocator
) -> None:
    if reader is not None:
        await reader.stop()
    if monitor is not None:
        await monitor.stop()
    await locator.close()


def _cluster_state(cluster: EmbeddedKafka) -> str:
    """Each node's process state (a SIGSTOPped broker shows ``T``) and its log's last lines."""
    lines = []
    for node in cluster.nodes.values():
        state = "down"
        if node.running and node.pid is not None:
            try:
                # /proc/<pid>/stat: "pid (comm) state ..."; comm may hold spaces, state follows ")".
                stat = Path(f"/proc/{node.pid}/stat").read_text()
                state = f"pid {node.pid}, state {stat.rsplit(')', 1)[1].split()[0]}"
            except (OSError, IndexError):
                state = f"pid {node.pid}"
        lines.append(f"--- node {node.node_id}: {state} ---\n{node.log_tail(15)}")
    return "\n".join(lines)


async def _drain(monitor: ProgressMonitor, config: ChaosConfig, deadline: float | None) -> bool:
    """Wait until the group has processed everything, or made no progress for a while.

    Only answers read after the last record was written count: an older one can show the
    group caught up with an end offset that has moved since.
    """
    since = time.monotonic()
    limit = since + config.drain_timeout
    if deadline is not None:
        limit = min(limit, max(deadline, since + 30.0))
    last = monitor.snapshot()[0]
    last_change = since
    while monitor.updated_at < since or not monitor.caught_up():
        now = time.monotonic()
        if now > limit or now - last_change > config.stall_timeout:
            return False
        with contextlib.suppress(TimeoutError):
            await within(monitor.next_update(), 5.0)
        current = monitor.snapshot()[0]
        if current != last:
            last, last_change = current, time.monotonic()
    return True


def _fill(
    result: SystemResult,
    system: System,
    verification: Verification,
    records: list[FaultRecord],
    workers: list[Any],
    config: ChaosConfig,
) -> None:
    result.violations = dict(verification.violations)
    result.violations[inv.CLIENT_TRANSACTIONS] = None  # set by the client check, if it runs
    # Set by the network faults' checks, in the networked mode.
    result.violations[inv.HANGING_AFTER_HEAL] = None
    result.violations[inv.WORKERS_AFTER_HEAL] = None
    if not config.concurrent_reader:
        result.violations[inv.ABORTED_READS] = None
    result.examples = {k: list(v) for k, v in verification.examples.items() if v}
    result.stats = dict(verification.stats)
    result.records = int(verification.stats.get("input_records", 0))
    result.processed = int(verification.stats.get("processed_inputs", 0))
    for record in records:
        if not record.skipped:
            result.faults[record.fault.kind] = result.faults.get(record.fault.kind, 0) + 1
    result.fault_log = [r.asdict() for r in records]
    restores: list[float] = []
    for worker in workers:
        with contextlib.suppress(OSError):
            restores += system.restore_seconds(worker.log_path.read_text(errors="replace"))
    longest_restore = max(restores, default=0.0)
    bound = (
        config.session_timeout
        + system.transaction_timeout
        + longest_restore
        + config.liveness_grace
    )
    result.liveness_bound_seconds = round(bound, 1)
    struck = [r for r in records if not r.skipped]
    late_ones = sum(1 for r in struck if r.after_input)
    if late_ones:
        result.notes.append(
            f"{late_ones} fault(s) struck after the input ended (the schedule ran late): "
            "their resume times are vacuous"
        )
    resumes = [r.resume_seconds for r in struck if r.resume_seconds is not None]
    result.max_resume_seconds = round(max(resumes), 2) if resumes else None
    result.resume_by_kind = resume_by_kind(struck)
    late = [r for r in struck if r.judged_resume is None or r.judged_resume > bound]
    result.violations[inv.LIVENESS] = len(late)
    if late:
        result.examples[inv.LIVENESS] = [
            f"{r.fault.describe()}: resumed after "
            f"{'never' if r.judged_resume is None else f'{r.judged_resume:.1f}s'}"
            f"{' from the heal' if r.judged_resume is not r.resume_seconds else ''} "
            f"(bound {bound:.1f}s)"
            for r in late[:5]
        ]
    result.stats["longest_restore_seconds"] = round(longest_restore, 2)


def resume_by_kind(records: list[FaultRecord]) -> dict[str, dict[str, Any]]:
    """Per kind: how many struck, the longest resume from the strike and (network kinds) from
    the heal, and which of the two liveness judges. A figure is None when some fault of the
    kind never resumed within the wait."""
    by_kind: dict[str, list[FaultRecord]] = {}
    for record in records:
        by_kind.setdefault(record.fault.kind, []).append(record)
    out: dict[str, dict[str, Any]] = {}
    for kind, group in by_kind.items():
        network = any(r.after_heal is not None for r in group)
        from_heal = [r.after_heal.resume_after_heal for r in group if r.after_heal is not None]
        out[kind] = {
            "faults": len(group),
            "max_from_strike": _longest([r.resume_seconds for r in group]),
            "max_from_heal": _longest(from_heal) if network else None,
            "judged": "heal" if network and kind not in ROUTED_AROUND else "strike",
        }
    return out


def _longest(values: list[float | None]) -> float | None:
    """The longest, where None (never resumed) outlasts any figure."""
    if not values or any(v is None for v in values):
        return None
    return round(max(v for v in values if v is not None), 2)


def _fill_partition_checks(
    result: SystemResult, records: list[FaultRecord], final_hanging: list[str] | None
) -> None:
    """The checks the network faults add: workers after each heal, hanging transactions after
    each heal and at the end (``streams-app txn hanging``)."""
    healed = [r for r in records if not r.skipped and r.after_heal is not None]
    bad_workers = [r for r in healed if r.after_heal is not None and r.after_heal.workers]
    result.violations[inv.WORKERS_AFTER_HEAL] = len(bad_workers) if healed else None
    if bad_workers:
        result.examples[inv.WORKERS_AFTER_HEAL] = [
            f"{r.fault.describe()}: {'; '.join(r.after_heal.workers[:3])}"
            for r in bad_workers[:5]
            if r.after_heal is not None
        ]
    hanging: list[str] = []
    unchecked = 0
    for r in healed:
        assert r.after_heal is not None
        if r.after_heal.hanging is None:
            unchecked += 1
        else:
            hanging.extend(f"{r.fault.describe()}: {line}" for line in r.after_heal.hanging)
    if final_hanging is None:
        result.notes.append("`streams-app txn hanging` could not run at the end")
    else:
        hanging.extend(f"at the end: {line}" for line in final_hanging)
    if unchecked:
        result.notes.append(f"{unchecked} hanging-transaction check(s) after a heal could not run")
    result.violations[inv.HANGING_AFTER_HEAL] = len(hanging)
    if hanging:
        result.examples[inv.HANGING_AFTER_HEAL] = hanging[:5]


def txn_hanging_cli(bootstrap: str, topics: list[str]) -> list[str] | None:
    """``streams-app txn hanging`` on the run's topics, as an operator would run it: the
    lines it marks HANGING or OVERDUE (exit 1 means a hanging one); None if it failed."""
    command = [sys.executable, "-m", "streams_app", "txn", "hanging", "--bootstrap", bootstrap]
    for topic in topics:
        command += ["--topic", topic]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode not in (0, 1):
        log.warning("txn hanging exited %d: %s", proc.returncode, proc.stderr.strip()[-500:])
        return None
    found = [
        line.strip()
        for line in proc.stdout.splitlines()
        if " HANGING " in f" {line} " or " OVERDUE " in f" {line} "
    ]
    if proc.returncode == 1 and not found:
        found = ["exit 1: " + proc.stdout.strip().splitlines()[-1]]
    return found


async def _finish_network_checks(network_faults: NetworkFaults) -> None:
    try:
        await network_faults.wait_sweeps()
    finally:
        await network_faults.close()


async def run_client_check(
    cluster: EmbeddedKafka, client: str, config: ChaosConfig, *, suffix: str
) -> CopierResult:
    """Invariant 11 with broker bounces from the same cluster."""
    bootstrap = cluster.bootstrap_servers
    locator = CoordinatorLocator(bootstrap)
    await locator.start()
    group = f"copier-{suffix}"
    kill_order = iter(range(10_000))
    one_at_a_time = asyncio.Lock()

    async def bounce(kind: str) -> None:
        async with one_at_a_time:  # never two brokers down
            await wait_fully_replicated(bootstrap, 90.0)
            if kind == BROKER_KILL:
                node = next(kill_order) % len(cluster.nodes) + 1
            elif kind == GROUP_COORDINATOR_KILL:
                node = await locator.group_coordinator(group)
            else:
                node = await locator.transaction_coordinator(f"{group}-0")
            log.info("client check: %s -> broker %d", kind, node)
            await asyncio.to_thread(cluster.kill_node, node)
            await asyncio.sleep(3.0)
            await asyncio.to_thread(cluster.start_node, node)

    try:
        return await run_copier_check(
            bootstrap,
            suffix=suffix,
            client=client,
            records=config.client_records,
            duration=config.client_duration,
            seed=config.seed,
            workdir=config.workdir.resolve() / f"copier-{suffix}",
            fault=bounce,
            faults=config.client_faults,
        )
    finally:
        await locator.close()
        await asyncio.to_thread(cluster.ensure_all_running)


async def run_chaos(
    cluster: EmbeddedKafka, config: ChaosConfig, network: Network | None = None
) -> dict[str, SystemResult]:
    """Every system of ``config`` on ``cluster`` (networked: on ``network``), one after the
    other."""
    config.validate()
    if config.network and network is None:
        raise ValueError("the networked mode needs the cluster's network")
    results: dict[str, SystemResult] = {}
    for name in config.systems:
        if name == STREAMS_APP:
            result = await run_system(
                cluster,
                name,
                config,
                records=config.records,
                duration=config.duration,
                faults=config.faults,
                network=network,
            )
            client = STREAMS_APP_CLIENT
        else:
            result = await run_system(
                cluster,
                name,
                config,
                records=config.faust_records,
                duration=config.faust_duration or config.duration,
                faults=config.faults if config.faust_faults is None else config.faust_faults,
                time_limit=config.faust_time_limit,
                network=network,
            )
            client = AIOKAFKA_CLIENT
        if config.client_check:
            suffix = f"{client}-{config.seed}-{uuid.uuid4().hex[:6]}"
            copier = await run_client_check(cluster, client, config, suffix=suffix)
            result.violations[inv.CLIENT_TRANSACTIONS] = copier.violations
            result.client_check = copier.asdict()
            if copier.examples:
                result.examples[inv.CLIENT_TRANSACTIONS] = copier.examples[:5]
        results[name] = result
    return results
