"""Fetched records as plain named tuples instead of aiokafka's ``ConsumerRecord`` dataclass.

aiokafka turns every record of a fetch response into a ``ConsumerRecord``: a dataclass of
eleven fields built by a Python ``__init__``, after computing both payload sizes. That cost
0.66 us a record against 0.12 us for iterating the record batch itself; a worker draining a
backlog spends about 10 us on a record in all, so the dataclass was some 5% of it. The runtime
reads seven of those fields (:class:`~streams_app.transport.base.RecordLike`); a named tuple of
those seven, built with ``tuple.__new__``, costs 0.39 us (measured with aiokafka's C record
batches, 1,000 records of 100 bytes).

aiokafka builds records in ``PartitionRecords._consumer_record`` and constructs
``PartitionRecords`` by name inside its fetcher, so the hook is the one place where each new
``PartitionRecords`` is stored: the fetcher's ``_records`` map. Only the consumers that install
it (:class:`~streams_app.kafka.consumer.StableConsumer`) change; other aiokafka consumers in the
process keep their ``ConsumerRecord``. Aborted transactions, control batches and positions stay
aiokafka's: only the last step, one record to one object, is replaced.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from itertools import islice
from typing import Any, NamedTuple

from aiokafka.structs import TopicPartition


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


def record_builder(tp: TopicPartition) -> Callable[[Any, Any], FetchedRecord]:
    """``PartitionRecords._consumer_record`` for one partition, without deserializers."""
    topic, partition = tp
    new = tuple.__new__

    def build(_tp: Any, record: Any) -> FetchedRecord:
        headers = record.headers  # a new list on every access: read it once
        return new(
            FetchedRecord,
            (
                topic,
                partition,
                record.offset,
                record.timestamp,
                record.key,
                record.value,
                tuple(headers) if headers else _NO_HEADERS,
            ),
        )

    return build


def lean_getall(result: Any) -> Callable[[int | None], list[Any]]:
    """``FetchResult.getall`` for one fetch result, draining its records' generator in C.

    aiokafka's ``getall`` takes each record through ``PartitionRecords.__next__`` (a Python
    call around ``next`` on the generator) and appends it under a Python loop that checks
    ``max_records``: two Python-level steps a record on top of the generator's own. Here
    ``list`` (with ``islice`` for a limit) drains the generator directly. The generator is
    aiokafka's, untouched: aborted transactions, control batches and CRC checks are its own,
    and it moves ``next_fetch_offset`` past each record before yielding it, so the position
    stored afterwards is the same as aiokafka's. A short take means the generator ended:
    the result is done, as aiokafka marks it when ``__next__`` raises ``StopIteration``.
    """

    def getall(max_records: int | None = None) -> list[Any]:
        if not result.check_assignment(result._topic_partition) or not result.has_more():
            return []
        records = result._partition_records
        iterator = records._records_iterator
        if iterator is None:  # ended under aiokafka's own ``__next__`` (``getone``)
            result._update_position()
            result._partition_records = None
            return []
        taken = list(iterator if max_records is None else islice(iterator, max_records))
        result._update_position()
        if max_records is None or len(taken) < max_records:
            records._records_iterator = None  # as aiokafka's ``__next__`` does at the end
            result._partition_records = None
        return taken

    return getall


class _LeanFetchResults(OrderedDict[Any, Any]):
    """The fetcher's ``_records``: each fetch result stored here builds :class:`FetchedRecord`,
    and hands its records over with :func:`lean_getall`."""

    def __setitem__(self, tp: Any, result: Any) -> None:
        records = getattr(result, "_partition_records", None)
        if records is not None:
            # Instance attributes shadow the methods: the records' generator looks
            # ``_consumer_record`` up on every record, and has not started yet; the fetcher
            # calls ``getall`` on the result.
            records._consumer_record = record_builder(tp)
            result.getall = lean_getall(result)
        super().__setitem__(tp, result)


def lean_records(fetcher: Any) -> bool:
    """Make ``fetcher`` (aiokafka 0.14's ``Fetcher``) hand out :class:`FetchedRecord`; False,
    and nothing changed, when it has deserializers (their output is not bytes)."""
    if fetcher._key_deserializer is not None or fetcher._value_deserializer is not None:
        return False
    fetcher._records = _LeanFetchResults(fetcher._records)
    return True
