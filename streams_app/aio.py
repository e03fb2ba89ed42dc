"""asyncio pieces every layer uses; imports nothing from the project.

:func:`within` replaces ``asyncio.wait_for``, which ruff bans in this project (TID251). On
Python 3.11, ``wait_for`` *swallows a cancellation* that lands in the loop iteration in which
the awaited future completes: it returns the result instead of raising ``CancelledError``, and
the cancelled task carries on. A task that waits in a loop (a poller, an agent waiting for its
next record with a deadline) then never ends, and whoever cancelled it and awaits it hangs.
This is what stalled a chaos run after its workers had stopped: its progress monitor outlived
the cancel. ``asyncio.timeout`` (3.11+) runs in the caller's task and cannot lose a
cancellation that way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """Await ``awaitable``; raise ``TimeoutError`` (and cancel it) after ``timeout`` seconds.

    ``timeout=None`` waits without a bound, as ``wait_for`` does.
    """
    async with asyncio.timeout(timeout):
        return await awaitable


class Flag:
    """``asyncio.Event`` for the paths a worker takes on every batch: an agent's wake-up and
    the worker's wait for its agents to settle.

    ``asyncio.Event.wait`` asks for the running loop at every wait, and on CPython 3.11 that
    is a ``getpid`` system call each (to notice a fork); with ``asyncio.timeout`` around it,
    two more. In a saturated worker, whose agents wait and wake once a slice of records
    while a commit is in flight, those calls were 2% of its CPU (BENCHMARKS.md, "The fetch
    unpacked a batch at a time"). This flag asks once, at its first wait, and keeps the loop,
    as ``asyncio.Event`` itself binds to the loop of its first wait and refuses any other.
    """

    __slots__ = ("_loop", "_value", "_waiters")

    def __init__(self) -> None:
        self._value = False
        self._waiters: list[asyncio.Future[bool]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def is_set(self) -> bool:
        return self._value

    def set(self) -> None:
        if not self._value:
            self._value = True
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_result(True)

    def clear(self) -> None:
        self._value = False

    async def wait(self, timeout: float | None = None) -> bool:
        """Until the flag is set: True. With ``timeout``, False when that many seconds pass
        first. A cancellation is raised here as from any ``await`` (no ``wait_for``, see
        above)."""
        if self._value:
            return True
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters.append(waiter)
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            return await waiter
        finally:
            if timer is not None:
                timer.cancel()
            self._waiters.remove(waiter)


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


#: How long cancelled tasks may carry on before they are cancelled again: longer than a
#: client's own clean-up on cancel (psycopg waits up to 5 + 5 s for a query's cancellation).
RECANCEL_AFTER_S = 12.0
#: Cancels after the first before the tasks are left running with an error in the log: an
#: endless rebalance or shutdown would be worse than a task that outlives its owner.
RECANCEL_ATTEMPTS = 5


async def cancel_and_wait(
    tasks: Mapping[str, asyncio.Future[Any]],
    *,
    again_after: float = RECANCEL_AFTER_S,
    attempts: int = RECANCEL_ATTEMPTS,
) -> None:
    """Cancel ``tasks`` (named by the keys, for the log) and wait until they have ended,
    whatever they end with.

    For tasks that run *user code* (agents, timers, background tasks): a user's own
    ``asyncio.wait_for`` can swallow the cancellation (see the module docstring), and a plain
    ``cancel(); await task`` would then hang a rebalance or a shutdown. Each task is
    cancelled once and all are awaited together, so that one's clean-up never interrupts
    another's; those still running ``again_after`` seconds later are cancelled again, with a
    warning that names them, up to ``attempts`` times.

    If the caller itself is cancelled meanwhile, the tasks still end first (they are
    cancelled already), and then the caller's cancellation goes on: as a cancel scope does
    in trio or anyio.
    """
    if again_after <= 0:
        raise ValueError("again_after must be positive")
    pending = {task: what for what, task in tasks.items() if not task.done()}
    for task in pending:
        task.cancel()
    interrupted = False
    recancels = 0
    while pending:
        try:
            done, _ = await asyncio.wait(pending, timeout=again_after)
        except asyncio.CancelledError:
            interrupted = True
            continue
        for task in done:
            del pending[task]
        if not pending:
            break
        names = ", ".join(sorted(pending.values()))
        if recancels >= attempts:
            log.error("%s still running %d cancellations later; left running", names, recancels + 1)
            break
        recancels += 1
        log.warning(
            "%s carried on %.0fs after being cancelled (a swallowed cancellation, e.g. by "
            "asyncio.wait_for?); cancelling again",
            names,
            again_after,
        )
        for task in pending:
            task.cancel()
    for task in tasks.values():
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the caller asked for it to end, not for its outcome
    if interrupted:
        raise asyncio.CancelledError
