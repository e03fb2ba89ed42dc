"""Fetched records as plain named tuples instead of aiokafka's ``ConsumerRecord`` dataclass,
unpacked a record batch at a time.

aiokafka turns every record of a fetch response into a ``ConsumerRecord``: a dataclass of
eleven fields built by a Python ``__init__``, after computing both payload sizes. That cost
0.66 us a record against 0.12 us for iterating the record batch itself; a worker draining a
backlog spends about 10 us on a record in all, so the dataclass was some 5% of it. The runtime
reads seven of those fields (:class:`~streams_app.transport.base.RecordLike`); a named tuple of
those seven, built with ``tuple.__new__``, costs 0.39 us (measured with aiokafka's C record
batches, 1,000 records of 100 bytes).

aiokafka's generator then hands the records over one by one, with a few Python steps each
(:class:`BatchUnpacker` says which). Unpacking each batch with a list comprehension and
handing slices over took a fetch of 4,000 records of 100 bytes in 500-record batches from
0.51 to 0.38 us a record (0.47 to 0.34 with 500-record takes).

aiokafka constructs ``PartitionRecords`` by name inside its fetcher, so the hook is the one
place where each new ``PartitionRecords`` is stored: the fetcher's ``_records`` map. Only the
consumers that install it (:class:`~streams_app.kafka.consumer.StableConsumer`) change; other
aiokafka consumers in the process keep their ``ConsumerRecord``. Aborted transactions, control
batches, CRC checks and positions are decided as aiokafka's generator decides them, with its
own helpers; ``tests/unit/test_fetched_records.py`` compares the two take by take.

CRC-32C. aiokafka's C extension checks each batch's CRC in software, byte by byte: 1.9 % of a
stream-table join's CPU (profile with native frames, 2,000,000 records). The ``crc32c`` package
computes it with the CPU's CRC instruction (SSE 4.2 / ARMv8), some 0.05 ns a byte. So the
fetcher's ``MemoryRecords`` is wrapped (:func:`_memory_records`): it remembers the fetched bytes
of the record set it made last, and the fetch result stored next (synchronously, right after:
aiokafka's ``_proc_fetch_request``) checks every batch of those bytes at once
(:func:`corrupt_batches`). ``_fill`` then asks whether the batch's base offset is among the
corrupt ones instead of calling ``validate_crc``, and raises aiokafka's exception for it as
aiokafka would, at the same batch. Where that cannot be decided (legacy magic, a length that
makes no sense, no bytes remembered: another thread's fetcher made a record set in between)
``validate_crc`` decides, as before.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable
from inspect import GEN_CREATED, getgeneratorstate
from types import GeneratorType
from typing import Any, NamedTuple

import aiokafka.consumer.fetcher as aiokafka_fetcher
from aiokafka.consumer.fetcher import READ_COMMITTED
from aiokafka.errors import CorruptRecordException
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition
from crc32c import crc32c


class FetchedRecord(NamedTuple):
    """A consumed record: the fields of ``ConsumerRecord`` that the runtime reads."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


_NO_HEADERS: tuple[tuple[str, bytes], ...] = ()

#: A record batch's first fields (v2, KIP-98): base offset, batch length (of what follows the
#: length), partition leader epoch, magic, CRC-32C (of everything from the attributes, byte 21,
#: to the batch's end).
_BATCH_HEAD = struct.Struct(">qiibI")
_CRC_FROM = 21
#: What a batch's length covers at the least: the header after the length field, no records.
_MIN_BATCH_LENGTH = 49
_NONE_CORRUPT: frozenset[int] = frozenset()


def corrupt_batches(data: bytes) -> frozenset[int] | None:
    """The base offsets of the v2 batches in ``data`` (a fetch's record set) whose CRC-32C does
    not match, checked with the CPU's CRC instruction; None when a batch is not v2 or its
    length makes no sense (aiokafka's ``validate_crc`` then decides, batch by batch).

    The batches are walked as aiokafka's ``MemoryRecords`` walks them (each is 12 bytes of
    offset and length, then ``length`` bytes); a batch cut off at the end of the fetch is not
    handed over by ``MemoryRecords`` and is not checked here."""
    view = memoryview(data)
    end = len(data)
    pos = 0
    corrupt: set[int] | None = None
    unpack = _BATCH_HEAD.unpack_from
    while pos + _CRC_FROM <= end:
        base_offset, length, _epoch, magic, crc = unpack(data, pos)
        if magic != 2 or length < _MIN_BATCH_LENGTH:
            return None
        stop = pos + 12 + length
        if stop > end:
            break
        if crc32c(view[pos + _CRC_FROM : stop]) != crc:
            if corrupt is None:
                corrupt = set()
            corrupt.add(base_offset)
        pos = stop
    return _NONE_CORRUPT if corrupt is None else frozenset(corrupt)


