"""TopologyDriver: run a topology's real agents and runtime in a test, with or without a broker.

The driver starts real :class:`~streams_app.runtime.worker.Worker` instances of an app (the same
code a production worker runs) on a :class:`~streams_app.testing.backends.Backend` (the
in-memory Kafka model or a real broker) and a :class:`~streams_app.testing.clock.ManualClock`,
and lets a test:

- pipe records into input topics (key, value, headers, timestamp, partition);
- run until every worker is idle with everything committed (or only processed);
- read output topics as ``read_committed`` readers see them (or uncommitted), and table state
  (from the committed changelog, or the workers' stores);
- advance wall-clock time (commit intervals, timers, timeouts) and stream time (the timestamps
  of piped records);
- crash a worker at a quiescent point or at a chosen Kafka call, restart it on the same state
  directory, add and stop workers (rebalances), and freeze one past its session timeout (a
  zombie; in-memory only).

How "idle" is known without sleeping. In memory, every wait of a worker (a fetch with nothing
to fetch, an offset fetch held by an open transaction, a backoff) is parked on the manual clock
under the worker's name; a worker all of whose progress is parked can only move when the test
pipes data or advances time. The driver waits for that, checks whether the goal (everything
consumed and committed, no open transaction, the group settled) is reached, asks workers to
commit if that is what is missing, and otherwise moves the clock to the next thing scheduled
(a poll timeout, a session or transaction timeout): discrete-event simulation, deterministic.
On a real broker the same goal is checked after each turn of the workers' loops (a fetch
returning), with a real-time deadline; the manual clock still drives commits, timers and
backoffs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from streams_app.aio import cancel_and_wait
from streams_app.lineage import parse_lineage
from streams_app.runtime.task import RUNNING
from streams_app.runtime.view import WorkerView
from streams_app.runtime.worker import Worker
from streams_app.settings import AT_MOST_ONCE
from streams_app.testing.backends import Backend, KafkaBackend, MemoryBackend, Piped, RawInput
from streams_app.testing.clock import ManualClock
from streams_app.testing.faults import CrashPoint, HarnessTransport, Switch, kill_or_stop
from streams_app.testing.memory import MemoryConsumer
from streams_app.transport.base import RecordLike, TopicPartition
from streams_app.transport.errors import TransportError

if TYPE_CHECKING:
    from streams_app.app.app import App

log = logging.getLogger(__name__)

Status = Literal["new", "running", "crashed", "stopped", "failed"]


class HarnessError(AssertionError):
    """The driver could not reach the state a test asked for; the message says why."""


class WorkerFailed(HarnessError):
    """A worker stopped with an error (its error policy gave up, or a bug)."""

    def __init__(self, handle: WorkerHandle, error: BaseException) -> None:
        super().__init__(f"worker {handle.name} failed: {type(error).__name__}: {error}")
        self.handle = handle
        self.error = error


@dataclass(frozen=True)
class Input:
    """A record to pipe; ``timestamp`` in milliseconds (``None``: the driver's stream time)."""

    key: Any = None
    value: Any = None
    headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None
    timestamp: int | None = None
    partition: int | None = None


@dataclass(frozen=True)
class OutputRecord:
    """A record read back from a topic, decoded with the topic's codecs."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes], ...] = ()

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def key_value(self) -> tuple[Any, Any]:
        return self.key, self.value

    @property
    def lineage(self) -> tuple[str, int, int] | None:
        """The (topic, partition, offset) of the input record that produced this one (its
        lineage header, in either format: :mod:`streams_app.lineage`)."""
        source = parse_lineage(self.headers)
        if source is None or source[0] is None:
            return None
        return source[0], source[1], source[2]


@dataclass
class WorkerHandle:
    """One worker of the driver, across crashes and restarts (same state directory)."""

    name: str
    index: int
    state_dir: Path
    status: Status = "new"
    worker: Worker | None = None
    task: asyncio.Task[None] | None = None
    switch: Switch | None = None
    transport: HarnessTransport | None = None
    incarnation: int = 0
    crashes: int = 0
    frozen: bool = False
    error: BaseException | None = None
    #: Crash points armed for the next incarnation.
    armed: list[CrashPoint] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def active(self) -> bool:
        """Running and not frozen: expected to make progress."""
        return self.status == "running" and not self.frozen

    def require_worker(self) -> Worker:
        if self.worker is None:
            raise HarnessError(f"worker {self.name} was never started")
        return self.worker


def _at_or_after(when: float) -> float:
    """The first time the manual clock (whole microseconds) can show that is not before
    ``when``: ``when`` itself when it is a whole number of microseconds."""
    micros = round(when * 1_000_000)
    if micros / 1_000_000 < when:
        micros += 1
    return micros / 1_000_000


def _uncommitted(worker: WorkerView) -> bool:
    parts = worker.parts
    if parts is None:
        return False
    if parts.producer.in_transaction or parts.producer.buffered:
        return True
    return any(task.has_uncommitted for task in parts.tasks.running())


class TopologyDriver:
    """Runs ``app`` in a test. Use as ``async with TopologyDriver.memory(app) as driver:``.

    ``settings`` override the app's settings for the driven workers (``store="memory://"``,
    ``processing_guarantee=...``, ``commit_interval=...``, ...). ``state_dir`` is where each
    worker gets its directory (``<state_dir>/w0``...); by default a temporary directory that is
    removed on close.
    """

    def __init__(
        self,
        app: App,
        backend: Backend,
        *,
        workers: int = 1,
        state_dir: Path | str | None = None,
        real_timeout: float = 60.0,
        max_idle_time: float = 3600.0,
        **settings: Any,
    ) -> None:
        self.app = app
        self.backend = backend
        self.clock: ManualClock = backend.clock
        self.initial_workers = workers
        #: No web server unless asked for (``web_enabled=True, web_port=0`` to test pages).
        settings.setdefault("web_enabled", False)
        self.settings = settings
        self.real_timeout = real_timeout
        self.max_idle_time = max_idle_time
        self._own_state_dir = state_dir is None
        self.state_root = Path(state_dir or tempfile.mkdtemp(prefix="streams-app-driver-"))
        self.workers: list[WorkerHandle] = []
        self.stream_time: int = int(self.clock.time() * 1000)
        self._plan_topics: set[str] = set()
        self._returns: dict[str, int] = {}
        self._group_id = str(settings.get("id", app.conf.id))
        self._opened = False

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def memory(cls, app: App, **kwargs: Any) -> TopologyDriver:
        """A driver on a fresh in-memory Kafka model."""
        return cls(app, MemoryBackend(), **kwargs)

    @classmethod
    def kafka(
        cls, app: App, bootstrap_servers: str, *, suffix: str | None = None, **kwargs: Any
    ) -> TopologyDriver:
        """A driver on a real broker; topics, group and transactional ids get ``suffix``. The
        app's TLS/SASL settings apply to every client."""
        backend = KafkaBackend(bootstrap_servers, suffix=suffix, security=app.conf.security())
        return cls(app, backend, **kwargs)

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def is_memory(self) -> bool:
        return isinstance(self.backend, MemoryBackend)

    async def __aenter__(self) -> TopologyDriver:
        try:
            await self.start()
        except BaseException as exc:
            await self._close_after(exc)
            raise
        return self

    async def __aexit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if exc is None:
            await self.close()
        else:
            await self._close_after(exc)

    async def _close_after(self, exc: BaseException) -> None:
        """Close while ``exc`` propagates: a failure to stop is added to it, not raised over it."""
        try:
            await self.close()
        except HarnessError as failure:
            exc.add_note(f"and closing the driver failed: {failure}")

    async def start(self) -> None:
        """Start the initial workers and run until they are assigned, restored and idle."""
        await self.backend.open()
        self._opened = True
        for _ in range(self.initial_workers):
            await self.add_worker(run=False)
        await self.run_until_idle()

    async def close(self) -> None:
        """Stop every running worker gracefully (final commit), then release everything.
        Raises :class:`HarnessError` (:class:`WorkerFailed`) once everything is released if a
        worker failed while stopping or did not stop."""
        failure: HarnessError | None = None
        try:
            for handle in self.workers:
                if handle.frozen:
                    self.resume(handle.index)
            stopping = [h for h in self.workers if h.running]
            for handle in stopping:  # all at once: no rebalance between them
                handle.require_worker().request_stop()
                self._wake(handle)

            async def stopped() -> str | None:
                running = [h.name for h in stopping if h.running]
                return f"{running} stopping" if running else None

            try:
                await self._drive(stopped, commit=False)
            except HarnessError as exc:
                failure = exc
        finally:
            try:
                # A worker's agents run user code, which may swallow a cancel: re-cancelled.
                await cancel_and_wait(
                    {f"worker {h.name}": h.task for h in self.workers if h.task is not None}
                )
            finally:
                if self._opened:
                    await self.backend.close()
                if self._own_state_dir:
                    shutil.rmtree(self.state_root, ignore_errors=True)
        if failure is not None:
            raise failure

    # -- workers ---------------------------------------------------------------------------

    async def add_worker(self, *, run: bool = True) -> WorkerHandle:
        """Start one more worker (a new member of the group: a rebalance)."""
        index = len(self.workers)
        handle = WorkerHandle(f"w{index}", index, self.state_root / f"w{index}")
        self.workers.append(handle)
        await self._launch(handle)
        if run:
            await self.run_until_idle()
        return handle

    async def _launch(self, handle: WorkerHandle) -> None:
        handle.incarnation += 1
        switch = Switch(f"{handle.name}#{handle.incarnation}")
        switch.points.extend(handle.armed)
        handle.armed = []
        transport = HarnessTransport(
            self.backend.transport(handle.name), switch, self.backend.names
        )
        worker = Worker(
            self.app,
            transport=transport,
            clock=self.clock.owned(handle.name),
            state_dir=handle.state_dir,
            **self.settings,
        )
        handle.switch, handle.transport, handle.worker = switch, transport, worker
        handle.error = None
        handle.task = asyncio.create_task(worker.run(), name=f"streams-app worker {handle.name}")
        handle.status = "running"
        helpers = [
            asyncio.ensure_future(worker.started.wait()),
            asyncio.ensure_future(switch.crashed.wait()),
        ]
        try:
            await asyncio.wait(
                {handle.task, *helpers},
                timeout=self.real_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for helper in helpers:
                helper.cancel()
        await self._reap()
        if handle.running and not worker.started.is_set():
            raise HarnessError(f"worker {handle.name} did not start in {self.real_timeout}s")
        if worker.plan is not None:
            self._plan_topics |= set(worker.plan.partition_counts)

    async def stop_worker(self, index: int = 0, *, run: bool = True) -> None:
        """Graceful stop (SIGTERM): finish, commit, leave the group (the others rebalance)."""
        handle = self.workers[index]
        if not handle.running:
            raise HarnessError(f"worker {handle.name} is not running ({handle.status})")
        worker = handle.require_worker()
        worker.request_stop()
        self._wake(handle)

        async def stopped() -> str | None:
            return None if handle.status != "running" else f"{handle.name} is stopping"

        await self._drive(stopped, commit=False)
        if run:
            await self.run_until_idle()

    async def crash(self, index: int = 0) -> None:
        """SIGKILL the worker now: its open transaction stays open, its uncommitted work is
        lost, its group membership lingers until the session timeout (in memory)."""
        handle = self.workers[index]
        if not handle.running or handle.switch is None:
            raise HarnessError(f"worker {handle.name} is not running ({handle.status})")
        handle.switch.kill("crash()")
        await self._reap()

    def crash_on(
        self, op: str, *, nth: int = 1, topic: str | None = None, worker: int = 0
    ) -> CrashPoint:
        """Arm a crash: the worker dies at its ``nth`` call of ``op`` (from now on), before
        the call reaches Kafka, or right after Kafka accepted it with ``after_<op>``.

        ``op``: ``send`` (a record handed to the producer; ``topic=`` to count sends to one
        topic only), ``send_batch`` (a batch handed to the client), ``flush``,
        ``begin_transaction``, ``send_offsets_to_transaction``, ``commit_transaction``,
        ``abort_transaction``, ``getmany``, ``commit``, ``committed_offsets``, ``start``. A
        worker that is not running gets it armed for its next start.
        """
        handle = self.workers[worker]
        if handle.running and handle.switch is not None:
            return handle.switch.arm(op, nth=nth, topic=topic)
        point = Switch(handle.name).arm(op, nth=nth, topic=topic)
        handle.armed.append(point)
        return point

    async def restart(self, index: int = 0, *, run: bool = True) -> WorkerHandle:
        """Start a crashed or stopped worker again on the same state directory (same process
        id, so its producer fences the previous incarnation at once)."""
        handle = self.workers[index]
        if handle.running:
            raise HarnessError(f"worker {handle.name} is still running")
        await self._launch(handle)
        if run:
            await self.run_until_idle()
        return handle

    def pause(self, index: int = 0) -> None:
        """SIGSTOP (in-memory only): the worker stops at its next Kafka call and stops
        heartbeating; past its session timeout the group expels it. :meth:`resume` lets it go
        on, a zombie that finds out it was fenced when it next commits."""
        if not isinstance(self.backend, MemoryBackend):
            raise HarnessError("pause() needs the in-memory backend (mark the test memory-only)")
        handle = self.workers[index]
        self.backend.broker.freeze(handle.name)
        handle.frozen = True

    def resume(self, index: int = 0) -> None:
        if not isinstance(self.backend, MemoryBackend):
            raise HarnessError("resume() needs the in-memory backend")
        handle = self.workers[index]
        self.backend.broker.thaw(handle.name)
        handle.frozen = False

    @property
    def live_workers(self) -> list[WorkerHandle]:
        return [h for h in self.workers if h.running]

    def worker(self, index: int = 0) -> Worker:
        """The current incarnation's :class:`Worker` (tasks, stores, producer counters)."""
        return self.workers[index].require_worker()

    def _wake(self, handle: WorkerHandle) -> None:
        transport = handle.transport
        if transport is None:
            return
        for consumer in transport.consumers:
            if isinstance(consumer.inner, MemoryConsumer):
                consumer.inner.wakeup()

    async def _reap(self) -> None:
        """Finish crashed workers (cancel their task: the process is gone) and notice workers
        that stopped by themselves."""
        failures: list[WorkerFailed] = []
        for handle in self.workers:
            if not handle.running or handle.task is None or handle.switch is None:
                continue
            task = handle.task
            if handle.switch.dead:
                worker = handle.require_worker()
                # Frozen at its crash point: cancel it. Already going down with the error a
                # dead client raised: let it (a cancel would cut its shutdown short).
                if not task.done() and worker.error is None:
                    task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise
                except Exception as exc:
                    log.debug("crashed worker %s ended with %r", handle.name, exc)
                await self._release(handle)
                await self._let_markers_land(worker)
                handle.status = "crashed"
                handle.crashes += 1
                handle.frozen = False
                log.info("worker %s crashed (%s)", handle.name, handle.switch.reason)
            elif task.done():
                error = None if task.cancelled() else task.exception()
                handle.error = error
                handle.status = "failed" if error is not None else "stopped"
                if error is not None:
                    failures.append(WorkerFailed(handle, error))
        if failures:
            raise failures[0]

    async def _let_markers_land(self, worker: WorkerView) -> None:
        """As after a SIGKILL, a transaction whose EndTxn the broker accepted still ends: the
        broker answers EndTxn before it writes the markers. Wait for them, so that what the
        test reads next is what the broker committed (18% of reads right after EndTxn's
        answer found the last stable offset not yet moved, on a quiet single broker)."""
        parts = worker.parts
        txn_id = None if parts is None else self.backend.names.id(parts.producer.transactional_id)
        if txn_id is not None:
            await self.backend.markers_written([txn_id])

    async def _release(self, handle: WorkerHandle) -> None:
        """What the OS does when a process dies, whatever its shutdown got to: its tasks stop,
        its sockets close (without LeaveGroup or EndTxn in memory), its file handles and its
        state directory lock are released."""
        worker, transport = handle.worker, handle.transport
        if worker is not None:
            with contextlib.suppress(Exception):
                await worker.runner.stop()
        if transport is not None:
            inners: list[Any] = [c.inner for c in transport.consumers]
            inners += [p.inner for p in transport.producers]
            inners += [a.inner for a in transport.admins]
            for inner in inners:
                await kill_or_stop(inner)
        if worker is not None:
            for store in worker.stores.values():
                with contextlib.suppress(Exception):
                    store.close()
            if worker.directory is not None:
                worker.directory.close()

    # -- time ------------------------------------------------------------------------------

    def advance_stream_time(self, ms: int) -> int:
        """Move the default timestamp of piped records forward; returns the new stream time."""
        if ms < 0:
            raise ValueError("stream time never goes back")
        self.stream_time += ms
        return self.stream_time

    async def advance_time(self, seconds: float) -> None:
        """Move wall-clock time forward, letting the workers react as it passes: commit
        intervals, ``app.timer`` functions, backoffs, and (in memory) poll, session and
        transaction timeouts, in time order."""
        if seconds < 0:
            raise ValueError("time never goes back")
        clock = self.clock
        target = clock.monotonic() + seconds
        if isinstance(self.backend, MemoryBackend):
            await self._settle()
            while (deadline := clock.next_deadline()) is not None and deadline <= target:
                clock.advance_to(deadline)
                await self._settle()
            clock.advance_to(target)
            await self._settle()
        else:
            # Step to each timer's due time, so a timer fires as often as it would in memory.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.real_timeout
            while True:
                dues = [
                    due
                    for h in self.live_workers
                    if h.worker is not None
                    for due in h.worker.timer_due.values()
                ]
                if (sleeper := clock.next_deadline()) is not None:
                    dues.append(sleeper)
                # The clock counts whole microseconds: a due time it cannot hold (a crontab's,
                # from the wall clock) is stepped to the next one, not rounded to just before
                # it, where the timer would not be due and be stepped to until real_timeout.
                due = min((t for d in dues if (t := _at_or_after(d)) <= target), default=None)
                if due is None:
                    break
                if loop.time() > deadline:
                    raise HarnessError(
                        f"advance_time: still stepping to timers due by {target:.6f}s (now at "
                        f"{due:.6f}s) after {self.real_timeout:g}s of real time\n{self.describe()}"
                    )
                clock.advance_to(max(due, clock.monotonic()))
                await self._turns(2)
            clock.advance_to(target)
            await self._turns(2)

    # -- running ---------------------------------------------------------------------------

    async def run_until_idle(self, *, commit: bool = True, max_time: float | None = None) -> None:
        """Run until there is nothing left to do: every input record processed, and with
        ``commit`` (the default) committed, with no transaction open anywhere and the group
        settled. Moves the manual clock only when waiting for it is all that is left (a
        session or transaction timeout, a backoff), by at most ``max_time`` seconds."""

        async def idle() -> str | None:
            return await self._idle_reason(commit)

        await self._drive(idle, commit=commit, max_time=max_time)

    async def run_until_crash(self) -> WorkerHandle:
        """Run (committing as :meth:`run_until_idle` does) until an armed crash point fires;
        returns the worker that died. Raises :class:`HarnessError` if everything goes idle
        first: the crash point was never reached."""
        before = {h.name: h.crashes for h in self.workers}
        crashed: list[WorkerHandle] = []

        async def died() -> str | None:
            crashed.extend(h for h in self.workers if h.crashes > before.get(h.name, 0))
            if crashed:
                return None
            reason = await self._idle_reason(True)
            if reason is None:
                armed = [
                    f"{h.name}: {p.op}" + (f" to {p.topic!r}" if p.topic else "") + f" #{p.nth}"
                    for h in self.workers
                    if h.switch is not None
                    for p in h.switch.points
                    if not p.fired
                ]
                raise HarnessError(f"idle, and no crash point fired (armed: {armed})")
            return reason

        await self._drive(died, commit=True)
        return crashed[0]

    async def process(self) -> None:
        """Run until every input record has been processed, without committing: the
        transaction stays open (a crash now loses the work)."""
        await self.run_until_idle(commit=False)

    async def _drive(
        self,
        goal: Callable[[], Awaitable[str | None]],
        *,
        commit: bool,
        max_time: float | None = None,
    ) -> None:
        if isinstance(self.backend, MemoryBackend):
            await self._drive_memory(goal, commit=commit, max_time=max_time)
        else:
            await self._drive_real(goal, commit=commit, max_time=max_time)

    async def _drive_memory(
        self,
        goal: Callable[[], Awaitable[str | None]],
        *,
        commit: bool,
        max_time: float | None,
    ) -> None:
        clock = self.clock
        start = clock.monotonic()
        limit = self.max_idle_time if max_time is None else max_time
        asked: dict[str, tuple[int, ...]] = {}
        while True:
            await self._settle()
            reason = await goal()
            if reason is None:
                return
            if commit and await self._request_commits(asked):
                continue
            if not commit and self._send_lingering():
                continue
            deadline = clock.next_deadline()
            if deadline is None:
                raise HarnessError(f"stuck: {reason}, and nothing is scheduled\n{self.describe()}")
            if deadline - start > limit:
                raise HarnessError(
                    f"not done after {limit:g}s of (manual) time: {reason}\n{self.describe()}"
                )
            clock.advance_to(deadline)

    async def _drive_real(
        self,
        goal: Callable[[], Awaitable[str | None]],
        *,
        commit: bool,
        max_time: float | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.real_timeout
        # The manual clock moves by at most max_time: a test that stops just short of a timer
        # (a crontab a second ahead) must not have it fired while the broker is slow to settle.
        until = None if max_time is None else self.clock.monotonic() + max_time
        while True:
            await self._reap()
            reason = await goal()
            if reason is None:
                return
            if commit:
                await self._request_commits(None)
            elif self._send_lingering():
                await self._turns(1, timeout=0.25)
                continue
            # A backoff or a linger timer waits on the manual clock: let that time pass.
            next_at = self.clock.next_deadline()
            if next_at is not None and until is not None:
                next_at = min(next_at, until)
            if next_at is not None:
                self.clock.advance_to(max(next_at, self.clock.monotonic()))
            if loop.time() > deadline:
                raise HarnessError(
                    f"not done after {self.real_timeout:g}s: {reason}\n{self.describe()}"
                    f"{await self._positions()}"
                )
            await self._turns(1, timeout=0.25)

    async def _positions(self) -> str:
        """Where each running worker's consumer stands on the partitions it owns, beside the
        partitions' stable and end offsets: what a worker that stopped making progress had
        fetched (the first thing to know when the harness gives up on it)."""
        lines: list[str] = []
        with contextlib.suppress(Exception):  # a diagnosis: never hide the error it adds to
            for handle in self.live_workers:
                worker = handle.worker
                if worker is None:
                    continue
                owned = sorted(TopicPartition(t, p) for t, p in worker.tasks.by_tp)
                if not owned:
                    continue
                stable = await self.backend.stable_offsets(owned)
                ends = await self.backend.end_offsets(owned)
                for tp in owned:
                    position = await self._position(handle, tp)
                    lines.append(
                        f"  {handle.name} {tp.topic}[{tp.partition}]: fetch position "
                        f"{position}, stable {stable.get(tp)}, end {ends.get(tp)}"
                    )
        return "\n" + "\n".join(lines) if lines else ""

    def _send_lingering(self) -> bool:
        """Without committing (:meth:`process`): workers send their lingering batches rather
        than wait out the linger on the manual clock, where under exactly-once the commit is
        due at the same moment (the linger is the commit interval) and would end the
        transaction that ``process`` leaves open. True if any worker had batches to send."""
        sent = False
        for handle in self.workers:
            worker = handle.worker
            parts = worker.parts if handle.active and worker is not None else None
            producer = parts.producer if parts is not None else None
            if producer is not None and producer.lingering:
                producer.send_lingering()
                sent = True
        return sent

    async def _request_commits(self, asked: dict[str, tuple[int, ...]] | None) -> bool:
        """Ask every worker with uncommitted work to commit; False if none would make progress
        (already asked in the same state)."""
        progressed = False
        for handle in self.workers:
            if not handle.active or handle.worker is None:
                continue
            worker = handle.worker
            parts = worker.parts
            if not worker.started.is_set() or parts is None:
                continue
            if not await self._needs_commit(handle):
                continue
            if asked is not None:
                mark = (
                    parts.committer.commits,
                    parts.producer.transactions_aborted,
                    parts.producer.recreated,
                    worker.records_processed,
                )
                if asked.get(handle.name) == mark:
                    continue
                asked[handle.name] = mark
            worker.request_commit()
            self._wake(handle)
            progressed = True
        return progressed

    async def _needs_commit(self, handle: WorkerHandle) -> bool:
        worker = handle.require_worker()
        if _uncommitted(worker):
            return True
        parts = worker.parts
        if parts is None:
            return False
        for task in parts.tasks.running():
            for tp in task.partitions:
                position = await self._position(handle, tp)
                if position is not None and position > task.committed.get(tp, position):
                    return True
        return False

    async def _position(self, handle: WorkerHandle, tp: TopicPartition) -> int | None:
        """The worker's fetch position, read without going through its crash switch."""
        transport = handle.transport
        consumer = transport.main_consumer if transport is not None else None
        if consumer is None:
            return None
        inner = consumer.inner
        key = self.backend.names.tp(tp)
        if isinstance(inner, MemoryConsumer):
            return inner.positions.get(key)
        try:
            return await inner.position(key)
        except TransportError:
            return None

    async def _settle(self) -> None:
        """In memory: wait until every running worker is parked (blocked on the model or the
        clock), reaping crashed ones. A worker blocked on anything else for ``real_timeout``
        seconds is reported, not waited for forever."""
        clock = self.clock
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.real_timeout
        while True:
            await self._reap()
            busy = [h for h in self.live_workers if not clock.parked(h.name)]
            if not busy:
                # A worker's other tasks (the producer's batch shipper, started by a linger
                # timer) may still have a step to run: let them, and look again if they
                # touched the model.
                clock.changed.clear()
                for _ in range(3):
                    await asyncio.sleep(0)
                if not clock.changed.is_set():
                    return
                continue
            clock.changed.clear()
            helpers = [asyncio.ensure_future(clock.changed.wait())]
            helpers += [asyncio.ensure_future(h.switch.crashed.wait()) for h in busy if h.switch]
            tasks = [h.task for h in busy if h.task is not None]
            try:
                done, _ = await asyncio.wait(
                    [*helpers, *tasks],
                    timeout=max(0.0, deadline - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for helper in helpers:
                    helper.cancel()
            if not done:
                names = ", ".join(h.name for h in busy)
                raise HarnessError(
                    f"worker(s) {names} did not settle within {self.real_timeout:g}s of real "
                    "time: they wait on something that is neither Kafka nor the clock (an agent "
                    f"awaiting an outside event?)\n{self.describe()}"
                )

    async def _turns(self, count: int, *, timeout: float = 5.0) -> None:
        """Real broker: wait until every running worker's loop has turned ``count`` times (or
        ``timeout`` passes, or a worker dies)."""
        for _ in range(count):
            handles = [h for h in self.live_workers if h.switch is not None]
            if not handles:
                return
            for h in handles:
                assert h.switch is not None
                h.switch.turned.clear()
            events = [h.switch.turned for h in handles if h.switch is not None]

            async def all_turned(events: list[asyncio.Event] = events) -> None:
                for event in events:
                    await event.wait()

            turned = asyncio.ensure_future(all_turned())
            crashed = [asyncio.ensure_future(h.switch.crashed.wait()) for h in handles if h.switch]
            tasks = [h.task for h in handles if h.task is not None]
            try:
                await asyncio.wait(
                    [turned, *crashed, *tasks], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for waiter in (turned, *crashed):
                    waiter.cancel()
            await self._reap()

    async def _idle_reason(self, commit: bool) -> str | None:
        """None when idle; else what is still going on."""
        active = [h for h in self.workers if h.active]
        # At-most-once commits a batch's offsets before processing it: committed offsets say
        # nothing about what was processed, so look at the workers' loops as without commit.
        processing = not commit or any(
            h.require_worker().conf.processing_guarantee == AT_MOST_ONCE for h in active
        )
        reason = await self._idle_reason_now(active, commit, processing)
        if reason is None and processing:
            # The checks above awaited the broker: make sure no worker fetched meanwhile.
            for handle in active:
                consumer = handle.transport.main_consumer if handle.transport else None
                if consumer is None or not consumer.polling:
                    return f"{handle.name} is processing"
                if consumer.returns != self._returns.get(handle.name):
                    return f"{handle.name} fetched again"
                if handle.require_worker().producer.buffered:
                    return f"{handle.name} has records not acknowledged yet"
        return reason

    async def _idle_reason_now(
        self, active: list[WorkerHandle], commit: bool, processing: bool
    ) -> str | None:
        for handle in active:
            worker = handle.require_worker()
            parts = worker.parts
            if not worker.started.is_set() or parts is None:
                return f"{handle.name} is starting"
            if parts.committer.group is None:
                return f"{handle.name} has no assignment yet"
            if parts.tasks.restoring():
                return f"{handle.name} is restoring its tables"
            if parts.producer.buffered:
                return f"{handle.name} has records in batches not sent yet (linger)"
            if commit and _uncommitted(worker):
                return f"{handle.name} has uncommitted work"
            idle_close = parts.loop.idle_close
            if idle_close is not None and idle_close.due():
                return f"{handle.name} has an idle-close check due"
            consumer = handle.transport.main_consumer if handle.transport else None
            if processing:
                # Back in getmany means done with everything fetched before.
                if consumer is None or not consumer.polling:
                    return f"{handle.name} is processing"
                self._returns[handle.name] = consumer.returns
        backend = self.backend
        if isinstance(backend, MemoryBackend) and active:
            group = backend.broker.groups.get(backend.names.id(self._group_id) or "")
            if group is None or group.state != "Stable":
                return "the consumer group is rebalancing"
            for member in group.members.values():
                if member.expiry is not None:
                    return f"member {member.member_id} is dead or frozen (session not expired)"
                if member.generation != group.generation:
                    return f"member {member.member_id} has not received its assignment yet"
        if active:
            plan = active[0].require_worker().plan
            assert plan is not None
            inputs = [
                TopicPartition(t, p)
                for t in plan.input_topics
                for p in range(plan.partition_counts[t])
            ]
            owners: dict[TopicPartition, list[WorkerHandle]] = {}
            for handle in active:
                for tp, task in handle.require_worker().tasks.by_tp.items():
                    if task.state == RUNNING:
                        owners.setdefault(TopicPartition(tp[0], tp[1]), []).append(handle)
            unowned = [tp for tp in inputs if len(owners.get(tp, ())) != 1]
            if unowned:
                return f"input partitions not owned by exactly one worker: {unowned[:5]}"
            if commit:
                ends = await backend.end_offsets(inputs)
                committed = await backend.group_offsets(self._group_id, inputs)
                for tp in inputs:
                    if (committed.get(tp) or 0) != ends[tp]:
                        done = committed.get(tp)
                        return f"{tp.topic}[{tp.partition}] committed {done} of {ends[tp]}"
            else:
                stable = await backend.stable_offsets(inputs)
                for tp in inputs:
                    position = await self._position(owners[tp][0], tp)
                    if position is None or position < stable[tp]:
                        end = stable[tp]
                        return f"{tp.topic}[{tp.partition}] fetched up to {position} of {end}"
        if commit:
            open_ = await backend.open_transactions(self._plan_topics)
            if open_:
                return f"transactions are open on {open_[:5]}"
        return None

    # -- input -----------------------------------------------------------------------------

    async def pipe(
        self,
        topic: str,
        value: Any = None,
        *,
        key: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        timestamp: int | None = None,
        partition: int | None = None,
        raw: bool = False,
    ) -> Piped:
        """Append one record to ``topic`` (encoded with the topic's codecs, unless ``raw``:
        then key and value are bytes as they are) as a plain producer would; ``timestamp`` in
        ms, default the driver's stream time."""
        piped = await self.pipe_many(
            topic, [Input(key, value, headers, timestamp, partition)], raw=raw
        )
        return piped[0]

    async def pipe_many(
        self, topic: str, records: Iterable[Input | tuple[Any, Any]], *, raw: bool = False
    ) -> list[Piped]:
        """Append records, ``Input`` or ``(key, value)`` pairs, in order."""
        t = None if raw else self.app.topics.get(topic)
        raws = []
        for record in records:
            r = record if isinstance(record, Input) else Input(record[0], record[1])
            if t is not None:
                raw_key, raw_value = t.encode(r.key, r.value)
            else:
                raw_key, raw_value = r.key, r.value
                if not isinstance(raw_key, bytes | None) or not isinstance(raw_value, bytes | None):
                    raise TypeError(
                        f"topic {topic!r}: pipe bytes with raw=True, or declare the topic with "
                        "app.topic(...) so its codecs are known"
                    )
            headers = r.headers.items() if isinstance(r.headers, Mapping) else (r.headers or ())
            raws.append(
                RawInput(
                    raw_key,
                    raw_value,
                    tuple(headers),
                    self.stream_time if r.timestamp is None else r.timestamp,
                    r.partition,
                )
            )
        await self._ensure_topic(topic)
        return await self.backend.produce(topic, raws)

    async def _ensure_topic(self, topic: str) -> int:
        count = await self.backend.partition_count(topic)
        if count is not None:
            return count
        t = self.app.topics.get(topic)
        partitions = (t.partitions if t is not None else None) or self.app.conf.topic_partitions
        await self.backend.create_topic(topic, partitions, dict(t.config) if t else {})
        return partitions

    # -- output ----------------------------------------------------------------------------

    async def read(
        self, topic: str, *, committed: bool = True, partition: int | None = None
    ) -> list[OutputRecord]:
        """Every record of ``topic`` as a ``read_committed`` reader sees it now (or, with
        ``committed=False``, ``read_uncommitted``), per partition in offset order, decoded."""
        raw = await self.backend.read(topic, committed=committed)
        t = self.app.topics.get(topic)
        out = []
        for r in sorted(raw, key=lambda r: (r.partition, r.offset)):
            if partition is not None and r.partition != partition:
                continue
            out.append(self._decode(topic, r, t))
        return out

    def _decode(self, topic: str, r: RecordLike, t: Any) -> OutputRecord:
        key: Any = r.key
        value: Any = r.value
        if t is not None:
            key = None if key is None else t.key_codec.loads(key)
            value = None if value is None else t.value_codec.loads(value)
        return OutputRecord(topic, r.partition, r.offset, r.timestamp, key, value, tuple(r.headers))

    async def read_key_values(self, topic: str, *, committed: bool = True) -> list[tuple[Any, Any]]:
        return [r.key_value for r in await self.read(topic, committed=committed)]

    async def read_values(self, topic: str, *, committed: bool = True) -> list[Any]:
        return [r.value for r in await self.read(topic, committed=committed)]

    async def table(
        self, name: str, *, source: Literal["changelog", "store"] = "changelog"
    ) -> dict[Any, Any]:
        """A table's committed state: folded from its changelog as ``read_committed`` readers
        see it (the default), or read from the running workers' stores."""
        table = self.app.tables.get(name)
        if table is None:
            raise KeyError(f"app {self.app.id!r} has no table {name!r}")
        if source == "store":
            out: dict[Any, Any] = {}
            for handle in self.live_workers:
                out.update(handle.require_worker().table_items(table))
            return out
        state: dict[Any, Any] = {}
        for r in sorted(
            await self.backend.read(table.changelog_topic_name, committed=True),
            key=lambda r: (r.partition, r.offset),
        ):
            if r.key is None:
                continue
            key = table.key_codec.loads(r.key)
            if r.value is None:
                state.pop(key, None)
            else:
                state[key] = table.value_codec.loads(r.value)
        return state

    async def committed_offsets(self, topic: str) -> dict[int, int | None]:
        """The app's consumer group's committed offset per partition of ``topic``."""
        count = await self.backend.partition_count(topic) or 0
        tps = [TopicPartition(topic, p) for p in range(count)]
        found = await self.backend.group_offsets(self._group_id, tps)
        return {tp.partition: offset for tp, offset in found.items()}

    # -- diagnostics -----------------------------------------------------------------------

    def describe(self) -> str:
        lines = [f"driver on {self.backend.name}, manual clock at {self.clock.monotonic():.3f}s"]
        for h in self.workers:
            state = h.status + (" frozen" if h.frozen else "")
            worker = h.worker
            parts = worker.parts if worker is not None else None
            if parts is not None:
                tasks = ", ".join(
                    f"{t.id}:{t.state}" for t in sorted(parts.tasks.tasks.values(), key=str)
                )
                state += f"; tasks [{tasks}]"
                if parts.producer.in_transaction:
                    state += "; transaction open"
            parked = self.clock.parked_reasons(h.name)
            if parked:
                state += f"; waiting on {parked}"
            lines.append(f"  {h.name} (incarnation {h.incarnation}): {state}")
        if isinstance(self.backend, MemoryBackend):
            lines.append(self.backend.broker.describe())
        return "\n".join(lines)
