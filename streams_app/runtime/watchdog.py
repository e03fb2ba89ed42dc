"""The processing timeout: how long agents may work on what they were handed.

An agent that awaits something that never comes (a call without a timeout, a lock never
released) would otherwise hold the worker for good: the worker commits only at a point where
every agent waits for input (``runtime/commit.py``), so no partition commits, the transaction
stays open until the coordinator aborts it at ``transaction_timeout``, the same records are
processed again, and so on forever (issue 35, items 2 and 3).

**Per batch, not per record.** The deadline runs from the moment the worker starts waiting for
the agents to finish what it handed them (one fetched batch, or a record retried alone) until
they all wait for input again. Bounding a batch bounds the transaction: it lasts at most a
commit interval plus the batch in progress, so ``processing_timeout + commit_interval`` below
90% of ``transaction_timeout`` (checked at start, ``Settings.processing_budget``) means the
worker fails the record and aborts the transaction itself, before the coordinator would time
it out. A per-record bound could not promise that: many records each under it can add up to
more than the transaction's life.

**What fails.** When the deadline passes, each agent still busy fails on the record it holds
(:attr:`~streams_app.app.stream.Stream.in_hand`) with :class:`ProcessingTimeout`; records
not started yet are merely rewound by the abort. The error policy then treats it as any agent
error: the transaction is aborted, the agents are cancelled and restarted, the record's
partition alone backs off and the record is retried in a transaction of its own (where it has
the whole timeout to itself), then dead-lettered, or the worker stops naming it. Every other
partition is processed and committed meanwhile.

An agent that blocks the event loop itself (``time.sleep``, a CPU-bound loop) cannot be
interrupted from inside the loop; a stop then ends at the CLI's hard bound (``cli/worker.py``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from streams_app.aio import within
from streams_app.errors import ProcessingTimeout
from streams_app.runtime.errors_policy import Failure

if TYPE_CHECKING:
    from streams_app.runtime.actor import Actor, AgentRunner

log = logging.getLogger(__name__)


class Watchdog:
    """Waits for the agents with a deadline, and knows how long they have been busy."""

    def __init__(self, timeout: float, transaction_timeout: float | None = None) -> None:
        self.timeout = timeout
        #: Exactly-once: the transaction timeout the deadline keeps the worker within (named in
        #: the log line, so that "transaction timed out" is never the unexplained outcome).
        self.transaction_timeout = transaction_timeout
        #: Loop time at which the worker began waiting for busy agents (None: not waiting).
        self.busy_since: float | None = None
        #: Processing timeouts so far (a counter for /metrics).
        self.timeouts = 0
        self._runner: AgentRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def settle(self, runner: AgentRunner) -> list[Failure]:
        """Wait until every agent waits for input, is parked, or holds ``take`` values; past the
        deadline, return one failure per agent still busy (nothing when all settled)."""
        self._runner = runner
        busy = [a for a in runner.actors if not a.input.settled]
        if not busy:
            self.busy_since = None
            return []
        loop = self._loop
        if loop is None:  # asked once: on CPython 3.11 each asking is a getpid system call
            loop = self._loop = asyncio.get_running_loop()
        if self.busy_since is None:
            self.busy_since = loop.time()
        remaining = max(0.0, self.busy_since + self.timeout - loop.time())
        if len(busy) == 1:  # the usual case: one flag to wait on, no coroutines around it
            settled = await busy[0].input.settled_within(remaining)
        else:
            try:
                await within(runner.wait_settled(), remaining)
                settled = True
            except TimeoutError:
                settled = False
        if not settled:
            failures = self._timed_out(runner, loop.time() - self.busy_since)
            self.busy_since = None
            return failures
        self.busy_since = None
        return []

    def _timed_out(self, runner: AgentRunner, waited: float) -> list[Failure]:
        failures = []
        for actor in runner.actors:
            if actor.input.settled:
                continue
            event = actor.input.in_hand
            if event is not None and event.offset < 0:
                event = None  # a channel value: not a record of a topic
            where = f"{event.topic}[{event.partition}]@{event.offset}" if event else "a value"
            error = ProcessingTimeout(
                f"agent {actor.name} was still working on {where} after {waited:.1f}s "
                f"(processing_timeout {self.timeout:g}s)"
            )
            failures.append(Failure.of(actor.name, error, event))
            self.timeouts += 1
            if self.transaction_timeout is not None:
                why = (
                    f"so the record fails now, before its transaction reaches "
                    f"transaction_timeout ({self.transaction_timeout:g}s) and the coordinator "
                    "aborts it"
                )
            else:
                why = "so the record fails now"
            log.warning(
                "agent %s has been working on %s for %.1fs: processing_timeout (%gs) is up, %s; "
                "error_policy decides what happens to it",
                actor.name,
                where,
                waited,
                self.timeout,
                why,
            )
        return failures

    def busy(self) -> list[tuple[Actor, float]]:
        """Agents busy now, with the seconds the worker has been waiting for them (for /ready
        and /metrics): nothing while the worker is not waiting."""
        runner = self._runner
        if self.busy_since is None or runner is None:
            return []
        waited = asyncio.get_running_loop().time() - self.busy_since
        return [(a, waited) for a in runner.actors if not a.input.settled]
