"""A bound on a phase of a chaos run that says *where* it was stuck when it runs out.

A hang in the harness or the verifier otherwise ends as the test runner's timeout, whose thread
dump shows only the event loop waiting in ``select``: not which await never finished. A
:class:`PhaseTimeout` names the phase and carries every task's full await chain (each coroutine
down to the future it waits on), which is what a reader of a CI log needs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class PhaseTimeout(RuntimeError):
    """A phase of a chaos run did not finish within its bound."""


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """``file:line in function`` for each coroutine the task is suspended in, outermost first,
    then what the innermost one awaits.

    ``Task.get_stack`` gives only the outermost frame of a suspended coroutine; following
    ``cr_await`` (and ``gi_await`` / ``ag_await``) walks down to the real waiting point.
    """
    lines: list[str] = []
    obj: Any = task.get_coro()
    for _ in range(100):  # a bound against a cycle, which a healthy chain never has
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "gi_frame", None)
        frame = frame or getattr(obj, "ag_frame", None)
        if frame is None:
            lines.append(f"awaiting {obj!r}"[:300])
            break
        code = frame.f_code
        lines.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        nxt = getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
        nxt = nxt or getattr(obj, "ag_await", None)
        if nxt is None:
            break
        obj = nxt
    return lines


def task_dump() -> str:
    """Every unfinished task of the running loop with its await chain."""
    parts = []
    for task in sorted(asyncio.all_tasks(), key=lambda t: t.get_name()):
        if task.done():
            continue
        chain = "\n    ".join(await_chain(task))
        parts.append(f"task {task.get_name()}:\n    {chain}")
    return "\n".join(parts)


async def bounded(
    phase: str,
    awaitable: Awaitable[T],
    timeout: float,
    context: Callable[[], str] = lambda: "",
) -> T:
    """Await ``awaitable`` for at most ``timeout`` seconds; past that, log and raise a
    :class:`PhaseTimeout` with every task's await chain (taken *before* the phase is cancelled,
    while it is still stuck) and ``context()`` (for example the cluster's state)."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if task in done:
        return task.result()
    dump = task_dump()
    try:
        extra = context()
    except Exception as exc:  # the dump must not hide the hang behind a second error
        extra = f"(context unavailable: {exc!r})"
    message = f"chaos: {phase} did not finish in {timeout:.0f}s\n{dump}\n{extra}".rstrip()
    log.error("%s", message)
    task.cancel()
    # Give the cancellation a moment to run the phase's clean-up; a phase stuck even in that
    # is left behind, since the report is what matters now.
    await asyncio.wait({task}, timeout=30)
    raise PhaseTimeout(message)
