"""What the worker's producer hands back for each send, and the open batch those share.

Split from :mod:`streams_app.runtime.producer` (which batches, ships and commits): a record
appended to an :class:`OpenBatch` returns a :class:`RecordFuture` that reads its outcome from
the batch's one future when asked; a record sent while a commit is in flight returns a
:class:`HeldSend` until the next transaction takes it. Both are what the contract calls a
:class:`~streams_app.topology.contract.SendFuture`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

from streams_app.runtime.scope import current_parkable, in_processing
from streams_app.topology.contract import SendFuture
from streams_app.transport.base import AppendedRecord, RawAppend, RecordBatch, RecordMetadataLike

_T = TypeVar("_T")


class SentRecord:
    """Where a record sent through a batch landed (what its send future resolves to)."""

    __slots__ = ("offset", "partition", "timestamp", "topic")

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp

    def __repr__(self) -> str:
        return f"SentRecord({self.topic!r}, {self.partition}, offset={self.offset})"


class OpenBatch:
    """An open batch for one partition, and the one future all its records share."""

    __slots__ = ("append", "builder", "count", "direct", "future", "held", "partition", "topic")

    def __init__(
        self,
        topic: str,
        partition: int,
        builder: RecordBatch,
        loop: asyncio.AbstractEventLoop,
        raw: RawAppend | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder
        #: Appends a record: (its number in the batch, timestamp, key, value, headers) -> where
        #: it landed, None when full. The builder's own C appender where the transport offers
        #: it (``raw_append``: the records are numbered by ``count``, and the transport is told
        #: how many there were when the batch is sealed), else ``builder.append``.
        self.direct = raw is not None
        self.append: RawAppend = raw if raw is not None else _numbered(builder)
        self.count = 0
        #: Opened while a commit was in flight: it belongs to the next transaction and is not
        #: shipped before the producer's ``release`` (which clears this).
        self.held = False
        #: Settles with the batch: the first record's metadata (None under acks=0).
        self.future: asyncio.Future[RecordMetadataLike | None] = loop.create_future()

    def settle(self, sent: asyncio.Future[RecordMetadataLike]) -> None:
        """The client's future for this batch is done: pass its outcome on."""
        if self.future.done():
            return
        if sent.cancelled():
            self.future.cancel()
        elif (exc := sent.exception()) is not None:
            self.fail(exc)
        else:
            self.future.set_result(sent.result())

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)
            self.future.exception()  # retrieved: the send gate reports it, not the GC


def _numbered(builder: RecordBatch) -> RawAppend:
    """``builder.append`` in the direct appender's shape (the record's number is the builder's
    business there)."""
    append = builder.append

    def numbered(
        _n: int,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]],
    ) -> AppendedRecord | None:
        return append(timestamp=timestamp, key=key, value=value, headers=headers)

    return numbered


class RecordFuture:
    """The outcome of one record sent through a batch.

    Awaitable and inspectable like an ``asyncio.Future``, but it needs no future (and no
    resolution) of its own: its batch has one, and the record's metadata is computed from it
    only when asked for. A record then costs two attribute stores instead of a future created
    and resolved for every record, even though nobody ever looks at almost all of them.
    """

    __slots__ = ("_appended", "_batch")

    def __init__(self, batch: OpenBatch, appended: AppendedRecord) -> None:
        self._batch = batch
        self._appended = appended

    def done(self) -> bool:
        return self._batch.future.done()

    def cancelled(self) -> bool:
        return self._batch.future.cancelled()

    def exception(self) -> BaseException | None:
        return self._batch.future.exception()

    def result(self) -> RecordMetadataLike:
        first = self._batch.future.result()
        if first is None:  # acks=0: the broker reports no offsets
            return None  # type: ignore[return-value]
        appended = self._appended
        log_time = getattr(first, "timestamp", -1)
        return SentRecord(
            self._batch.topic,
            self._batch.partition,
            first.offset + appended.offset,
            appended.timestamp if log_time == -1 else log_time,
        )

    def add_done_callback(self, fn: Callable[[RecordFuture], object]) -> None:
        self._batch.future.add_done_callback(lambda _: fn(self))

    def __await__(self) -> Generator[Any, None, RecordMetadataLike]:
        if self._batch.held:
            yield from _parked_until(self._batch.future).__await__()
        else:
            yield from asyncio.shield(self._batch.future).__await__()
        return self.result()

    def __repr__(self) -> str:
        state = "pending" if not self.done() else "done"
        return f"<RecordFuture {self._batch.topic}[{self._batch.partition}] {state}>"


async def _parked_until(future: asyncio.Future[_T]) -> _T:
    """Wait for a held send's outcome, parked: it cannot come before the commit in flight
    ends, and the worker waits for its agents to settle before it goes on. Parked, the agent
    counts as settled (as while it waits for an RPC reply), so the commit is not waited for."""
    parkable = current_parkable.get() if in_processing.get() else None
    if parkable is not None:
        parkable.park()
    try:
        return await asyncio.shield(future)
    finally:
        if parkable is not None:
            parkable.unpark()


class HeldSend:
    """A send made while the previous transaction's commit was in flight.

    It becomes the real send when :meth:`StreamsProducer.release` hands the record to the next
    transaction, and is cancelled if the records that sent it are undone (the commit or the
    processing failed). No future exists until someone waits on it or adds a callback: almost
    nobody does, and a worker holds hundreds of these per commit.
    """

    __slots__ = ("_dropped", "_sent", "_waiter")

    def __init__(self) -> None:
        self._sent: SendFuture | None = None
        self._waiter: asyncio.Future[RecordMetadataLike] | None = None
        self._dropped = False

    def _release(self, sent: SendFuture) -> None:
        self._sent = sent
        if self._waiter is not None:
            _chain(sent, self._waiter)

    def _drop(self) -> None:
        self._dropped = True
        if self._waiter is not None:
            self._waiter.cancel()

    def done(self) -> bool:
        return self._dropped or (self._sent is not None and self._sent.done())

    def cancelled(self) -> bool:
        return self._dropped or (self._sent is not None and self._sent.cancelled())

    def exception(self) -> BaseException | None:
        return self._outcome().exception()

    def result(self) -> RecordMetadataLike:
        return self._outcome().result()

    def _outcome(self) -> SendFuture:
        if self._dropped:
            raise asyncio.CancelledError("the send was undone with the records that made it")
        if self._sent is None:
            raise asyncio.InvalidStateError("the send is held until the commit in flight ends")
        return self._sent

    def _wait(self) -> asyncio.Future[RecordMetadataLike]:
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
            if self._dropped:
                self._waiter.cancel()
            elif self._sent is not None:
                _chain(self._sent, self._waiter)
        return self._waiter

    def add_done_callback(self, fn: Callable[[HeldSend], object]) -> None:
        self._wait().add_done_callback(lambda _: fn(self))

    def __await__(self) -> Generator[Any, None, RecordMetadataLike]:
        return self._delivered().__await__()

    async def _delivered(self) -> RecordMetadataLike:
        waiter = self._wait()
        if self._sent is not None or self._dropped:
            return await asyncio.shield(waiter)
        return await _parked_until(waiter)  # still held


def _chain(sent: SendFuture, waiter: asyncio.Future[RecordMetadataLike]) -> None:
    def copy(_: object) -> None:
        if waiter.done():
            return
        if sent.cancelled():
            waiter.cancel()
        elif (error := sent.exception()) is not None:
            waiter.set_exception(error)
        else:
            waiter.set_result(sent.result())

    sent.add_done_callback(copy)  # type: ignore[attr-defined]
