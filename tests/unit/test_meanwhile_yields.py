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

    async def wait_fetched(self, until: asyncio.Future[None]) -> bool:
        return False  # a client that cannot wait for the next fetch


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


class _Arriving:
    """Fetch responses that come while the commit is in flight: ``deliver`` adds a slice and
    wakes a waiting ``wait_fetched``, as a fetch response wakes the fetcher's waiters."""

    def __init__(self) -> None:
        self.buffered: list[list[int]] = []
        self.arrived = asyncio.Event()
        self.waits = 0

    def fetch_ready(self) -> bool:
        return True

    def deliver(self, records: list[int]) -> None:
        self.buffered.append(records)
        self.arrived.set()

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[Any, list[int]]:
        assert timeout_ms == 0  # never a poll that waits (it would take records)
        if not self.buffered:
            return {}
        return {("in", 0): self.buffered.pop(0)}

    async def wait_fetched(self, until: asyncio.Future[None]) -> bool:
        self.waits += 1
        self.arrived.clear()
        arrival = asyncio.ensure_future(self.arrived.wait())
        await asyncio.wait((arrival, until), return_when=asyncio.FIRST_COMPLETED)
        if not arrival.done():
            arrival.cancel()
            return False
        return True


async def test_records_fetched_while_the_commit_is_in_flight_are_processed_before_it_ends() -> None:
    """When what was fetched runs out before the commit is done, the loop waits for the next
    fetch instead of idling until the commit ends, and stops waiting when the commit does."""
    consumer, batch = _Arriving(), _Batch()
    consumer.deliver(list(range(MEANWHILE_SLICE)))
    commit_done = asyncio.Event()

    async def commit() -> None:
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        consumer.deliver([1, 2, 3])  # a fetch response during the commit's round trips
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        consumer.deliver([4, 5])
        await commit_done.wait()

    committing = asyncio.ensure_future(commit())
    meanwhile = asyncio.ensure_future(_loop(consumer, batch)._process_while_committing(committing))

    async def processed(count: int) -> None:
        while batch.records_processed < count and not meanwhile.done():
            await asyncio.sleep(0)

    await asyncio.wait_for(processed(MEANWHILE_SLICE + 5), 5)
    assert batch.records_processed == MEANWHILE_SLICE + 5
    assert not meanwhile.done()  # waiting for the next fetch, the commit still in flight
    assert batch.slices == 3
    commit_done.set()
    await asyncio.wait_for(meanwhile, 5)
    assert committing.done()
    assert batch.records_processed == MEANWHILE_SLICE + 5
    assert consumer.waits >= 2


async def test_a_client_that_cannot_wait_ends_the_processing_when_the_fetched_records_run_out() -> (
    None
):
    consumer, batch = _Consumer(), _Batch()
    consumer.polls = BACKLOG_SLICES - 1  # one slice left
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    await asyncio.wait_for(_loop(consumer, batch)._process_while_committing(never), 5)
    assert batch.slices == 1 and not never.done()
    never.cancel()
