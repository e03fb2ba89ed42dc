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
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from streams_app.broker import EmbeddedKafka
from streams_app.chaos import schedule as kinds
from streams_app.chaos.coordinators import CoordinatorLocator
from streams_app.chaos.progress import ProgressMonitor
from streams_app.chaos.schedule import Fault
from streams_app.chaos.systems import System
from streams_app.testing.workers import WorkerProcess

log = logging.getLogger(__name__)


@dataclass
class FaultRecord:
    fault: Fault
    #: Seconds after the start of the run at which it actually struck.
    struck_at: float = 0.0
    target: str = ""
    #: Seconds from the strike until every input partition made progress again (None: never,
    #: within the wait).
    resume_seconds: float | None = None
    skipped: bool = False
    notes: list[str] = field(default_factory=list)

    def asdict(self) -> dict[str, Any]:
        return {
            **self.fault.asdict(),
            "struck_at": round(self.struck_at, 2),
            "target": self.target,
            "resume_seconds": None
            if self.resume_seconds is None
            else round(self.resume_seconds, 2),
            "skipped": self.skipped,
            "notes": self.notes,
        }


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
        #: Worker exits nobody asked for (crashes), by worker index.
        self.unexpected_exits: list[str] = []

    async def run(self, schedule: Sequence[Fault], started: float) -> list[FaultRecord]:
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
            if fault.kind in kinds.BROKER_FAULTS:
                await wait_fully_replicated(self.cluster.bootstrap_servers, timeout=90.0)
            record.struck_at = time.monotonic() - started
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

    async def _transactional_id(self, worker: int, timeout: float = 90.0) -> str:
        """The worker's transactional id, read from its state directory. A worker restarted after
        a state wipe writes its new process id only once it has started (slowly on a loaded
        machine): wait for the file rather than fail the fault."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.system.transactional_id(worker)
            except FileNotFoundError:
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.2)  # polling a file the worker writes; no event to await

    async def _inject(self, fault: Fault, record: FaultRecord) -> None:
        kind = fault.kind
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
            # Measured from the moment the worker is gone (or frozen).
            struck = time.monotonic()
            resumed = asyncio.create_task(self.monitor.wait_resumed(struck, self.resume_timeout))
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
