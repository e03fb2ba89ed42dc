"""Failure handling: what an agent error, a failed transaction or a lost task undoes.

The concern it owns, Kafka Streams' ``TaskManager``/``StreamThread`` error paths:

- an **agent error** (one per record, :class:`AgentFailed`): decide per record with the error
  policy, undo the transaction once, then carry the decisions out: dead-letter, stop the worker,
  or back the record's partition off and retry it (:meth:`FailureHandler.on_agent_failures`);
- a **failed transaction** (a send or the commit failed, the producer broke): abort with a new
  producer and start the agents afresh, or stop for a record no retry can commit
  (:meth:`FailureHandler.on_transaction_failure`);
- a **migration** (fenced, or the group moved on without this worker): drop every task,
  recreate the producer, rejoin (:meth:`FailureHandler.on_migrated`).

:meth:`FailureHandler.stop_processing` is the one reset all of them (and a revocation) go
through: stop the agents, forget flow control's holds (:meth:`FlowControl.reset`), drop what
``send_soon`` holds, cancel running timers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from streams_app.errors import WorkerStopped
from streams_app.runtime.actor import AgentRunner
from streams_app.runtime.commit import MIGRATED
from streams_app.runtime.dead_letters import DeadLetter, DeadLetters
from streams_app.runtime.errors_policy import Decision, ErrorPolicy, Failure, is_bad_record
from streams_app.runtime.measured_commit import MeasuredCommitter
from streams_app.runtime.replicas import Replicas
from streams_app.runtime.task import RUNNING
from streams_app.runtime.task_manager import TaskManager
from streams_app.runtime.timers import TimerScheduler
from streams_app.runtime.worker.collector import RecordCollector
from streams_app.runtime.worker.flow import FlowControl
from streams_app.settings import AT_MOST_ONCE, Settings
from streams_app.transport.errors import (
    FatalProducerError,
    TransactionLeftOpenError,
    TransportError,
    is_record_rejected,
)

log = logging.getLogger(__name__)


def _not_the_records(error: BaseException) -> bool:
    """A failure of the producer under the agent's send (fenced, timed out by the coordinator,
    the group moved on), not of the record. A send that failed otherwise (a record refused,
    a topic missing) stays the record's, for the error policy."""
    return isinstance(error, (*MIGRATED, FatalProducerError))


class AgentFailed(Exception):
    """Agents failed on records of the batch being processed (one failure per record)."""

    def __init__(self, failures: list[Failure]) -> None:
        super().__init__("; ".join(f.describe() for f in failures))
        self.failures = failures


