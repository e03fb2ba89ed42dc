"""A cancelled task that waits in a loop must end: ``within`` never loses a cancellation.

On Python 3.11 ``asyncio.wait_for`` returns the result instead of raising ``CancelledError``
when the cancel lands in the iteration in which the awaited future completes; the task carries
on, and whoever awaits it hangs. That stalled a chaos run after its workers had stopped (its
progress monitor's poll loop). The project bans ``wait_for`` (ruff TID251) for ``within``.
"""

from __future__ import annotations

import ast
import asyncio
import logging
from pathlib import Path

import pytest

import streams_app
from streams_app.aio import cancel_and_wait, within
from streams_app.chaos.progress import ProgressMonitor

ROUNDS = 300


async def _cancel_at_every_point(make_task: object) -> list[int]:
    """Start a looping task, let it run 0-6 loop iterations, cancel it; the rounds after which
    it was still running a second later (a lost cancellation)."""
    lost = []
    for round_ in range(ROUNDS):
        task = make_task()  # type: ignore[operator]
        for _ in range(round_ % 7):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=1.0)
        if not done:
            lost.append(round_)
            while not task.done():  # end it, so that one loss does not hang the test
                task.cancel()
                await asyncio.wait({task}, timeout=0.1)
    return lost


async def test_within_never_loses_a_cancellation() -> None:
    polls = 0

    async def poll() -> int:
        nonlocal polls
        await asyncio.sleep(0)
        polls += 1
        return polls

    async def poller() -> None:
        while True:
            await within(poll(), 10)
            await asyncio.sleep(0)

    assert await _cancel_at_every_point(lambda: asyncio.create_task(poller())) == []
    assert polls > ROUNDS  # the cancels did land between and during polls


async def test_within_times_out_and_cancels_what_it_waited_on() -> None:
    waited = asyncio.Event()
    cancelled = False

    async def slow() -> None:
        nonlocal cancelled
        waited.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled = True
            raise

    try:
        await within(slow(), 0.05)
    except TimeoutError:
        pass
    else:
        raise AssertionError("within() returned without its awaitable finishing")
    assert waited.is_set() and cancelled
    assert await within(asyncio.sleep(0, result="ok"), None) == "ok"


class _FastMonitor(ProgressMonitor):
    """The chaos progress monitor with a poll that answers at once (no broker)."""

    polls = 0

    async def poll(self) -> None:
        await asyncio.sleep(0)
        self.polls += 1


async def test_the_progress_monitor_stops_whenever_it_is_stopped() -> None:
    monitor = _FastMonitor("127.0.0.1:1", "group", ["topic"], interval=0)
    lost: list[int] = []
    for round_ in range(ROUNDS):
        monitor._task = asyncio.create_task(monitor._run())
        for _ in range(round_ % 7):
            await asyncio.sleep(0)
        stopping = asyncio.create_task(monitor.stop())
        done, _ = await asyncio.wait({stopping}, timeout=1.0)
        if not done:
            lost.append(round_)
            task = monitor._task
            while task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=0.1)
            await stopping
    assert lost == []
    assert monitor.polls > ROUNDS


async def test_cancel_and_wait_ends_a_task_that_swallowed_its_cancellation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """User code (an agent, a timer) may swallow a cancel; the rebalance must not hang on it."""
    swallowed = 0
    cleaned_up = False

    async def stubborn_agent() -> None:
        nonlocal swallowed, cleaned_up
        try:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                swallowed += 1  # as a lost cancel looks: the agent simply goes on waiting
            await asyncio.Event().wait()
        finally:
            cleaned_up = True

    task = asyncio.create_task(stubborn_agent())
    await asyncio.sleep(0)  # let it reach its first wait
    with caplog.at_level(logging.WARNING, logger="streams_app.aio"):
        await cancel_and_wait({"agent stubborn": task}, again_after=0.05)
    assert task.cancelled() and swallowed == 1 and cleaned_up
    assert "agent stubborn carried on" in caplog.text


async def test_cancel_and_wait_lets_a_clean_up_finish_and_keeps_quiet() -> None:
    closed = asyncio.Event()

    async def agent() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # an await in the clean-up, as closing a client has
            closed.set()

    async def failed() -> None:
        raise ValueError("already failed")

    task = asyncio.create_task(agent())
    await asyncio.sleep(0)
    await cancel_and_wait({"agent": task}, again_after=5.0)
    assert closed.is_set()
    broken = asyncio.create_task(failed())
    await asyncio.wait({broken})
    await cancel_and_wait({"task broken": broken})  # ended already: returns, raises nothing


async def test_one_task_s_clean_up_does_not_interrupt_another_s() -> None:
    """All are cancelled once and awaited together: a second cancel would cut a clean-up that
    awaits (closing a client) short."""
    finished: list[str] = []

    async def task_with_clean_up(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            for _ in range(3):  # a clean-up that takes several loop iterations
                await asyncio.sleep(0)
            finished.append(name)

    tasks = {name: asyncio.create_task(task_with_clean_up(name)) for name in ("a", "b", "c")}
    await asyncio.sleep(0)
    await cancel_and_wait(tasks)
    assert sorted(finished) == ["a", "b", "c"]


async def test_the_caller_s_cancellation_goes_on_after_the_tasks_ended() -> None:
    ended = asyncio.Event()
    entered = asyncio.Event()

    async def slow_clean_up() -> None:
        try:
            entered.set()
            await asyncio.Event().wait()
        finally:
            for _ in range(5):
                await asyncio.sleep(0)
            ended.set()

    child = asyncio.create_task(slow_clean_up())
    await entered.wait()

    async def owner() -> None:
        await cancel_and_wait({"child": child})

    owning = asyncio.create_task(owner())
    await asyncio.sleep(0)  # the owner is now waiting for its child
    owning.cancel()
    with pytest.raises(asyncio.CancelledError):
        await owning
    assert ended.is_set() and child.cancelled()


async def test_a_task_that_never_ends_is_left_running_with_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    released = False

    async def immortal() -> None:
        while not released:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                continue

    task = asyncio.create_task(immortal())
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="streams_app.aio"):
        await cancel_and_wait({"timer immortal": task}, again_after=0.02, attempts=2)
    assert not task.done()
    assert "timer immortal still running 3 cancellations later; left running" in caplog.text
    released = True  # the test's own clean-up: the next cancel ends it
    task.cancel()
    await asyncio.wait({task})
    with pytest.raises(ValueError, match="again_after"):
        await cancel_and_wait({"x": task}, again_after=0)


def _suppresses_cancel(item: ast.withitem) -> bool:
    call = item.context_expr
    if not isinstance(call, ast.Call):
        return False
    name = ast.unparse(call.func)
    if name not in ("suppress", "contextlib.suppress"):
        return False
    names = {ast.unparse(arg) for arg in call.args}
    return bool(names & {"CancelledError", "asyncio.CancelledError"})


def test_no_task_is_ended_by_cancel_then_a_suppressed_await() -> None:
    """``task.cancel(); with suppress(CancelledError): await task`` swallows the *caller's*
    cancellation too (the stopper carries on as if not cancelled), and hangs for ever on a task
    that swallowed its own; every task streams_app ends goes through ``cancel_and_wait``."""
    found = []
    for path in sorted(Path(streams_app.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.With | ast.AsyncWith)
                and any(_suppresses_cancel(item) for item in node.items)
                and any(isinstance(inner, ast.Await) for inner in ast.walk(node))
            ):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, f"cancel-then-suppress instead of cancel_and_wait at {found}"
