"""Kafka record batches (magic v2) decoded from the bytes a broker stores and serves.

aiokafka's consumer hides what an operator needs to see a transaction on a partition: it drops
control batches (the COMMIT/ABORT markers) and never exposes a batch's producer id, epoch or
transactional flag. This module reads the bytes themselves, as ``kafka-dump-log.sh
--deep-iteration`` reads a segment file (the wire format of a Fetch response is the file format):

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 | crc uint32 |
    attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
    producerId int64 | producerEpoch int16 | baseSequence int32 | recordCount int32 | records

The CRC (CRC-32C) covers everything from ``attributes`` to the end. Records of a compressed batch
are decompressed with aiokafka's codecs. A control batch holds one record whose key is
``version int16 | type int16`` (0 ABORT, 1 COMMIT) and whose value is ``version int16 |
coordinatorEpoch int32``. Record values and keys are kept as bytes and never printed by the tools.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from aiokafka import codec
from aiokafka.errors import UnsupportedCodecError
from aiokafka.record.util import calc_crc32c

_HEADER = struct.Struct(">qiiBIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
_LOG_OVERHEAD = 12  # baseOffset + batchLength

COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
}
_DECOMPRESS = {
    1: codec.gzip_decode,
    2: codec.snappy_decode,
    3: codec.lz4_decode,
    4: codec.zstd_decode,
}
_INT32_MAX = (1 << 31) - 1


class CorruptBatchError(ValueError):
    """The bytes are not a valid v2 record batch (or were cut in the middle of a record)."""


def _increment_sequence(sequence: int, increment: int) -> int:
    """Sequence numbers wrap from Int32.MAX to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


@dataclass(frozen=True)
class ControlMarker:
    """The content of a control record: an end-transaction marker, or another control type."""

    type: str
    version: int
    #: The transaction coordinator's epoch (end-transaction markers only, else -1).
    coordinator_epoch: int

    @property
    def is_end_txn(self) -> bool:
        return self.type in ("COMMIT", "ABORT")


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key_size: int
    value_size: int
    sequence: int
    header_keys: tuple[str, ...]
    key: bytes | None
    value: bytes | None
    #: Set for the record of a control batch.
    control: ControlMarker | None = None


@dataclass(frozen=True)
class RecordBatch:
    base_offset: int
    last_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    crc_valid: bool
    attributes: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int
    #: Bytes of the whole batch (header included), as in the log.
    size: int
    #: Byte position in what was parsed (the segment file, or a Fetch response).
    position: int
    records: tuple[Record, ...]
    #: Why ``records`` is empty although the batch has some (a codec that is not installed).
    records_error: str | None = None

    @property
    def compression(self) -> str:
        return COMPRESSION.get(self.attributes & 0x07, f"unknown({self.attributes & 0x07})")

    @property
    def timestamp_type(self) -> str:
        return "LogAppendTime" if self.attributes & 0x08 else "CreateTime"

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & 0x20)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.first_timestamp if self.attributes & 0x40 else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return _increment_sequence(self.base_sequence, self.last_offset - self.base_offset)

    @property
    def marker(self) -> ControlMarker | None:
        """The end-transaction marker of a control batch (COMMIT or ABORT), else None."""
        if not self.is_control or not self.records:
            return None
        control = self.records[0].control
        return control if control is not None and control.is_end_txn else None


class _Reader:
    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = memoryview(data)
        self.pos = pos

    def varint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise CorruptBatchError("varint runs past the end of the batch")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 63:
                raise CorruptBatchError("varint longer than 64 bits")

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise CorruptBatchError("a field runs past the end of the batch")
        out = bytes(self.data[self.pos : self.pos + size])
        self.pos += size
        return out

    def sized(self) -> bytes | None:
        size = self.varint()
        return None if size < 0 else self.take(size)

    def int8(self) -> int:
        return int(struct.unpack_from(">b", self.take(1))[0])


