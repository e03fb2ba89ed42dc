"""``aio.Flag``, the event agents wake on and the worker waits on, and the watchdog's wait on
it: asyncio.Event's behaviour, one loop look-up in all, and the deadline. Unit test of our
own primitive; the processing timeout on the real broker is tests/runtime/test_hung_agent.py."""

from __future__ import annotations

import asyncio
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from streams_app import aio
from streams_app.aio import Flag
from streams_app.app.stream import Stream
from streams_app.runtime.watchdog import Watchdog


async def test_wait_returns_once_set_for_every_waiter_and_clear_makes_it_wait_again() -> None:
    flag = Flag()
    waiters = [asyncio.ensure_future(flag.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    flag.set()
    assert await asyncio.gather(*waiters) == [True, True, True]
    assert flag.is_set() and await flag.wait()  # set: no waiting
    flag.clear()
    again = asyncio.ensure_future(flag.wait())
    await asyncio.sleep(0)
    assert not again.done() and not flag.is_set()
    flag.set()
    assert await again
    assert flag._waiters == []


async def test_the_running_loop_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The loop is the session's: tasks other tests left on it may ask for the running loop
    # too while this one awaits, so only the asks made from Flag's own module are counted.
    asked = 0
    running = asyncio.get_running_loop

    def counted() -> asyncio.AbstractEventLoop:
        nonlocal asked
        if sys._getframe(1).f_code.co_filename == aio.__file__:
            asked += 1
        return running()

    monkeypatch.setattr(asyncio, "get_running_loop", counted)
    flag = Flag()
    for _ in range(5):
        waiter = asyncio.ensure_future(flag.wait())
        await asyncio.sleep(0)
        flag.set()
        await waiter
        flag.clear()
        timed = asyncio.ensure_future(flag.wait(60.0))
        await asyncio.sleep(0)
        flag.set()
        assert await timed
        flag.clear()
    assert asked == 1


async def test_wait_with_a_timeout_says_false_when_the_time_runs_out_and_leaves_no_timer() -> None:
    flag = Flag()
    assert not await flag.wait(0.0)
    assert flag._waiters == []
    flag.set()
    assert await flag.wait(0.0)  # already set: True whatever the time left
    loop = asyncio.get_running_loop()
    flag.clear()
    before = set(loop._scheduled)  # type: ignore[attr-defined]  # the loop is the session's
    timed = asyncio.ensure_future(flag.wait(3600.0))
    await asyncio.sleep(0)
    mine = [h for h in loop._scheduled if h not in before]  # type: ignore[attr-defined]
    assert len(mine) == 1 and mine[0].when() > loop.time() + 3000 and not mine[0].cancelled()
    flag.set()
    assert await timed
    assert mine[0].cancelled()  # cancelled with the wait


async def test_a_cancelled_wait_raises_and_forgets_its_waiter() -> None:
    flag = Flag()
    for wait in (flag.wait(), flag.wait(3600.0)):
        task = asyncio.ensure_future(wait)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert flag._waiters == []
    flag.set()  # nobody left to wake


def _runner(count: int) -> Any:
    actors = []
    for i in range(count):
        stream = Stream(SimpleNamespace(name=f"a{i}"), "in")  # type: ignore[arg-type]
        actors.append(SimpleNamespace(name=f"a{i}", input=stream))
    return SimpleNamespace(
        actors=actors,
        wait_settled=lambda: asyncio.gather(*(a.input.wait_settled() for a in actors)),
    )


@pytest.mark.parametrize("agents", [1, 2])
async def test_the_watchdog_waits_for_busy_agents_and_fails_those_past_the_deadline(
    agents: int,
) -> None:
    runner = _runner(agents)
    watchdog = Watchdog(timeout=3600.0)
    settling = asyncio.ensure_future(watchdog.settle(runner))
    await asyncio.sleep(0)
    assert not settling.done() and watchdog.busy_since is not None
    for actor in runner.actors:
        actor.input._core.settled.set()  # the agent waits for its next record
    assert await settling == []
    assert watchdog.busy_since is None
    runner.actors[0].input._core.settled.clear()  # busy again, and stays busy
    watchdog.timeout = 0.0
    failures = await watchdog.settle(runner)
    assert [f.agent for f in failures] == ["a0"] and watchdog.timeouts == 1
