"""Records processed while a commit is in flight (``Loop._process_while_committing``) leave the
event loop to the commit between slices, even when nothing in a slice suspends.

A topology without agents (a join, a table built from a topic) hands every record over without
an await, and a fetch of records already fetched does not wait either. The commit in flight
then got the event loop only when the fetched records ran out: it waited for all of them,
processed in slices of 32. Unit test of our own loop, with stand-ins for the consumer and the
batch processor; the real-broker side is tests/runtime/test_process_during_commit.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from streams_app.runtime.worker.loop import MEANWHILE_SLICE, Loop

BACKLOG_SLICES = 1_000


class _Consumer:
    """A backlog of ``BACKLOG_SLICES`` full slices, handed over without suspending."""

    def __init__(self) -> None:
        self.polls = 0

    def fetch_ready(self) -> bool:
        return True

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[Any, list[int]]:
        if self.polls >= BACKLOG_SLICES:
            return {}
        self.polls += 1
        return {("in", 0): list(range(max_records))}


class _Batch:
    """Processes a slice without suspending, as a join's dispatch does."""

    def __init__(self) -> None:
        self.records_processed = 0
        self.processed_during_commit = 0
        self.slices = 0

    def retried_partitions(self) -> set[Any]:
        return set()

    async def process(self, fetched: dict[Any, list[int]], *, paced: bool = True) -> None:
        self.slices += 1
        self.records_processed += sum(map(len, fetched.values()))


def _loop(consumer: _Consumer, batch: _Batch) -> Loop:
    loop = Loop.__new__(Loop)
    loop.consumer = consumer  # type: ignore[assignment]
    loop.batch = batch  # type: ignore[assignment]
    loop.stop = asyncio.Event()
    loop.dead_letters = SimpleNamespace(seal=lambda: None)  # type: ignore[assignment]
    loop.deferred_poll_error = None
    return loop


async def test_a_slice_that_never_suspends_still_lets_the_commit_finish() -> None:
    consumer, batch = _Consumer(), _Batch()

    async def commit() -> None:
        await asyncio.sleep(0)  # a request out, its answer in: two turns of the loop
        await asyncio.sleep(0)

    committing = asyncio.ensure_future(commit())
    await _loop(consumer, batch)._process_while_committing(committing)
    assert committing.done()
    # The commit needed a few turns of the event loop, not the whole backlog.
    assert 1 <= batch.slices <= 4, batch.slices
    assert batch.records_processed == batch.slices * MEANWHILE_SLICE
    assert consumer.polls < BACKLOG_SLICES
