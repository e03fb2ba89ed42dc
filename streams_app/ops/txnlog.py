"""Records of ``__transaction_state``: how a transaction coordinator logs each state change.

Every change of a transactional id's metadata (a new producer epoch, a partition added, commit
prepared, commit complete, ...) is written to partition ``abs(hash(id)) % partitions`` of the
compacted topic ``__transaction_state`` (``streams_app/kafka/placement.py``). Reading that
partition shows the history the seed document prints with Kafka's
``TransactionLogMessageFormatter``: ``Ongoing -> PrepareCommit -> CompleteCommit``. Compaction
keeps only the latest record per id once a segment is cleaned, so older history may be gone.

Formats (``transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}
.json`` of Apache Kafka 4.x):

- key: ``version int16`` (0) then ``TransactionalId`` as an int16-length string;
- value: ``version int16`` then, for v0, ``ProducerId int64, ProducerEpoch int16,
  TransactionTimeoutMs int32, TransactionStatus int8, TransactionPartitions (nullable array of
  {Topic string, PartitionIds []int32}), TransactionLastUpdateTimestampMs int64,
  TransactionStartTimestampMs int64``; v1 is the same in the flexible encoding (compact strings
  and arrays, tagged fields), with tagged fields PreviousProducerId (0), NextProducerId (1) and
  ClientTransactionVersion (2) at the end;
- a null value (tombstone): the id expired and was removed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: TransactionStatus ids (Kafka's TransactionState).
STATES = {
    0: "Empty",
    1: "Ongoing",
    2: "PrepareCommit",
    3: "PrepareAbort",
    4: "CompleteCommit",
    5: "CompleteAbort",
    6: "Dead",
    7: "PrepareEpochFence",
}
TRANSACTION_STATE_TOPIC = "__transaction_state"


class TxnLogDecodeError(ValueError):
    """A ``__transaction_state`` record this decoder does not understand."""


@dataclass(frozen=True)
class TxnLogEntry:
    """One logged state of a transactional id; ``state`` is None for a tombstone."""

    transactional_id: str
    offset: int
    state: str | None
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = -1
    partitions: tuple[tuple[str, int], ...] = ()
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0
    value_version: int = -1


class _Buf:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise TxnLogDecodeError("record ends in the middle of a field")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= len(self.data):
                raise TxnLogDecodeError("record ends in the middle of a varint")
            byte = self.data[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def raw(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise TxnLogDecodeError("record ends in the middle of a field")
        out = self.data[self.pos : self.pos + size]
        self.pos += size
        return out

    def string(self, compact: bool) -> str:
        size = self.uvarint() - 1 if compact else self.unpack(">h")
        if size < 0:
            raise TxnLogDecodeError("unexpected null string")
        return self.raw(size).decode("utf-8")

    def array_size(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.unpack(">i")

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.raw(self.uvarint())
        return out


def decode_key(key: bytes) -> str | None:
    """The transactional id of a ``__transaction_state`` key; None for other record types."""
    buf = _Buf(key)
    version = buf.unpack(">h")
    if version != 0:
        return None  # not a TransactionLogKey (no other type exists today)
    return buf.string(compact=False)


def decode_entry(key: bytes, value: bytes | None, offset: int) -> TxnLogEntry | None:
    """A decoded record, or None when the key is not a transaction log key."""
    transactional_id = decode_key(key)
    if transactional_id is None:
        return None
    if value is None:
        return TxnLogEntry(transactional_id, offset, None)
    buf = _Buf(value)
    version = buf.unpack(">h")
    if version not in (0, 1):
        raise TxnLogDecodeError(
            f"TransactionLogValue v{version} at offset {offset} is newer than this decoder (v0-v1)"
        )
    flexible = version >= 1
    producer_id = buf.unpack(">q")
    producer_epoch = buf.unpack(">h")
    timeout_ms = buf.unpack(">i")
    status = buf.unpack(">b")
    partitions: list[tuple[str, int]] = []
    topics = buf.array_size(flexible)
    for _ in range(max(topics, 0)):
        topic = buf.string(flexible)
        for _p in range(buf.array_size(flexible)):
            partitions.append((topic, buf.unpack(">i")))
        if flexible:
            buf.tags()
    last_update = buf.unpack(">q")
    start = buf.unpack(">q")
    tags = buf.tags() if flexible else {}

    def tagged(tag: int, fmt: str, default: int) -> int:
        raw = tags.get(tag)
        return int(struct.unpack(fmt, raw)[0]) if raw is not None else default

    return TxnLogEntry(
        transactional_id=transactional_id,
        offset=offset,
        state=STATES.get(status, f"Unknown({status})"),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        partitions=tuple(sorted(partitions)),
        last_update_ms=last_update,
        start_ms=start,
        previous_producer_id=tagged(0, ">q", -1),
        next_producer_id=tagged(1, ">q", -1),
        client_transaction_version=tagged(2, ">h", 0),
        value_version=version,
    )
