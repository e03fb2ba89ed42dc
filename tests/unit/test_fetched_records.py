"""The worker's consumer builds named tuples, not ``ConsumerRecord``s: same fields, same
records, aiokafka's skipping of aborted transactions intact (aiokafka's own fetch structures,
fed with record batches built by its own C builder)."""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any

import pytest
from aiokafka.consumer.fetcher import READ_COMMITTED, FetchResult, PartitionRecords
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import ConsumerRecord, TopicPartition

from streams_app.kafka import fetched
from streams_app.kafka.fetched import FetchedRecord, corrupt_batches, lean_records
from streams_app.transport.base import RecordLike

TP = TopicPartition("orders", 3)


def _builder(producer_id: int, *, txn: bool, base_sequence: int) -> DefaultRecordBatchBuilder:
    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=int(txn),
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )


def _batch(base_offset: int, count: int, *, producer_id: int = -1, txn: bool = False) -> bytes:
    builder = _builder(producer_id, txn=txn, base_sequence=0 if producer_id >= 0 else -1)
    for i in range(count):
        headers = [("src", b"%d" % i)] if i % 2 else []
        key = None if i == 2 else b"k%d" % i
        value = None if i == 3 else b"v%d" % i
        builder.append(i, timestamp=1_000 + i, key=key, value=value, headers=headers)
    raw = bytearray(builder.build())
    raw[0:8] = base_offset.to_bytes(8, "big")  # the broker assigns offsets; so do we here
    return bytes(raw)


class _Fetcher:
    """The two attributes of aiokafka's ``Fetcher`` that :func:`lean_records` touches."""

    def __init__(self, key_deserializer: Any = None) -> None:
        self._key_deserializer = key_deserializer
        self._value_deserializer = None
        self._records: OrderedDict[TopicPartition, Any] = OrderedDict()


def _store(fetcher: _Fetcher, data: bytes, aborted: list[tuple[int, int]] | None = None) -> None:
    records = PartitionRecords(
        TP, MemoryRecords(data), aborted, 0, None, None, True, READ_COMMITTED
    )
    fetcher._records[TP] = FetchResult(TP, assignment=None, partition_records=records, backoff=0)


def _drain(fetcher: _Fetcher) -> list[Any]:
    return list(fetcher._records[TP]._partition_records)


def test_records_are_named_tuples_with_the_consumer_record_fields() -> None:
    lean, plain = _Fetcher(), _Fetcher()
    assert lean_records(lean)
    data = _batch(40, 6)
    _store(lean, data)
    _store(plain, data)
    got, expected = _drain(lean), _drain(plain)
    assert all(type(r) is FetchedRecord for r in got)
    assert all(type(r) is ConsumerRecord for r in expected)
    fields = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
    assert [tuple(getattr(r, f) for f in fields) for r in got] == [
        tuple(getattr(r, f) for f in fields) for r in expected
    ]
    assert [r.offset for r in got] == list(range(40, 46))
    assert got[2].key is None and got[3].value is None
    assert got[1].headers == (("src", b"1"),) and got[0].headers == ()
    record: RecordLike = got[0]
    assert record.topic == "orders" and record.partition == 3


def test_aborted_transactions_are_still_skipped() -> None:
    fetcher = _Fetcher()
    lean_records(fetcher)
    data = _batch(0, 3, producer_id=7, txn=True) + _batch(3, 3, producer_id=8, txn=True)
    _store(fetcher, data, aborted=[(7, 0)])
    assert [r.offset for r in _drain(fetcher)] == [3, 4, 5]


def test_a_fetcher_with_deserializers_is_left_alone() -> None:
    fetcher = _Fetcher(key_deserializer=bytes.decode)
    assert not lean_records(fetcher)
    assert type(fetcher._records) is OrderedDict


class _Position:
    """aiokafka's partition state: not paused, at the fetch's offset; updates recorded."""

    paused = False

    def __init__(self) -> None:
        self.position = 0
        self.offsets: list[int] = []

    def consumed_to(self, offset: int) -> None:
        self.position = offset
        self.offsets.append(offset)


class _Assignment:
    """What ``FetchResult`` reads of aiokafka's assignment: active, and the partition's
    state."""

    active = True

    def __init__(self) -> None:
        self.position = _Position()

    def state_value(self, _tp: TopicPartition) -> _Position:
        return self.position


