"""The pieces the join stores share: composite keys, tagged values, and a persisted stream time.

The join stores (:mod:`~streams_app.state.versioned`, :mod:`~streams_app.state.join_windows`,
:mod:`~streams_app.state.unmatched`) are ordinary table partitions: one key-value map per
partition, changelogged key by key, written only after the Kafka transaction commits (see
:mod:`streams_app.state.base`). What makes them more than a dict is the *shape of their keys*:
a user key together with a time (and for duplicates, a sequence number), encoded so that byte
order is the order the store is read in, and the store key is the changelog key. Restore then
needs nothing new: it copies changelog bytes into the store, as for any table.

Times in keys are integer milliseconds offset by 2**63 and packed big-endian, so unsigned byte
order is numeric order, negative times included (as :mod:`~streams_app.state.windowed` does).
A user key inside a composite key is ``u32 length | the key's bytes``, so ``"a"`` is never a
prefix of ``"ab"``.

**The stream time entry.** Each join store keeps the stream time it has observed (the largest
record time it was given) in one entry of its own, under the empty key, in the same
transaction as the writes it governs. Kafka Streams keeps these times in memory and recovers
the windowed and versioned stores' from the timestamps of the changelog records it restores;
the outer-join "time tracker" it does not recover at all. Here the time is a value like any
other: a crash, an abort or a move to another worker finds exactly the time that committed with
the store's contents, without reading the changelog's timestamps, and restore stays a byte
copy. It costs one changelog record per store partition per commit that moved it. The empty
key cannot collide with an entry: every entry key is at least 8 bytes.
"""

from __future__ import annotations

import struct
from typing import Any

from streams_app.codecs import Codec, DecodeError
from streams_app.state.base import PartitionTransaction
from streams_app.state.sizing import shared

#: PendingKeys prunes no fewer hints than this at a time (amortised: a pruning costs one pass).
_PRUNE_AT_LEAST = 1024

#: No record seen yet: below every timestamp, so ``NO_TIME - retention`` expires nothing.
NO_TIME = -(1 << 63)

_LEN = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_TIME_OFFSET = 1 << 63
#: What :func:`pack_time` adds to a time (for codecs that pack a time with other fields).
TIME_OFFSET = _TIME_OFFSET

#: The decoded key of the stream time entry, and its bytes.
STREAM_TIME: Any = shared(object())
META_KEY = b""

# Value tags: the first byte of every stored value.
TAG_NONE = 0  # a value that is None (a tombstone version, a null record value)
TAG_VALUE = 1  # the value codec's bytes follow (a join's left side)
TAG_OTHER = 2  # the second value codec's bytes follow (a join's right side)
TAG_TIME = 3  # an i64 stream time follows (the stream time entry)


def pack_time(ms: int) -> bytes:
    """A time as 8 bytes whose unsigned order is numeric order."""
    return _U64.pack(ms + _TIME_OFFSET)


def unpack_time(data: bytes, offset: int = 0) -> int:
    return int(_U64.unpack_from(data, offset)[0]) - _TIME_OFFSET


def pack_u64(n: int) -> bytes:
    return _U64.pack(n)


def unpack_u64(data: bytes, offset: int = 0) -> int:
    return int(_U64.unpack_from(data, offset)[0])


def key_prefix(key_codec: Codec, key: Any) -> bytes:
    """``u32 length | the key's bytes``: the part of a composite key that names the user key."""
    raw = key_codec.dumps(key)
    return _LEN.pack(len(raw)) + raw


def read_key(key_codec: Codec, data: bytes, offset: int) -> tuple[Any, int]:
    """The user key at ``offset`` of a composite key, and the offset just after it."""
    if len(data) < offset + _LEN.size:
        raise DecodeError("not a composite key: too short")
    (length,) = _LEN.unpack_from(data, offset)
    start = offset + _LEN.size
    end = start + length
    if len(data) < end:
        raise DecodeError("not a composite key: length does not match")
    return key_codec.loads(data[start:end]), end


class StreamTime:
    """The stream time entry's value (see the module doc)."""

    __slots__ = ("ms",)

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StreamTime) and other.ms == self.ms

    def __hash__(self) -> int:
        return hash(self.ms)

    def __repr__(self) -> str:
        return f"StreamTime({self.ms})"


class Encoded:
    """A pending value whose encoding is known already: the bytes of the record it came in
    (``raw``, what the same value codec decoded it from). The codec writes those bytes instead of
    encoding the value again, which for a JSON record is most of what buffering it costs; a view
    that reads pending values back unwraps :attr:`value`."""

    __slots__ = ("raw", "value")

    def __init__(self, value: Any, raw: bytes) -> None:
        self.value = value
        self.raw = raw


_VALUE_TAG = bytes((TAG_VALUE,))


