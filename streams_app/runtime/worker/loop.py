"""The loop: poll, process, run due timers, commit when due; restore new tasks first.

The concern it owns (Kafka Streams' ``StreamThread.runOnce``): one turn resumes partitions whose
backoff is over, restores tasks that need it, polls a batch sized to the commit deadline
(``runtime/pacing.py``), and then, under the processing lock, runs due timers, processes the
batch (``batch.py``), sends ``send_soon``'s records and commits when due and quiescent (else
drains: busy agents get no new records until it can). Everything a turn raises is handed to
failure handling (``failures.py``) there.

Under exactly-once a saturated worker does not idle through its commit's round trips: it
processes already-fetched records in slices while the commit is in flight
(:meth:`Loop.meanwhile`, ``process_during_commit``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial

from streams_app.aio import cancel_and_wait
from streams_app.runtime.clock import Clock
from streams_app.runtime.commit import MIGRATED, Meanwhile
from streams_app.runtime.dead_letters import DeadLetters
from streams_app.runtime.errors_policy import Failure
from streams_app.runtime.idle_close import IdleClose
from streams_app.runtime.measured_commit import MeasuredCommitter
from streams_app.runtime.pacing import FetchPacer
from streams_app.runtime.producer import StreamsProducer
from streams_app.runtime.task_manager import TaskManager
from streams_app.runtime.timers import TimerScheduler
from streams_app.runtime.worker.batch import Batch, BatchProcessor, batch_offsets
from streams_app.runtime.worker.busy import BusyMeter
from streams_app.runtime.worker.collector import RecordCollector
from streams_app.runtime.worker.failures import AgentFailed, FailureHandler
from streams_app.runtime.worker.flow import FlowControl
from streams_app.settings import AT_MOST_ONCE, EXACTLY_ONCE_V2, Settings
from streams_app.transport.base import ConsumerClient
from streams_app.transport.errors import GroupProtocolMismatchError, TransportError

log = logging.getLogger(__name__)

#: The fewest records per slice processed while a commit is in flight (process_during_commit):
#: each of the commit's answers waits for at most one slice before the event loop gets to it.
#: 32 beat 8 and 128 for the count in interleaved runs (BENCHMARKS.md, "Processing while the
#: commit is in flight"); at 128 its commits took 2.5 times as long.
MEANWHILE_SLICE = 32
#: The most records per slice: with cheap records the slice is sized by time instead.
MEANWHILE_SLICE_MAX = 256
#: Busy time (on a CPU or waiting for one: ``runtime.worker.busy``) a slice is sized to take:
#: a slice's fixed costs (a poll, a batch, a loop turn) weigh on a record of a few µs, and
#: 32-record slices cost a stream-table join more CPU per record than its other batches; at
#: about 100 (this budget) it kept its core busy at less CPU per record, 1.1-1.5 times as
#: fast, its commits longer (BENCHMARKS.md, "Busy by CPU time, slices sized by time").
MEANWHILE_SLICE_SECONDS = 0.0005
#: Busy (on a CPU or waiting for one) more than this share of the time since the last commit
#: ended: the worker is saturated, and processes on while its commit is in flight
#: (:meth:`Loop.meanwhile`). A worker that keeps up at half its capacity is busy about half
#: the time; a saturated one all but its polls' waits (``runtime.worker.busy``).
SATURATED = 0.7
#: Turns of the event loop after each slice processed during a commit. A commit's step is a
#: chain of awaits (a response read, the future it resolves, the coroutine that waited on it,
#: the next request), each of them a turn; with one turn a slice, each answer waited for up to
#: a slice per link. Three brought a saturated stream-table join's commit p50 from 38-46 ms to
#: 22-30, the stream-stream join's from 60-62 to 42-46, at no cost to their rates (BENCHMARKS.md,
#: "Three turns of the event loop between slices").
MEANWHILE_TURNS = 3


class Loop:
    def __init__(
        self,
        conf: Settings,
        clock: Clock,
        lock: asyncio.Lock,
        stop: asyncio.Event,
        pacer: FetchPacer,
        consumer: ConsumerClient,
        producer: StreamsProducer,
        tasks: TaskManager,
        committer: MeasuredCommitter,
        dead_letters: DeadLetters,
        timers: TimerScheduler,
        flow: FlowControl,
        batch: BatchProcessor,
        collector: RecordCollector,
        failures: FailureHandler,
        restore: Callable[[], Awaitable[None]],
        sleep: Callable[[float], Awaitable[None]],
        idle_close: IdleClose | None = None,
    ) -> None:
        self.conf = conf
        self.clock = clock
        self.lock = lock
        self.stop = stop
        self.pacer = pacer
        self.consumer = consumer
        self.producer = producer
        self.tasks = tasks
        self.committer = committer
        self.dead_letters = dead_letters
        self.timers = timers
        self.flow = flow
        self.batch = batch
        self.collector = collector
        self.failures = failures
        #: Restores the tasks that need it (the worker's: it also ends a rebalance).
        self.restore = restore
        #: Sleeps, returning early when the worker is asked to stop.
        self.sleep = sleep
        #: The opt-in idle close of windows and joins (None: nothing opted in).
        self.idle_close = idle_close
        #: A poll made while a commit was in flight failed: the loop's next poll raises it,
        #: where the error would have come from without that poll.
        self.deferred_poll_error: BaseException | None = None
        self._foreign_warned = -1e9
        #: The worker's CPU since its last periodic commit ended: is it saturated?
        self.busy = BusyMeter(clock)

    async def run(self) -> None:
        conf = self.conf
        interval = conf.effective_commit_interval
        stop = self.stop
        pacer = self.pacer
        flow = self.flow
        ship_when_caught_up = conf.exactly_once and conf.producer_linger_ms is None
        while not stop.is_set():
            if flow.backing_off:
                await self._resume_backed_off()
            if self.tasks.restoring():
                await self._restore_unless_stopped()
                continue
            # Aimed at the commit deadline: a due commit is not held back by a long poll or a
            # big batch (runtime.pacing).
            timeout_ms, max_records = pacer.next_poll(
                self.committer.time_left(interval), draining=flow.draining
            )
            waiting = self.batch.buffered_wait()
            try:
                if self.deferred_poll_error is not None:
                    error, self.deferred_poll_error = self.deferred_poll_error, None
                    raise error
                batch = await self.consumer.getmany(
                    timeout_ms=timeout_ms if waiting is None else min(timeout_ms, waiting),
                    max_records=max_records,
                )
            except GroupProtocolMismatchError as exc:
                await self._wait_for_foreign_members(exc)
                continue
            async with self.lock:
                if self.timers.any_due() and not await self._run_due_timers():
                    continue
                if not batch and self.committer.due(interval, conf.commit_every):
                    # Idle: a trailing transaction marker may have moved the position.
                    await self.batch.sync_positions(list(self.tasks.by_tp))
                await self.step(batch, interval)
                if ship_when_caught_up and self.producer.lingering and self.batch.caught_up():
                    # Nothing more to process: the worker would only wait now, so what lingers
                    # for the commit goes out instead, and the commit has less to send
                    # (settings.effective_producer_linger_ms).
                    self.producer.send_lingering()
            # The rest of the worker's turn: the fetcher's next request, the producer's
            # sender, the heartbeat, the web server. A batch suspends only where something
            # waits (an agent's task, a send, a commit); one of a topology without agents
            # (joins, tables built from topics) does not, nor does a poll of records already
            # fetched, and batch after batch went by without them until a commit waited.
            await asyncio.sleep(0)

    async def step(self, batch: Batch, interval: float) -> None:
        """Process ``batch`` (or settle, when empty), then commit if due; failures handled."""
        committer = self.committer
        try:
            if batch or self.batch.has_buffered():
                if self.conf.processing_guarantee == AT_MOST_ONCE:
                    await committer.commit_offsets_before_processing(batch_offsets(batch))
                await self.batch.process(batch)
            else:
                await self.batch.settle()
            if self.idle_close is not None:
                await self.idle_close.run(self.tasks.running(), self.batch.after_idle_close)
            await self.collector.flush_soon()
            if committer.due(interval, self.conf.commit_every):
                if await self.batch.quiescent():
                    self.flow.draining = False
                    await committer.commit(self.meanwhile())
                    self.busy.mark(self.batch.records_processed)
                else:
                    self.flow.draining = True
            self.flow.release()
        except AgentFailed as failed:
            await self.failures.on_agent_failures(failed.failures)
        except MIGRATED as exc:
            await self.failures.on_migrated(exc)
        except TransportError as exc:  # PRODUCER_BROKEN and any other transaction failure
            await self.failures.on_transaction_failure(exc)

    def meanwhile(self) -> Meanwhile | None:
        """What this commit does while in flight (runtime.commit): under exactly-once, process
        on if the worker is saturated, in slices sized to take about
        ``MEANWHILE_SLICE_SECONDS`` each.

        Saturated: on the CPU most of the time since the last commit ended
        (``runtime.worker.busy``), so records are waiting and every millisecond of the commit's
        waits is throughput lost. A worker with time to spare gains nothing (it processes those
        records after the commit anyway) and the slices would only delay the commit's answers,
        and with them every output's visibility: commits took 1-6 ms longer at half capacity
        (BENCHMARKS.md).
        """
        conf = self.conf
        if not conf.process_during_commit or conf.processing_guarantee != EXACTLY_ONCE_V2:
            return None
        share, cost = self.busy.read(self.batch.records_processed)
        if share < SATURATED or cost is None:
            return None
        size = max(MEANWHILE_SLICE, min(MEANWHILE_SLICE_MAX, int(MEANWHILE_SLICE_SECONDS / cost)))
        return partial(self._process_while_committing, size=size)

    async def _process_while_committing(
        self, committing: asyncio.Future[None], size: int = MEANWHILE_SLICE
    ) -> None:
        """Process records already fetched, in slices of ``size``, until the commit in flight is
        done.

        It stops early when the fetched records run out (a slice comes back short), when a
        stop is requested, when the group starts to rebalance (a poll would wait for the new
        assignment), and before a record that failed before is due again: that one is retried
        in a transaction of its own, which needs a commit (``commit_for_retry``), and none may
        begin while one is in flight. Agent failures propagate (the committer raises them once
        it is done).
        """
        self.dead_letters.seal()
        consumer = self.consumer
        stop = self.stop
        batch = self.batch
        while not committing.done() and not stop.is_set() and not batch.retried_partitions():
            if not consumer.fetch_ready():
                return  # a rebalance is under way: its callbacks need the lock held here
            try:
                fetched = await consumer.getmany(timeout_ms=0, max_records=size)
            except Exception as exc:
                self.deferred_poll_error = exc
                return
            if not fetched:
                return
            before = batch.records_processed
            await batch.process(fetched, paced=False)
            batch.processed_during_commit += batch.records_processed - before
            if sum(map(len, fetched.values())) < size:
                return  # what was fetched is done
            # Let the commit's answers in. A slice suspends only where something waits: an
            # agent's task, a send. A topology without agents (joins, tables built from
            # topics) hands every record over without an await, and a fetch of records
            # already here does not wait either; without this the commit in flight got the
            # event loop only once everything fetched was processed, in slices, and the fetches
            # behind it waited too (BENCHMARKS.md, "A commit that waited for the whole fetch").
            for _ in range(MEANWHILE_TURNS):
                await asyncio.sleep(0)

    async def _restore_unless_stopped(self) -> None:
        """Restore, but a stop request ends the restore (it resumes from its checkpoint at the
        next start).

        A restore cannot read past a transaction left open on a changelog partition, and waits
        for it for up to ``restore_timeout`` (300 s), with the processing lock held. After an
        outage that can be this worker's own last transaction: the migration that follows an
        unknown commit outcome (``FailureHandler.on_migrated``) closes every task, and the new
        tasks restore their changelog tails. The stop used to wait for all of it, and the
        worker's loop was cancelled after ``shutdown_timeout`` ("the batch in progress did not
        finish").
        """
        restoring = asyncio.ensure_future(self.restore())
        stopping = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({restoring, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not restoring.done():
                await cancel_and_wait({"the restore": restoring})
        if not restoring.cancelled():
            restoring.result()

    async def _resume_backed_off(self) -> None:
        due = self.flow.due()
        if not due:
            return
        async with self.lock:
            self.flow.resume_due(due, self.tasks.by_tp)

    async def _run_due_timers(self) -> bool:
        """Run timers whose time has come; what they send joins the open transaction.
        False when one failed (the failure has been handled)."""
        failed = await self.timers.run_due()
        for run in failed:
            assert run.error is not None
            await self.failures.on_agent_failures(
                [Failure.of(f"timer:{run.timer.name}", run.error, None)]
            )
            return False
        return True

    async def _wait_for_foreign_members(self, exc: GroupProtocolMismatchError) -> None:
        """Switching a group over from another framework: its last workers may still be in the
        group (stopping, or killed and not yet expired). Wait and rejoin, saying so."""
        now = self.clock.monotonic()
        if now - self._foreign_warned > 10.0:
            self._foreign_warned = now
            log.warning("%s: waiting for them to leave, then joining (stop them all)", exc)
        await self.sleep(1.0)
        async with self.lock:
            # The rejoin pauses and resumes every partition itself.
            await self.failures.leave_and_rejoin()