def _result(
    data: bytes, aborted: list[tuple[int, int]] | None, lean: bool, fetch_offset: int = 0
) -> Any:
    fetcher = _Fetcher()
    if lean:
        lean_records(fetcher)
    # The lean fetcher's record sets are made as aiokafka's fetcher makes them once it is
    # installed: through the wrapper that remembers their bytes for the CRC check.
    made = fetched._memory_records(data) if lean else MemoryRecords(data)
    records = PartitionRecords(TP, made, aborted, fetch_offset, None, None, True, READ_COMMITTED)
    fetcher._records[TP] = FetchResult(
        TP, assignment=_Assignment(), partition_records=records, backoff=0
    )
    return fetcher._records[TP]


def _marker(base_offset: int, producer_id: int, *, abort: bool) -> bytes:
    """A transaction marker as the coordinator writes it: a control batch of one record whose
    key says abort (type 0) or commit (type 1); the CRC recomputed after the control bit."""
    builder = _builder(producer_id, txn=True, base_sequence=-1)
    builder.append(
        0, timestamp=5_000, key=struct.pack(">HH", 0, 0 if abort else 1), value=b"", headers=[]
    )
    raw = bytearray(builder.build())
    raw[0:8] = base_offset.to_bytes(8, "big")
    raw[22] |= 0x20  # attributes (bytes 21-22): the control bit
    raw[17:21] = calc_crc32c(bytes(raw[21:])).to_bytes(4, "big")
    return bytes(raw)


def _compacted(base_offset: int, count: int, gone: int) -> bytes:
    """A batch whose last ``gone`` records were compacted away: its last offset delta still
    counts them, so the next batch starts ``gone`` offsets after its last record."""
    raw = bytearray(_batch(base_offset, count))
    raw[23:27] = (count - 1 + gone).to_bytes(4, "big")  # lastOffsetDelta
    raw[17:21] = calc_crc32c(bytes(raw[21:])).to_bytes(4, "big")
    return bytes(raw)


def _takes(result: Any, limit: int | None) -> list[tuple[list[int], bool]]:
    takes = []
    for _ in range(40):
        taken = result.getall(limit)
        takes.append(([r.offset for r in taken], result.has_more()))
        if not result.has_more():
            break
    return takes


def _same_takes(data: bytes, aborted: list[tuple[int, int]]) -> list[int]:
    """The lean ``getall`` against aiokafka's on ``data`` for every limit: the same offsets
    take by take, the same positions stored, the result done after the same take. Returns the
    offsets handed over."""
    handed: list[int] = []
    for limit in (None, 0, 1, 2, 3, 4, 8, 9, 100):
        lean, plain = _result(data, aborted, True), _result(data, aborted, False)
        assert "getall" in vars(lean) and "getall" not in vars(plain)
        lean_takes, plain_takes = _takes(lean, limit), _takes(plain, limit)
        assert lean_takes == plain_takes, limit
        assert lean._assignment.position.offsets == plain._assignment.position.offsets, limit
        assert not lean.has_more()
        assert lean._assignment.position.position == plain._assignment.position.position
        handed = [o for t, _ in lean_takes for o in t]
    return handed


def test_getall_hands_over_what_aiokafkas_does_take_by_take() -> None:
    """An aborted transaction, a committed one, a plain batch and a batch with compacted
    records at its end (the position moves past them at the end)."""
    data = (
        _batch(0, 3, producer_id=7, txn=True)
        + _batch(3, 4, producer_id=8, txn=True)
        + _batch(7, 5)
        + _compacted(12, 3, gone=4)
    )
    assert _same_takes(data, [(7, 0)]) == list(range(3, 15))


def test_getall_after_markers_is_aiokafkas() -> None:
    """Control batches (an abort marker, a commit marker) are skipped and move the position;
    after its abort marker the same producer's next transaction is read again."""
    data = (
        _batch(0, 3, producer_id=7, txn=True)
        + _marker(3, 7, abort=True)
        + _batch(4, 2, producer_id=7, txn=True)
        + _marker(6, 7, abort=False)
        + _batch(7, 3)
    )
    assert _same_takes(data, [(7, 0)]) == [4, 5, 7, 8, 9]