#: The record set :func:`_memory_records` made last, with the bytes it was made of.
_last_made: list[Any] = [None, None]


def _memory_records(data: bytes) -> MemoryRecords:
    """aiokafka's ``MemoryRecords(data)``, remembering ``data`` for the fetch result the
    fetcher stores next (:meth:`_LeanFetchResults.__setitem__`, which lets go of it)."""
    records = MemoryRecords(data)
    _last_made[0], _last_made[1] = records, data
    return records


class BatchUnpacker:
    """``PartitionRecords``' record iterator (aiokafka's ``_unpack_records`` generator), one
    record batch at a time.

    aiokafka's generator resumes once a record: it compares the offset, calls
    ``_consumer_record``, stores ``next_fetch_offset`` and yields, some 0.1 us of Python a
    record around the C batch's own iteration. Here a list comprehension unpacks a whole batch
    into :class:`FetchedRecord` s, and :meth:`take` hands them over by slices. The decisions per
    batch are aiokafka's, step for step: the CRC check, the aborted transactions of a
    ``read_committed`` consumer (its own ``_consume_aborted_up_to`` and
    ``_contains_abort_marker``), control batches skipped, records below the fetch offset
    skipped. So are the positions: ``next_fetch_offset`` is one past the last record handed
    over, and moves to the batch's ``next_offset`` only when more is asked of an exhausted
    batch, as the generator does when resumed after its batch's last record.
    """

    __slots__ = (
        "_at",
        "_batch_end",
        "_corrupt",
        "_done",
        "_owner",
        "_partition",
        "_ready",
        "_topic",
    )

    def __init__(
        self, owner: Any, tp: TopicPartition, corrupt: frozenset[int] | None = None
    ) -> None:
        self._owner = owner
        self._topic, self._partition = tp
        #: The base offsets of the corrupt batches (:func:`corrupt_batches`); None: each batch's
        #: ``validate_crc`` decides.
        self._corrupt = corrupt
        #: The unpacked batch, and how much of it has been handed over.
        self._ready: list[FetchedRecord] = []
        self._at = 0
        #: The ready batch's ``next_offset``: the position once the batch is exhausted.
        self._batch_end: int | None = None
        self._done = False

    def __iter__(self) -> BatchUnpacker:
        return self

    def __next__(self) -> FetchedRecord:  # aiokafka's ``getone``, through ``__next__``
        taken = self.take(1)
        if not taken:
            raise StopIteration
        return taken[0]

    def take(self, limit: int | None) -> list[FetchedRecord]:
        """Up to ``limit`` records (None: all); fewer only at the end of the fetch."""
        out: list[FetchedRecord] = []
        if limit is not None and limit < 1:
            limit = 1  # as aiokafka's getall, which takes a record before it checks the limit
        while True:
            ready, at = self._ready, self._at
            if at < len(ready):
                if limit is None:
                    chunk = ready[at:] if at else ready
                else:
                    chunk = ready[at : at + limit - len(out)]
                at += len(chunk)
                if at == len(ready):  # exhausted: keep no reference to a list handed over
                    self._ready, self._at = [], 0
                else:
                    self._at = at
                self._owner.next_fetch_offset = chunk[-1][2] + 1
                if out:
                    out += chunk
                else:
                    out = chunk
                if limit is not None and len(out) >= limit:
                    return out
            if self._done or not self._fill():
                self._done = True
                return out

    def _fill(self) -> bool:
        """Unpack the next batch with records to hand over; False when there is none."""
        owner = self._owner
        if self._batch_end is not None:
            owner.next_fetch_offset = self._batch_end
            self._batch_end = None
        records = owner._records
        topic, partition = self._topic, self._partition
        new = tuple.__new__
        corrupt = self._corrupt
        try:
            while records.has_next():
                batch = records.next_batch()
                if owner._check_crcs and (
                    not batch.validate_crc() if corrupt is None else batch.base_offset in corrupt
                ):
                    raise CorruptRecordException(
                        f"Invalid CRC - {TopicPartition(topic, partition)}"
                    )
                if owner._isolation_level == READ_COMMITTED and batch.producer_id is not None:
                    owner._consume_aborted_up_to(batch.base_offset)
                    if batch.is_control_batch and owner._contains_abort_marker(batch):
                        owner._aborted_producers.discard(batch.producer_id)
                    if batch.is_transactional and batch.producer_id in owner._aborted_producers:
                        owner.next_fetch_offset = batch.next_offset
                        continue
                if batch.is_control_batch:
                    owner.next_fetch_offset = batch.next_offset
                    continue
                # ``record.headers`` is a new list on every access: read once, and an empty
                # one becomes the shared empty tuple.
                ready = [
                    new(
                        FetchedRecord,
                        (
                            topic,
                            partition,
                            record.offset,
                            record.timestamp,
                            record.key,
                            record.value,
                            tuple(headers) if (headers := record.headers) else _NO_HEADERS,
                        ),
                    )
                    for record in batch
                ]
                floor = owner.next_fetch_offset
                if ready and ready[0][2] < floor:  # a compressed batch read from its start
                    ready = [r for r in ready if r[2] >= floor]
                if ready:
                    self._ready, self._at, self._batch_end = ready, 0, batch.next_offset
                    return True
                owner.next_fetch_offset = batch.next_offset
        except BaseException:
            self._done = True  # as aiokafka's generator, closed by what it raised
            raise
        return False


