"""Our decoders and request structs on hand-made bytes: the record batch reader, the
``__transaction_state`` decoder, and the KIP-664 / WriteTxnMarkers structs against their specs.
(The real-broker agreement is in tests/ops: dump == DumpLogSegments.)"""

from __future__ import annotations

import struct

import pytest
from aiokafka.protocol.api import RequestHeader_v2
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from streams_app.kafka.placement import coordinator_partition, java_string_hash
from streams_app.kafka.txn_protocol import (
    AbortMarkerRequest,
    DescribeProducersResponse_v0,
    ListTransactionsRequest,
    ListTransactionsRequest_v0,
    ListTransactionsRequest_v1,
)
from streams_app.ops.records import CorruptBatchError, parse_batches
from streams_app.ops.render import duration, parse_duration, partitions
from streams_app.ops.txnlog import decode_entry


def built_batch(*, transactional: bool = True, compression: int = 0, sequence: int = 5) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=int(transactional),
        producer_id=42,
        producer_epoch=3,
        base_sequence=sequence,
        batch_size=1 << 16,
    )
    builder.append(0, timestamp=1000, key=b"k", value=b"value", headers=[("a", b"1")])
    builder.append(1, timestamp=1500, key=None, value=None, headers=[])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, 100)  # base offset, as the broker assigns it
    return bytes(data)


@pytest.mark.parametrize("compression", [0, 1])
def test_a_batch_reads_back_with_every_field(compression: int) -> None:
    # The CRC covers the bytes after it, not the base offset: rewriting it keeps the batch valid.
    (batch,) = parse_batches(built_batch(compression=compression))
    assert (batch.base_offset, batch.last_offset, batch.count) == (100, 101, 2)
    assert (batch.producer_id, batch.producer_epoch) == (42, 3)
    assert (batch.base_sequence, batch.last_sequence) == (5, 6)
    assert batch.is_transactional and not batch.is_control and batch.crc_valid
    assert batch.compression == {0: "none", 1: "gzip"}[compression]
    assert batch.max_timestamp == 1500
    first, second = batch.records
    assert (first.offset, first.timestamp, first.key_size, first.value_size) == (100, 1000, 1, 5)
    assert first.header_keys == ("a",) and first.sequence == 5
    assert (second.offset, second.key_size, second.value_size, second.sequence) == (101, -1, -1, 6)


def test_a_codec_that_is_not_installed_leaves_the_headers_readable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aiokafka.errors import UnsupportedCodecError

    from streams_app.ops import records

    def missing(payload: bytes) -> bytes:
        raise UnsupportedCodecError("no zstd")

    monkeypatch.setitem(records._DECOMPRESS, 1, missing)
    (batch,) = parse_batches(built_batch(compression=1))
    assert batch.records == () and batch.count == 2
    assert batch.records_error is not None
    assert "gzip codec is not installed" in batch.records_error


def test_sequences_wrap_like_kafka() -> None:
    (batch,) = parse_batches(built_batch(sequence=(1 << 31) - 1))
    assert batch.last_sequence == 0
    assert [r.sequence for r in batch.records] == [(1 << 31) - 1, 0]


def test_a_cut_batch_ends_the_iteration_and_a_flipped_bit_fails_the_crc() -> None:
    data = built_batch()
    assert list(parse_batches(data + data[:40])) != []
    assert len(list(parse_batches(data + data[:40]))) == 1
    corrupt = bytearray(data)
    corrupt[-1] ^= 0xFF
    (batch,) = parse_batches(bytes(corrupt), deep=False)
    assert not batch.crc_valid


def test_control_batches_carry_their_marker() -> None:
    # A COMMIT marker as a broker writes it: one record, key (version 0, type 1), value
    # (version 0, coordinator epoch 7); attributes: transactional + control.
    key = struct.pack(">hh", 0, 1)
    value = struct.pack(">hi", 0, 7)
    body = bytearray()
    record = bytes([0]) + b"\x00\x00" + bytes([len(key) * 2]) + key
    record += bytes([len(value) * 2]) + value + b"\x00"
    body += bytes([len(record) * 2]) + record
    header = struct.pack(">hiqqqhii", 0x30, 0, 10, 10, 42, 3, -1, 1)
    from aiokafka.record.util import calc_crc32c

    crc = calc_crc32c(header + bytes(body))
    length = 4 + 1 + 4 + len(header) + len(body)
    data = struct.pack(">qiiBI", 7, length, 0, 2, crc) + header + bytes(body)
    (batch,) = parse_batches(data)
    assert batch.is_control and batch.is_transactional and batch.crc_valid
    assert batch.marker is not None
    assert (batch.marker.type, batch.marker.coordinator_epoch) == ("COMMIT", 7)
    with pytest.raises(CorruptBatchError):
        list(parse_batches(data[:12] + b"\x00" * 4 + b"\x07" + data[17:]))