def test_records_one_at_a_time_and_below_the_fetch_offset() -> None:
    """aiokafka's ``getone`` path (``PartitionRecords.__next__``) gets the same records; a
    fetch that starts inside a batch skips the records below its offset, as aiokafka does."""
    data = _batch(10, 5) + _batch(15, 2)
    streams = []
    for lean in (True, False):
        records = _result(data, None, lean, fetch_offset=12)._partition_records
        stream = []
        for record in records:
            stream.append((record.offset, records.next_fetch_offset))
        streams.append((stream, records.next_fetch_offset))
    assert streams[0] == streams[1]
    assert [o for o, _ in streams[0][0]] == [12, 13, 14, 15, 16]


def test_a_corrupt_batch_raises_as_aiokafka_does() -> None:
    """A batch whose CRC does not match raises aiokafka's ``CorruptRecordException`` (the
    records before it were not handed over: the position stays for the fetch to repeat)."""
    good, bad = _batch(0, 2), bytearray(_batch(2, 2))
    bad[-1] ^= 0xFF
    for lean in (True, False):
        result = _result(good + bytes(bad), None, lean)
        with pytest.raises(CorruptRecordException):
            result.getall(None)
        assert result._assignment.position.offsets == []


def test_crcs_are_checked_per_fetch_with_the_cpu_instruction() -> None:
    """The lean fetcher checks every batch of a fetch with the ``crc32c`` package, not with
    aiokafka's ``validate_crc``; it finds the batch aiokafka finds (only that one), and the
    records before the corrupt batch are handed over as aiokafka hands them over."""
    import aiokafka.consumer.fetcher as aiokafka_fetcher

    first, second, third = _batch(0, 2), bytearray(_batch(2, 3)), _batch(5, 1)
    second[40] ^= 0x01  # inside the CRC's range (from byte 21): the max timestamp
    data = first + bytes(second) + third
    assert corrupt_batches(first + third) == frozenset()
    assert corrupt_batches(data) == {2}
    assert corrupt_batches(data[:-5]) == {2}  # a batch cut off at the end: not checked
    legacy = bytearray(first)
    legacy[16] = 1  # magic v1: left to aiokafka
    assert corrupt_batches(bytes(legacy)) is None

    fetcher = _Fetcher()
    lean_records(fetcher)
    assert aiokafka_fetcher.MemoryRecords is fetched._memory_records  # what the fetcher calls
    result = _result(data, None, True)
    unpacker = result._partition_records._records_iterator
    assert unpacker._corrupt == {2}  # decided from the bytes, not by validate_crc
    assert [r.offset for r in result.getall(2)] == [0, 1]
    with pytest.raises(CorruptRecordException):
        result.getall(None)
    plain = _result(data, None, False)
    assert [r.offset for r in plain.getall(2)] == [0, 1]
    with pytest.raises(CorruptRecordException):
        plain.getall(None)


def test_a_take_of_none_and_a_result_stored_again() -> None:
    """``getall(0)`` hands over one record, as aiokafka's does (it checks the limit after
    taking one); a result stored again, or one whose records aiokafka already began, keeps
    what it has."""
    data = _batch(0, 4)
    assert _same_takes(data, []) == [0, 1, 2, 3]
    for lean in (True, False):
        result = _result(data, None, lean)
        assert [r.offset for r in result.getall(0)] == [0] and result.has_more()
        assert [r.offset for r in result.getall(-1)] == [1]
        assert [r.offset for r in result.getall(2)] == [2, 3]
        assert result.getall(0) == [] and not result.has_more()
    fetcher = _Fetcher()
    lean_records(fetcher)
    records = PartitionRecords(TP, MemoryRecords(data), None, 0, None, None, True, READ_COMMITTED)
    assert next(records).offset == 0  # aiokafka's generator has begun
    fetcher._records[TP] = FetchResult(
        TP, assignment=_Assignment(), partition_records=records, backoff=0
    )
    result = fetcher._records[TP]
    result._assignment.position.position = 1  # where that record left it
    assert "getall" not in vars(result)  # left to aiokafka: nothing lost
    assert [r.offset for r in result.getall(None)] == [1, 2, 3]
    stored = _result(data, None, True)
    fetcher._records[TP] = stored  # the same result stored again
    assert [r.offset for r in stored.getall(None)] == [0, 1, 2, 3]
