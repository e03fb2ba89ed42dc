"""The progress monitor's "processing resumed" (liveness, invariant 12), on answers fed by hand.

Found by the network faults: with the generator writing in chunks, a fault that struck while the
group was caught up between two chunks was "resumed" at the next poll, whatever it had cut (a
worker cut from every broker for 0.9 s "resumed after 0.3 s").
"""

from __future__ import annotations

import asyncio
import time

from streams_app.chaos.progress import INPUT_STOPPED, ProgressMonitor

A, B = ("data", 0), ("data", 1)


async def feed(monitor: ProgressMonitor, at: float, committed: dict, ends: dict) -> None:
    monitor.publish(at, dict(committed), dict(ends))
    await asyncio.sleep(0)  # let the waiter look at the answer
    await asyncio.sleep(0)


async def test_no_new_input_since_the_strike_is_not_a_resume() -> None:
    monitor = ProgressMonitor("127.0.0.1:9", "g", ["data"])
    since = time.monotonic()
    await feed(monitor, since - 0.5, {A: 10, B: 10}, {A: 10, B: 10})
    waiter = asyncio.create_task(monitor.wait_resumed(since, timeout=30.0))
    await feed(monitor, since + 0.1, {A: 10, B: 10}, {A: 10, B: 10})  # the baseline
    await feed(monitor, since + 0.3, {A: 10, B: 10}, {A: 10, B: 10})  # caught up, nothing new
    assert not waiter.done(), "resumed with no input since the strike"
    await feed(monitor, since + 1.0, {A: 10, B: 10}, {A: 20, B: 20})  # input, nothing committed
    await feed(monitor, since + 1.5, {A: 20, B: 10}, {A: 20, B: 20})  # B (the cut worker's) waits
    assert not waiter.done()
    await feed(monitor, since + 2.5, {A: 20, B: 20}, {A: 25, B: 25})
    assert await waiter == 2.5


async def test_input_that_stopped_for_good_counts_as_resumed() -> None:
    monitor = ProgressMonitor("127.0.0.1:9", "g", ["data"])
    since = time.monotonic()
    await feed(monitor, since - 0.5, {A: 10, B: 10}, {A: 10, B: 10})
    waiter = asyncio.create_task(monitor.wait_resumed(since, timeout=30.0))
    await feed(monitor, since + 0.1, {A: 10, B: 10}, {A: 10, B: 10})
    await feed(monitor, since + INPUT_STOPPED - 1.0, {A: 10, B: 10}, {A: 10, B: 10})
    assert not waiter.done()
    # The ends last moved before since - 0.5: past INPUT_STOPPED, the generator is done.
    await feed(monitor, since + INPUT_STOPPED, {A: 10, B: 10}, {A: 10, B: 10})
    assert await waiter == INPUT_STOPPED