def test_java_string_hash_and_coordinator_partition() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("orders-3f9c1a2b") == int.from_bytes(
        (sum(ord(c) * 31 ** (14 - i) for i, c in enumerate("orders-3f9c1a2b")) % 2**32).to_bytes(
            4, "big"
        ),
        "big",
        signed=True,
    )
    assert coordinator_partition("hello", 50) == 99162322 % 50
    # Utils.abs(Integer.MIN_VALUE) is 0 in Kafka.
    assert coordinator_partition("polygenelubricants", 50) == 0


def _key(txn_id: str) -> bytes:
    raw = txn_id.encode()
    return struct.pack(">hh", 0, len(raw)) + raw


def test_transaction_log_values_v0_and_v1() -> None:
    v0 = (
        struct.pack(">hqhib", 0, 1000, 28, 60000, 2)
        + struct.pack(">i", 1)
        + struct.pack(">h", 4)
        + b"test"
        + struct.pack(">ii", 1, 1)
        + struct.pack(">qq", 1594967312712, 1594967312702)
    )
    entry = decode_entry(_key("t1"), v0, offset=3)
    assert entry is not None
    assert (entry.transactional_id, entry.state, entry.producer_id, entry.producer_epoch) == (
        "t1",
        "PrepareCommit",
        1000,
        28,
    )
    assert entry.partitions == (("test", 1),)
    assert (entry.last_update_ms, entry.start_ms, entry.timeout_ms) == (
        1594967312712,
        1594967312702,
        60000,
    )
    # v1: compact encoding and tagged fields (PreviousProducerId = 999, ClientTransactionVersion 2)
    v1 = (
        struct.pack(">hqhib", 1, 1000, 29, 60000, 4)
        + bytes([1])  # empty compact array (length + 1)
        + struct.pack(">qq", 5, 4)
        + bytes([2])
        + bytes([0, 8])
        + struct.pack(">q", 999)
        + bytes([2, 2])
        + struct.pack(">h", 2)
    )
    entry = decode_entry(_key("t1"), v1, offset=4)
    assert entry is not None
    assert (entry.state, entry.partitions, entry.previous_producer_id) == (
        "CompleteCommit",
        (),
        999,
    )
    assert entry.client_transaction_version == 2 and entry.next_producer_id == -1
    tombstone = decode_entry(_key("t1"), None, offset=5)
    assert tombstone is not None and tombstone.state is None


def test_list_transactions_uses_v1_only_where_the_broker_has_it() -> None:
    request = ListTransactionsRequest(["Ongoing"], [7], running_longer_than_ms=60_000)
    v1 = request.prepare({66: (0, 1)})
    assert type(v1) is ListTransactionsRequest_v1 and request.duration_filtered
    header = RequestHeader_v2(v1, correlation_id=1, client_id="c").encode()
    body = v1.encode()
    assert header[:4] == struct.pack(">hh", 66, 1)
    assert (
        body
        == b"\x02\x08Ongoing" + b"\x02" + struct.pack(">q", 7) + struct.pack(">q", 60_000) + b"\x00"
    )
    v0 = request.prepare({66: (0, 0)})
    assert type(v0) is ListTransactionsRequest_v0 and not request.duration_filtered


def test_abort_marker_request_bytes() -> None:
    request = AbortMarkerRequest(
        producer_id=5, producer_epoch=2, coordinator_epoch=-1, partitions=[("t", 3)]
    )
    body = request.prepare({27: (1, 2)}).encode()
    assert body == (
        b"\x02"  # one marker
        + struct.pack(">qh", 5, 2)
        + b"\x00"  # ABORT
        + b"\x02\x02t\x02"
        + struct.pack(">i", 3)
        + b"\x00"  # topic tags
        + struct.pack(">i", 0)  # coordinator epoch -1 becomes 0
        + b"\x00\x00"
    )
    with pytest.raises(Exception, match="WriteTxnMarkers needs API 27 v1"):
        request.prepare({27: (0, 0)})


def test_describe_producers_response_with_a_null_message() -> None:
    body = (
        struct.pack(">i", 0)
        + b"\x02\x02t"
        + b"\x02"
        + struct.pack(">ih", 3, 0)
        + b"\x00"  # null error message
        + b"\x02"
        + struct.pack(">qiiqiq", 9, 1, 4, 1234, 0, 17)
        + b"\x00\x00\x00\x00"
    )
    decoded = DescribeProducersResponse_v0.decode(body)
    (_name, parts, _tags) = decoded.topics[0]
    index, code, message, producers, _t = parts[0]
    assert (index, code, message) == (3, 0, None)
    assert producers[0][:6] == (9, 1, 4, 1234, 0, 17)


def test_durations_and_partitions_render() -> None:
    assert parse_duration("500ms") == 0.5
    assert parse_duration("5m") == 300 and parse_duration("2") == 2
    with pytest.raises(ValueError):
        parse_duration("soon")
    assert duration(850) == "850ms" and duration(12_300) == "12.3s" and duration(245_000) == "4m05s"
    assert partitions([("b", 1), ("a", 2), ("a", 0)]) == "a[0,2],b[1]"