class FailureHandler:
    def __init__(
        self,
        conf: Settings,
        policy: ErrorPolicy,
        runner: AgentRunner,
        timers: TimerScheduler,
        flow: FlowControl,
        collector: RecordCollector,
        tasks: TaskManager,
        committer: MeasuredCommitter,
        dead_letters: DeadLetters,
        replicas: Replicas,
        resubscribe: Callable[[], None],
    ) -> None:
        self.conf = conf
        self.policy = policy
        self.runner = runner
        self.timers = timers
        self.flow = flow
        self.collector = collector
        self.tasks = tasks
        self.committer = committer
        self.dead_letters = dead_letters
        self.replicas = replicas
        #: Leave the group and join again (after the tasks were dropped).
        self.resubscribe = resubscribe

    # -- the one reset ---------------------------------------------------------------------------

    async def stop_processing(self, *, stop_agents: bool = True, assignment_ends: bool) -> None:
        """Stop what is processing before its work is undone or given up: the agents (they may
        be mid-record, or parked on an RPC reply, and would send into what is being undone;
        the caller restarts them), flow control's holds (``assignment_ends``: see
        :meth:`FlowControl.reset`), ``send_soon``'s records, the running timers.

        ``stop_agents=False``: a revocation whose commit went through, with every agent idle;
        they keep running (and keep what they hold in local variables, as Faust's do)."""
        if stop_agents:
            await self.runner.stop()
        self.flow.reset(assignment_ends=assignment_ends)
        self.collector.drop_soon()
        await self.timers.cancel()

    async def undo(self, *, recreate_producer: bool = False, assignment_ends: bool = False) -> None:
        """Abort the open transaction, the agents stopped first. The caller restarts them."""
        await self.stop_processing(assignment_ends=assignment_ends)
        await self.committer.abort(recreate_producer=recreate_producer)

    async def abort(self, *, assignment_ends: bool = False) -> None:
        """Abort, then start the agents afresh (their local variables may hold aborted work)."""
        await self.undo(assignment_ends=assignment_ends)
        self.dead_letters.aborted()
        await self.runner.restart()

    # -- agent errors ------------------------------------------------------------------------------

    async def on_agent_failures(self, failures: list[Failure]) -> None:
        """Decide per record, undo the transaction once, then carry the decisions out.

        Retried records pause only their own partition for the backoff: every other partition
        is processed and committed meanwhile (see :mod:`streams_app.runtime.errors_policy`).
        """
        for failure in failures:
            if isinstance(failure.error, TransactionLeftOpenError):
                raise failure.error  # records given up may be open: the worker stops
        broken = next((f.error for f in failures if _not_the_records(f.error)), None)
        if broken is not None:
            # The producer failed under an agent's send (fenced, timed out, the group moved
            # on): the transaction's failure, as Kafka Streams takes it (a task migration),
            # not the record's. Counted against the record, its retries would run into the
            # same broken producer and end in the dead-letter topic: a good record lost (the
            # short networked chaos run, seed 739716).
            if isinstance(broken, MIGRATED):
                await self.on_migrated(broken)
            else:
                assert isinstance(broken, TransportError)
                await self.on_transaction_failure(broken)
            return
        decisions = [(failure, self.policy.decide(failure)) for failure in failures]
        for failure, decision in decisions:
            if is_bad_record(failure.error) and decision is Decision.DEAD_LETTER:
                log.warning("%s: a bad record, no retry can help", failure.describe())
                continue
            # The traceback once per record (its first failure) and with the final decision;
            # the retries in between say which attempt failed.
            attempts = self.policy.attempts_of(failure.position) if failure.position else 1
            log.error(
                "%s; policy %s -> %s%s",
                failure.describe(),
                self.conf.error_policy,
                decision.value,
                self._retry_note(failure, decision),
                exc_info=failure.error if attempts <= 1 or decision is not Decision.RETRY else None,
            )
        if self.conf.processing_guarantee == AT_MOST_ONCE:
            # The offsets were committed before processing: nothing to undo, nothing to retry.
            await self.stop_processing(assignment_ends=False)
            await self.runner.restart()
            for failure, decision in decisions:
                if decision is Decision.DEAD_LETTER and failure.event is not None:
                    await self._dead_letter_event(failure)
        else:
            # Agents may still be working on the batch (a group_by key function failed while
            # it was being handed out, or one is parked on an RPC reply): abort stops them
            # before the abort, or they send into it.
            await self.abort()
        for failure, decision in decisions:
            if decision is Decision.STOP and failure.replayed:
                raise WorkerStopped(
                    f"{failure.describe()}, {self.policy.callback_failures} times in a row: it "
                    "runs again whenever the abort replays its records, and there is no record "
                    "to dead-letter. Stopping; nothing of it was committed. Fix the callback, "
                    "then restart"
                ) from failure.error
            if decision is Decision.STOP:
                raise WorkerStopped(failure.describe()) from failure.error
        for failure, decision in decisions:
            if decision is Decision.RETRY:
                self._back_off(failure)

    def _retry_note(self, failure: Failure, decision: Decision) -> str:
        if decision is not Decision.RETRY:
            return ""
        if failure.position is None:
            attempts = self.policy.callback_failures
        else:
            attempts = self.policy.attempts_of(failure.position)
        limit = self.conf.max_retries if self.conf.error_policy != "retry" else None
        of = f"/{limit}" if limit is not None else ""
        return f" (retry {attempts}{of} in {self.policy.backoff(failure.position):g}s)"

    async def _dead_letter_event(self, failure: Failure) -> None:
        """At-most-once: dead-letter a failed record at once (it will not come round)."""
        event = failure.event
        assert event is not None and failure.position is not None
        self.policy.poisoned.pop(failure.position, None)
        await self.dead_letters.send(
            DeadLetter(
                event.topic,
                event.partition,
                event.offset,
                event.raw_key,
                event.raw_value,
                event.headers,
                failure.error,
                failure.agent,
                self.policy.attempts_of(failure.position),
            )
        )

    def _back_off(self, failure: Failure) -> None:
        """Pause the failed record's partition until its backoff is over (a replayed
        callback: every partition, as it is not known which task's records run it)."""
        tp, position = failure.tp, failure.position
        if failure.replayed:  # restoring tasks' partitions stay paused by the restore
            paused = [tp for tp, task in self.tasks.by_tp.items() if task.state == RUNNING]
        elif tp is None or position is None or tp not in self.tasks.by_tp:
            return
        else:
            paused = [tp]
        self.flow.back_off(paused, self.policy.backoff(position))

    # -- transactions and tasks lost -----------------------------------------------------------

    async def on_transaction_failure(self, exc: TransportError) -> None:
        """A send or the commit failed (PRODUCER_BROKEN, any other transaction failure)."""
        log.warning("transaction failed (%s: %s): aborting and retrying", type(exc).__name__, exc)
        await self.undo(recreate_producer=True)
        # A dead letter refused goes again smaller (runtime/dead_letter_size.py); an output
        # refused for good stops the worker: committing again would fail the same way.
        smaller = self.dead_letters.raise_if_refused()
        if is_record_rejected(exc) and not smaller:
            raise WorkerStopped(
                f"{exc}: the transaction cannot commit, and every retry would fail the same "
                "way. Stopping; nothing of it was committed. Fix: raise the topic's "
                "max.message.bytes (or make the record smaller); then restart"
            ) from exc
        await self.runner.restart()

    async def on_migrated(self, exc: BaseException) -> None:
        """Fenced, or the group moved on: drop every task, new producer, rejoin."""
        self.dead_letters.aborted()
        await self.stop_processing(assignment_ends=True)
        await self.committer.task_migrated(exc)
        self.replicas.forget_active()
        await self.runner.restart()
        self.resubscribe()

    async def leave_and_rejoin(self) -> None:
        """Give up the assignment (a group switched over from another framework still has
        their members): abort, drop every task, rejoin."""
        await self.abort(assignment_ends=True)
        self.tasks.close_all()
        self.committer.group = None
        self.resubscribe()