def _control(key: bytes | None, value: bytes | None) -> ControlMarker:
    if key is None or len(key) < 4:
        raise CorruptBatchError("a control record without a 4-byte key")
    version, type_id = struct.unpack(">hh", key[:4])
    name = CONTROL_TYPES.get(type_id, f"UNKNOWN({type_id})")
    epoch = -1
    if name in ("COMMIT", "ABORT") and value is not None and len(value) >= 6:
        epoch = struct.unpack(">hi", value[:6])[1]
    return ControlMarker(name, version, epoch)


def _records(
    body: bytes,
    count: int,
    base_offset: int,
    first_ts: int,
    max_ts: int,
    attributes: int,
    base_sequence: int,
) -> tuple[Record, ...]:
    reader = _Reader(body)
    log_append = bool(attributes & 0x08)
    is_control = bool(attributes & 0x20)
    out = []
    for _ in range(count):
        length = reader.varint()
        end = reader.pos + length
        reader.int8()  # record attributes (unused)
        ts_delta = reader.varint()
        offset_delta = reader.varint()
        key = reader.sized()
        value = reader.sized()
        headers = []
        for _h in range(reader.varint()):
            name = reader.sized()
            reader.sized()
            headers.append((name or b"").decode("utf-8", "replace"))
        if reader.pos != end:
            raise CorruptBatchError("a record's length does not match its fields")
        sequence = -1 if base_sequence < 0 else _increment_sequence(base_sequence, offset_delta)
        out.append(
            Record(
                offset=base_offset + offset_delta,
                timestamp=max_ts if log_append else first_ts + ts_delta,
                key_size=-1 if key is None else len(key),
                value_size=-1 if value is None else len(value),
                sequence=sequence,
                header_keys=tuple(headers),
                key=key,
                value=value,
                control=_control(key, value) if is_control else None,
            )
        )
    return tuple(out)


def parse_batches(
    data: bytes | memoryview, *, position: int = 0, deep: bool = True
) -> Iterator[RecordBatch]:
    """The complete batches in ``data``, in order. A batch cut short at the end (a Fetch stops at
    its byte limit) ends the iteration; a malformed one raises :class:`CorruptBatchError`.

    ``position`` is the byte position of ``data[0]`` in whatever it came from (0 for a segment
    file read from its start), so that batch positions match ``kafka-dump-log.sh``'s.
    ``deep=False`` skips decoding the records (headers only).
    """
    view = memoryview(data)
    pos = 0
    while pos + _LOG_OVERHEAD <= len(view):
        base_offset, length = struct.unpack_from(">qi", view, pos)
        size = _LOG_OVERHEAD + length
        if length < HEADER_SIZE - _LOG_OVERHEAD or pos + size > len(view):
            return  # the tail of a truncated fetch
        (
            _base,
            _length,
            leader_epoch,
            magic,
            crc,
            attributes,
            last_delta,
            first_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = _HEADER.unpack_from(view, pos)
        if magic != 2:
            raise CorruptBatchError(
                f"batch at offset {base_offset} has magic {magic}; only v2 batches are read"
            )
        crc_valid = calc_crc32c(bytes(view[pos + 21 : pos + size])) == crc
        records: tuple[Record, ...] = ()
        records_error = None
        if deep:
            body: bytes | None = bytes(view[pos + HEADER_SIZE : pos + size])
            codec_id = attributes & 0x07
            if codec_id:
                decompress = _DECOMPRESS.get(codec_id)
                if decompress is None:
                    raise CorruptBatchError(f"unknown compression {codec_id}")
                try:
                    body = decompress(body)
                except UnsupportedCodecError:
                    body = None
                    name = COMPRESSION[codec_id]
                    records_error = (
                        f"records not decoded: the {name} codec is not installed "
                        "(aiokafka's codecs need cramjam: pip install cramjam)"
                    )
            if body is not None:
                records = _records(
                    body, count, base_offset, first_ts, max_ts, attributes, base_sequence
                )
        yield RecordBatch(
            base_offset=base_offset,
            last_offset=base_offset + last_delta,
            partition_leader_epoch=leader_epoch,
            magic=magic,
            crc=crc,
            crc_valid=crc_valid,
            attributes=attributes,
            first_timestamp=first_ts,
            max_timestamp=max_ts,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            count=count,
            size=size,
            position=position + pos,
            records=records,
            records_error=records_error,
        )
        pos += size
