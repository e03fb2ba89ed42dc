"""The worker's loop leaves the event loop to the rest of the worker once per batch, even when
nothing in a batch suspends.

A batch suspends only where something waits: an agent's task, a send, a commit. A topology
without agents (a join, a table built from a topic) hands every record over without an await,
and a poll of records already fetched does not wait either: batch after batch ran without the
fetcher sending its next request, the producer's sender shipping, the heartbeat or the web
server getting a turn, until a commit's request waited for its answer. Unit test of our own
loop, with stand-ins for what ``Loop.run`` calls; ``test_meanwhile_yields`` is its twin for the
records processed while a commit is in flight."""

from __future__ import annotations

import asyncio
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

from streams_app.runtime.worker.loop import Loop

BATCHES = 50


async def test_batches_that_never_suspend_still_let_other_tasks_run_between_them() -> None:
    loop = Loop.__new__(Loop)
    loop.conf = SimpleNamespace(  # type: ignore[assignment]
        effective_commit_interval=0.1, exactly_once=False, producer_linger_ms=None, commit_every=0
    )
    loop.stop = asyncio.Event()
    loop.pacer = SimpleNamespace(next_poll=lambda left, draining: (100, 2000))  # type: ignore[assignment]
    loop.flow = SimpleNamespace(backing_off=False, draining=False)  # type: ignore[assignment]
    loop.tasks = SimpleNamespace(restoring=lambda: False)  # type: ignore[assignment]
    loop.committer = SimpleNamespace(time_left=lambda i: None, due=lambda i, n: False)  # type: ignore[assignment]
    loop.batch = SimpleNamespace(buffered_wait=lambda: None)  # type: ignore[assignment]
    loop.timers = SimpleNamespace(any_due=lambda: False)  # type: ignore[assignment]
    loop.lock = asyncio.Lock()
    loop.deferred_poll_error = None

    async def getmany(timeout_ms: int, max_records: int) -> dict[Any, list[int]]:
        return {("in", 0): [1, 2, 3]}  # already fetched: no wait

    loop.consumer = SimpleNamespace(getmany=getmany)  # type: ignore[assignment]
    turns_seen: list[int] = []
    turns = 0

    async def step(batch: Any, interval: float) -> None:  # processed without an await
        turns_seen.append(turns)
        if len(turns_seen) == BATCHES:
            loop.stop.set()

    loop.step = step  # type: ignore[method-assign]

    async def elsewhere() -> None:  # the fetcher, the sender, the heartbeat, ...
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.ensure_future(elsewhere())
    try:
        await asyncio.sleep(0)  # the other task starts
        await loop.run()
    finally:
        other.cancel()
    assert len(turns_seen) == BATCHES
    # The other task ran between every two batches.
    assert all(b > a for a, b in pairwise(turns_seen)), turns_seen