class TaggedValueCodec:
    """Stored values: ``None``, a value, or the stream time entry's :class:`StreamTime`.

    One leading tag byte says which (the module's ``TAG_*``), so ``None`` is a value like any
    other (a versioned table's tombstone version is an entry, not a deletion). An
    :class:`Encoded` value is written from its record's bytes.
    """

    def __init__(self, value_codec: Codec) -> None:
        self.value_codec = value_codec

    def dumps(self, obj: Any) -> bytes:
        if type(obj) is Encoded:
            return _VALUE_TAG + obj.raw
        if obj is None:
            return bytes((TAG_NONE,))
        if isinstance(obj, StreamTime):
            return pack_stream_time(obj)
        return bytes((TAG_VALUE,)) + self.value_codec.dumps(obj)

    def loads(self, data: bytes) -> Any:
        tag = data[0] if data else -1
        if tag == TAG_VALUE:
            return self.value_codec.loads(data[1:])
        if tag == TAG_NONE:
            return None
        return unpack_stream_time(data)


def pack_stream_time(entry: StreamTime) -> bytes:
    return bytes((TAG_TIME,)) + _I64.pack(entry.ms)


def unpack_stream_time(data: bytes) -> StreamTime:
    if len(data) != 1 + _I64.size or data[0] != TAG_TIME:
        raise DecodeError("not a stored value: unknown tag or length")
    return StreamTime(int(_I64.unpack_from(data, 1)[0]))


def read_stream_time(tx: PartitionTransaction) -> int:
    """The stream time the store's entry holds (pending writes first), NO_TIME if none."""
    entry = tx.get(STREAM_TIME, None)
    return entry.ms if isinstance(entry, StreamTime) else NO_TIME


def write_stream_time(tx: PartitionTransaction, ms: int) -> None:
    tx.set(STREAM_TIME, StreamTime(ms))


class PendingKeys:
    """Which composite entries of each user key the open transaction wrote or deleted.

    A store's committed entries are found by a range scan; the transaction's pending writes
    are a dict keyed by decoded composite keys, which a scan cannot see. This index lets a read
    of one user key find its pending entries without looking through every pending write (the
    same idea as :class:`~streams_app.state.windowed.WindowedTransaction`'s hints). The
    transaction stays the authority on values: an entry listed here is read back from it.

    A hint outlives its write when that write commits (the scan finds it then: the hint is
    redundant, never wrong). The hints are dropped as soon as the transaction holds no pending
    writes, and those of committed writes are pruned whenever the hints have grown to twice
    what was pending at the last pruning: a worker that goes on processing while its commits
    are in flight may never see its transaction empty, and its hints must not grow with
    everything it ever buffered.
    """

    __slots__ = ("_count", "_keys", "_limit", "_log", "tx")

    def __init__(self, tx: PartitionTransaction) -> None:
        self.tx = tx
        #: user key -> composite keys written or deleted in the open transaction.
        self._keys: dict[Any, dict[Any, None]] = {}
        #: Touches not in ``_keys`` yet, in order: they are indexed when a read asks. A store
        #: that is written for every record and rarely read (the many side of a one-to-many
        #: join) pays a list append per write instead of an index update.
        self._log: list[tuple[Any, Any]] = []
        #: Touches since the last pruning (at least the composite keys held), and how many
        #: trigger the next one.
        self._count = 0
        self._limit = _PRUNE_AT_LEAST

    def fresh(self) -> None:
        if (self._keys or self._log) and not self.tx.dirty:
            self._keys.clear()
            self._log = []
            self._count = 0

    def touch(self, user_key: Any, composite: Any) -> None:
        """``composite`` (an entry of ``user_key``) was just written or deleted."""
        self._log.append((user_key, composite))
        self._count += 1
        if self._count > self._limit:
            self._prune()

    def _index(self) -> dict[Any, dict[Any, None]]:
        """The index, with the touches logged since the last read in it."""
        keys = self._keys
        if self._log:
            for user_key, composite in self._log:
                entries = keys.get(user_key)
                if entries is None:
                    keys[user_key] = {composite: None}
                else:
                    entries[composite] = None
            self._log = []
        return keys

    def _prune(self) -> None:
        """Keep the hints of entries still pending only (the others committed)."""
        pending = self.tx.pending_keys()
        kept: dict[Any, dict[Any, None]] = {}
        log: list[tuple[Any, Any]] = []
        count = 0
        if pending:
            log = [touched for touched in self._log if touched[1] in pending]
            count = len(log)
            for user_key, entries in self._keys.items():
                live = {c: None for c in entries if c in pending}
                if live:
                    kept[user_key] = live
                    count += len(live)
        self._keys = kept
        self._log = log
        self._count = count
        self._limit = 2 * count + _PRUNE_AT_LEAST

    def of(self, user_key: Any) -> dict[Any, None]:
        self.fresh()
        return self._index().get(user_key, {})

    def all(self) -> list[Any]:
        """Every composite key written or deleted in the open transaction."""
        self.fresh()
        return [c for entries in self._index().values() for c in entries]
