"""The fault injector: carries out a schedule against worker processes and the 3-broker cluster.

Faults run one after the other, each at its scheduled time (or as soon as the previous one has
recovered). For each the injector records when it struck, what it hit, and how long it took until
processing resumed (:meth:`ProgressMonitor.wait_resumed`, measured from the moment the fault
struck, while the victim is still down). Workers are real processes (``WorkerProcess``) and are
signalled as an operator or the kernel would; brokers are real JVMs killed with SIGKILL and
restarted on their data directories. Before a broker fault the injector waits until every
partition is fully replicated again, so that a fault never takes a second replica of a partition
down (that would only stop progress, not test anything new).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from streams_app.broker import EmbeddedKafka
from streams_app.chaos import schedule as kinds
from streams_app.chaos.coordinators import CoordinatorLocator
from streams_app.chaos.partitions import HealReport, NetworkFaults
from streams_app.chaos.progress import ProgressMonitor
from streams_app.chaos.schedule import Fault
from streams_app.chaos.systems import System, wait_transactional_id
from streams_app.testing.workers import WorkerProcess

log = logging.getLogger(__name__)

#: Extra seconds a ``state_wipe``'s resume is waited for: the restore of the whole state.
WIPE_RESTORE_ALLOWANCE = 180.0


@dataclass
class FaultRecord:
    fault: Fault
    #: Seconds after the start of the run at which it actually struck, and the wall clock
    #: then (to find it in the workers' and brokers' logs).
    struck_at: float = 0.0
    struck_wall: str = ""
    target: str = ""
    #: Seconds from the strike until every input partition made progress again (None: never,
    #: within the wait).
    resume_seconds: float | None = None
    skipped: bool = False
    #: Struck after the generator had written its last record (the schedule ran late).
    after_input: bool = False
    notes: list[str] = field(default_factory=list)
    #: Network faults: seconds from the strike to the heal, and what was found after it.
    healed_after: float | None = None
    after_heal: HealReport | None = None

    @property
    def judged_resume(self) -> float | None:
        """The resume time liveness is judged on: from the strike, except for network faults
        that stop some progress until the heal (judged from the heal)."""
        if self.after_heal is None or self.fault.kind in kinds.ROUTED_AROUND:
            return self.resume_seconds
        return self.after_heal.resume_after_heal

    def asdict(self) -> dict[str, Any]:
        out = {
            **self.fault.asdict(),
            "struck_at": round(self.struck_at, 2),
            "struck_wall": self.struck_wall,
            "target": self.target,
            "resume_seconds": _round(self.resume_seconds),
            "skipped": self.skipped,
            "after_input": self.after_input,
            "notes": self.notes,
        }
        if self.after_heal is not None:
            out["healed_after"] = _round(self.healed_after)
            out["resume_after_heal"] = _round(self.after_heal.resume_after_heal)
            out["workers_after_heal"] = self.after_heal.workers
            out["hanging_after_heal"] = self.after_heal.hanging
        return out


def _wall() -> str:
    return datetime.datetime.now().isoformat(sep=" ", timespec="milliseconds")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class FaultInjector:
    def __init__(
        self,
        cluster: EmbeddedKafka,
        system: System,
        workers: Sequence[WorkerProcess],
        monitor: ProgressMonitor,
        locator: CoordinatorLocator,
        *,
        resume_timeout: float,
        deadline: float | None = None,
        network: NetworkFaults | None = None,
        transaction_timeout: float = 10.0,
    ) -> None:
        self.cluster = cluster
        self.system = system
        self.workers = list(workers)
        self.monitor = monitor
        self.locator = locator
        self.resume_timeout = resume_timeout
        #: Monotonic time after which remaining faults are skipped (bounds a hung system).
        self.deadline = deadline
        self.records: list[FaultRecord] = []
        #: Whether input still flows (the generator runs): a fault that strikes after the
        #: input ended has nothing to resume, and its resume time says nothing.
        self.input_running: Callable[[], bool] = lambda: True
        #: Worker exits nobody asked for (crashes), by worker index.
        self.unexpected_exits: list[str] = []
        #: The networked mode's faults (None: loopback, network faults cannot be injected).
        self.network = network
        self.transaction_timeout = transaction_timeout
        self._started = time.monotonic()

    async def run(self, schedule: Sequence[Fault], started: float) -> list[FaultRecord]:
        self._started = started
        for fault in schedule:
            record = FaultRecord(fault)
            self.records.append(record)
            delay = started + fault.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)  # the seeded schedule's timing, not a synchronisation
            if self.deadline is not None and time.monotonic() > self.deadline:
                record.skipped = True
                record.notes.append("skipped: the run's time limit was reached")
                continue
            await self.ensure_workers()
            if fault.kind in kinds.BROKER_FAULTS or fault.kind in kinds.NETWORK_FAULTS:
                await wait_fully_replicated(self.cluster.bootstrap_servers, timeout=90.0)
            record.struck_at = time.monotonic() - started
            record.struck_wall = _wall()
            if not self.input_running():
                record.after_input = True
                record.notes.append("struck after the input ended: its resume time is vacuous")
            log.info("fault %s", fault.describe())
            try:
                await self._inject(fault, record)
            except Exception as exc:
                record.notes.append(f"injection failed: {exc!r}")
                log.exception("fault %s could not be injected", fault.describe())
            log.info(
                "fault #%d %s on %s: resumed after %s",
                fault.index,
                fault.kind,
                record.target,
                "never" if record.resume_seconds is None else f"{record.resume_seconds:.1f}s",
            )
        return self.records

    async def ensure_workers(self) -> None:
        """Restart any worker that exited by itself (and remember that it did)."""
        for index, worker in enumerate(self.workers):
            if worker.process is not None and not worker.running:
                code = worker.returncode
                note = f"worker {index} exited by itself (code {code})"
                log.warning("%s; restarting it:\n%s", note, worker.tail(15))
                self.unexpected_exits.append(note)
                worker.start()

    async def _transactional_id(self, worker: int) -> str:
        return await wait_transactional_id(self.system, worker)

    async def _inject(self, fault: Fault, record: FaultRecord) -> None:
        kind = fault.kind
        if kind in kinds.NETWORK_FAULTS:
            await self._inject_network(fault, record)
            return
        if kind in kinds.WORKER_FAULTS:
            worker = self.workers[fault.worker]
            record.target = f"worker {fault.worker}"
            if kind == kinds.ZOMBIE:
                worker.pause()
            elif kind == kinds.SIGTERM:
                code = await asyncio.to_thread(worker.terminate, 60.0)
                if code != 0:
                    record.notes.append(f"exit code {code} after SIGTERM")
            else:
                await asyncio.to_thread(worker.kill)
            # Measured from the moment the worker is gone (or frozen). A wiped worker restores
            # its whole state before it commits again (53 s for the 10M run's 8.1 M changelog
            # records): wait that long too, or a resume inside the liveness bound (which counts
            # the longest restore, known at the end) is recorded as "never".
            struck = time.monotonic()
            timeout = self.resume_timeout
            if kind == kinds.STATE_WIPE:
                timeout += WIPE_RESTORE_ALLOWANCE
            resumed = asyncio.create_task(self.monitor.wait_resumed(struck, timeout))
            if kind == kinds.STATE_WIPE:
                shutil.rmtree(worker.state_dir, ignore_errors=True)
            await asyncio.sleep(fault.down)  # down (or frozen past the session timeout)
            if kind == kinds.ZOMBIE:
                worker.resume()
            else:
                worker.start()
            record.resume_seconds = await resumed
            return
        if kind == kinds.BROKER_PAUSE:
            node = fault.node
            record.target = f"broker {node}"
            self.cluster.node(node).pause()
            struck = time.monotonic()
            resumed = asyncio.create_task(self.monitor.wait_resumed(struck, self.resume_timeout))
            await asyncio.sleep(fault.down)
            self.cluster.node(node).resume()
            record.resume_seconds = await resumed
            return
        if kind == kinds.BROKER_KILL:
            node = fault.node
        elif kind == kinds.TXN_COORDINATOR_KILL:
            tid = await self._transactional_id(fault.worker)
            node = await self.locator.transaction_coordinator(tid)
            record.notes.append(f"transaction coordinator of {tid}")
        else:
            node = await self.locator.group_coordinator(self.system.group_id)
            record.notes.append(f"group coordinator of {self.system.group_id}")
        record.target = f"broker {node}"
        await asyncio.to_thread(self.cluster.kill_node, node)
        struck = time.monotonic()
        resumed = asyncio.create_task(self.monitor.wait_resumed(struck, self.resume_timeout))
        await asyncio.sleep(fault.down)
        await asyncio.to_thread(self.cluster.start_node, node)
        record.resume_seconds = await resumed

    async def _inject_network(self, fault: Fault, record: FaultRecord) -> None:
        if self.network is None:
            raise RuntimeError(f"{fault.kind} needs the networked mode (--network)")
        cut, notes = await self.network.plan(fault)
        record.target = cut.description
        record.notes.extend(notes)
        # Planning may take a while (a coordinators cut moves leaders first): the strike is now.
        struck = time.monotonic()
        record.struck_at = struck - self._started
        record.struck_wall = _wall()
        resumed = asyncio.create_task(
            self.monitor.wait_resumed(struck, self.resume_timeout + fault.down)
        )
        report = HealReport()
        record.after_heal = report
        try:
            healed = await self.network.hold(fault, cut)
        except BaseException:
            resumed.cancel()
            raise
        record.healed_after = healed - struck
        record.resume_seconds = await resumed
        if record.resume_seconds is not None:
            report.resume_after_heal = max(0.0, struck + record.resume_seconds - healed)
        report.workers = await self.network.check_workers(healed)
        for line in report.workers:
            log.warning("fault #%d %s: after the heal, %s", fault.index, fault.kind, line)
        self.network.sweep_later(
            healed, self.transaction_timeout, report, f"{fault.index}-{fault.kind}"
        )


async def wait_fully_replicated(bootstrap: str, timeout: float) -> bool:
    """Wait until every partition's in-sync replicas are all its replicas (None left behind)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="chaos-isr")
    deadline = time.monotonic() + timeout
    try:
        await admin.start()
        while time.monotonic() < deadline:
            try:
                topics = await admin.list_topics()
                described = await admin.describe_topics(sorted(topics))
                lagging = [
                    (t["topic"], p["partition"])
                    for t in described
                    for p in t["partitions"]
                    if set(p["isr"]) != set(p["replicas"])
                ]
                if not lagging:
                    return True
            except Exception as exc:
                log.debug("describe topics failed: %r", exc)
            await asyncio.sleep(0.5)
        log.warning("partitions still under-replicated after %.0fs", timeout)
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()
