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
from collections.abc import Awaitable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


async def within(awaitable: Awaitable[T], timeout: float | None) -> T:
    """Await ``awaitable``; raise ``TimeoutError`` (and cancel it) after ``timeout`` seconds.

    ``timeout=None`` waits without a bound, as ``wait_for`` does.
    """
    async with asyncio.timeout(timeout):
        return await awaitable


#: How long a cancelled task may carry on before it is cancelled again.
RECANCEL_AFTER_S = 5.0


async def cancel_and_wait(
    task: asyncio.Future[Any], what: str, *, again_after: float = RECANCEL_AFTER_S
) -> None:
    """Cancel ``task`` and wait until it has ended, whatever it ends with.

    For tasks that run *user code* (agents, timers, background tasks): a user's own
    ``asyncio.wait_for`` can swallow the cancellation (see the module docstring), and a plain
    ``cancel(); await task`` would then hang a rebalance or a shutdown. A task still running
    ``again_after`` seconds after a cancel is cancelled again, with a warning naming it. A
    well-behaved task's clean-up gets that long to finish.
    """
    while not task.done():
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=again_after)
        if not done:
            log.warning(
                "%s carried on %.0fs after it was cancelled (did it swallow the "
                "cancellation, e.g. with asyncio.wait_for?); cancelling it again",
                what,
                again_after,
            )
    if not task.cancelled():
        task.exception()  # retrieved: the caller asked for the task to end, not for its outcome