def lean_getall(result: Any) -> Callable[[int | None], list[Any]]:
    """``FetchResult.getall`` for one fetch result, taking its records a batch at a time.

    aiokafka's ``getall`` takes each record through ``PartitionRecords.__next__`` (a Python
    call around ``next`` on the generator) and appends it under a Python loop that checks
    ``max_records``. Here :meth:`BatchUnpacker.take` hands over slices of unpacked batches.
    It keeps the positions as aiokafka's generator does, so the position stored afterwards is
    the same as aiokafka's. A short take means the fetch ended: the result is done, as
    aiokafka marks it when ``__next__`` raises ``StopIteration``.
    """

    def getall(max_records: int | None = None) -> list[Any]:
        if not result.check_assignment(result._topic_partition) or not result.has_more():
            return []
        records = result._partition_records
        unpacker: BatchUnpacker | None = records._records_iterator
        if unpacker is None:  # ended under aiokafka's own ``__next__`` (``getone``)
            result._update_position()
            result._partition_records = None
            return []
        if max_records is not None and max_records < 1:
            max_records = 1  # aiokafka's getall(0) hands over one record too
        taken = unpacker.take(max_records)
        result._update_position()
        if max_records is None or len(taken) < max_records:
            records._records_iterator = None  # as aiokafka's ``__next__`` does at the end
            result._partition_records = None
        return taken

    return getall


class _LeanFetchResults(OrderedDict[Any, Any]):
    """The fetcher's ``_records``: each fetch result stored here unpacks its records with
    :class:`BatchUnpacker`, and hands them over with :func:`lean_getall`."""

    def __setitem__(self, tp: Any, result: Any) -> None:
        records = getattr(result, "_partition_records", None)
        if records is not None:
            # aiokafka's generator has not started yet (the fetcher stores a result before
            # anything reads it): close it and put the unpacker in its place.
            iterator = records._records_iterator
            if isinstance(iterator, GeneratorType) and getgeneratorstate(iterator) == GEN_CREATED:
                iterator.close()
                corrupt = None
                if _last_made[0] is records._records and records._check_crcs:
                    corrupt = corrupt_batches(_last_made[1])
                records._records_iterator = BatchUnpacker(records, tp, corrupt)
                result.getall = lean_getall(result)
        _last_made[0] = _last_made[1] = None
        super().__setitem__(tp, result)


def lean_records(fetcher: Any) -> bool:
    """Make ``fetcher`` (aiokafka 0.14's ``Fetcher``) hand out :class:`FetchedRecord`; False,
    and nothing changed, when it has deserializers (their output is not bytes)."""
    if fetcher._key_deserializer is not None or fetcher._value_deserializer is not None:
        return False
    fetcher._records = _LeanFetchResults(fetcher._records)
    # Every fetcher of the process makes its record sets through it (one module name); for
    # the others it is aiokafka's MemoryRecords and one remembered reference, no more.
    aiokafka_fetcher.MemoryRecords = _memory_records
    return True
