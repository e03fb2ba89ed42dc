"""Records of a left or outer stream-stream join still waiting for a partner.

A left join emits ``(left, None)`` for a left record that found no right record in its window;
an outer join does so for either side. Emitting it when the record arrives would be wrong
whenever its partner arrives later (a *spurious* null, KAFKA-10847). So an unmatched record
waits here until its window closes, and its null is emitted only then, and only if nothing
matched it meanwhile. This is the store of that waiting room, as a view over a task's
:class:`~streams_app.state.base.PartitionTransaction`.

**When a record's window closes.** A left record at ``t`` matches right records in
``[t - before, t + after]``; a right record at ``t`` matches left records in
``[t - after, t + before]``. Its window is closed once the join's stream time passes its end
plus the grace period: at ``close = t + after + grace`` (left) or ``t + before + grace``
(right), the record is *due* when ``stream time > close`` (Kafka Streams'
``isOuterJoinWindowOpen``). The view is built with the two distances (``close_after``).

**Layout.** ``u64 close | u64 timestamp | u8 side | u32 length | key | u64 seq``
(:class:`UnmatchedKeyCodec`): entries sort by the time they fall due, so :meth:`due` reads
exactly the due ones with one range scan from the start. Kafka Streams orders its store by the
record's *timestamp* instead and stops at the first record of each side whose window is still
open; with an asymmetric window (``before != after``) a left and a right record of the same
timestamp close at different times, which is one reason it holds some closed nulls back behind
open ones (docs/joins.md lists the others). ``seq`` is the number the record has in its side's
buffer (:mod:`streams_app.state.join_windows`), so a match removes exactly the entry it
matched. The value is the record's value, tagged with its side's codec.

**Stream time.** The join's stream time (the largest record time either side has seen, null
keys included, as Kafka Streams' shared time tracker) is the entry under the empty key
(:mod:`streams_app.state.composite`): committed with the entries it governs, so a restart
neither re-emits a null (its removal committed with the time that made it due) nor delays one.
Kafka Streams' tracker lives in memory and starts from nothing after a restart.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from streams_app.codecs import Codec, DecodeError
from streams_app.state.base import DELETED, PartitionTransaction
from streams_app.state.composite import (
    META_KEY,
    STREAM_TIME,
    TAG_NONE,
    TAG_OTHER,
    TAG_TIME,
    TAG_VALUE,
    StreamTime,
    key_prefix,
    pack_stream_time,
    pack_time,
    pack_u64,
    read_key,
    read_stream_time,
    unpack_stream_time,
    unpack_time,
    unpack_u64,
    write_stream_time,
)

LEFT = 0
RIGHT = 1
_SIDE_TAGS = (TAG_VALUE, TAG_OTHER)
_MISSING: Any = object()
_HEAD = struct.Struct(">QQB")


class Unmatched(NamedTuple):
    """A record waiting for a partner, or due for its null."""

    side: int
    key: Any
    timestamp: int
    seq: int
    value: Any


class UnmatchedKeyCodec:
    """``(close, timestamp, side, key, seq)`` <-> store and changelog key bytes."""

    name = "unmatched"

    def __init__(self, key_codec: Codec) -> None:
        self.key_codec = key_codec

    def dumps(self, obj: Any) -> bytes:
        if obj is STREAM_TIME:
            return META_KEY
        close, timestamp, side, key, seq = obj
        return (
            pack_time(close)
            + pack_time(timestamp)
            + bytes((side,))
            + key_prefix(self.key_codec, key)
            + pack_u64(seq)
        )

    def loads(self, data: bytes) -> Any:
        if data == META_KEY:
            return STREAM_TIME
        if len(data) < _HEAD.size:
            raise DecodeError("not an unmatched-record key: too short")
        side = data[16]
        if side not in (LEFT, RIGHT):
            raise DecodeError(f"not an unmatched-record key: side {side}")
        key, end = read_key(self.key_codec, data, _HEAD.size)
        if len(data) != end + 8:
            raise DecodeError("not an unmatched-record key: length does not match")
        return (unpack_time(data, 0), unpack_time(data, 8), side, key, unpack_u64(data, end))


class UnmatchedValueCodec:
    """``(side, value)`` <-> the side's tag and its codec's bytes; the stream time entry's
    :class:`~streams_app.state.composite.StreamTime` as the composite module encodes it."""

    def __init__(self, left: Codec, right: Codec) -> None:
        self.codecs = (left, right)

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, StreamTime):
            return pack_stream_time(obj)
        side, value = obj
        if value is None:
            return bytes((TAG_NONE, side))
        return bytes((_SIDE_TAGS[side],)) + self.codecs[side].dumps(value)

    def loads(self, data: bytes) -> Any:
        tag = data[0] if data else -1
        if tag == TAG_VALUE:
            return (LEFT, self.codecs[LEFT].loads(data[1:]))
        if tag == TAG_OTHER:
            return (RIGHT, self.codecs[RIGHT].loads(data[1:]))
        if tag == TAG_NONE and len(data) == 2:
            return (data[1], None)
        if tag == TAG_TIME:
            return unpack_stream_time(data)
        raise DecodeError("not an unmatched-record value")


def unmatched_codecs(
    key_codec: Codec, left_value_codec: Codec, right_value_codec: Codec
) -> tuple[UnmatchedKeyCodec, UnmatchedValueCodec]:
    return UnmatchedKeyCodec(key_codec), UnmatchedValueCodec(left_value_codec, right_value_codec)


class UnmatchedTransaction:
    """A task's unmatched records of one join in one partition: committed plus pending.

    ``close_after[side]``: how long after a record's time its window closes (``after + grace``
    for the left side, ``before + grace`` for the right). Like the other join views, it is made
    anew after an abort (its in-memory hint of the next close time is only a lower bound
    while the transaction it was computed in stands).
    """

    __slots__ = ("_added", "_next_close", "close_after", "codec", "tx")

    def __init__(
        self,
        tx: PartitionTransaction,
        codec: UnmatchedKeyCodec,
        close_after: tuple[int, int],
    ) -> None:
        self.tx = tx
        self.codec = codec
        self.close_after = close_after
        #: Entries added in this view's life that may not be committed yet.
        self._added: dict[tuple[int, int, int, Any, int], None] = {}
        #: No entry closes before this (None: unknown, look in the store).
        self._next_close: float | None = None

    # -- time ---------------------------------------------------------------------------------

    @property
    def stream_time(self) -> int:
        return read_stream_time(self.tx)

    def advance(self, timestamp: int) -> bool:
        """The join saw a record at ``timestamp``: move stream time up to it. True if it moved
        (then :meth:`due` may have something)."""
        if timestamp > self.stream_time:
            write_stream_time(self.tx, timestamp)
            return True
        return False

    def close_of(self, side: int, timestamp: int) -> int:
        return timestamp + self.close_after[side]

    def closed(self, side: int, timestamp: int) -> bool:
        """Whether the window of a record at ``timestamp`` has closed by now: a record that
        arrives closed and unmatched gets its null at once, it cannot wait."""
        return self.stream_time > self.close_of(side, timestamp)

    # -- entries ------------------------------------------------------------------------------

    def add(self, side: int, key: Any, timestamp: int, seq: int, value: Any) -> None:
        entry = (self.close_of(side, timestamp), timestamp, side, key, seq)
        self.tx.set(entry, (side, value))
        self._added[entry] = None
        if self._next_close is not None and entry[0] < self._next_close:
            self._next_close = entry[0]

    def remove(self, side: int, key: Any, timestamp: int, seq: int) -> bool:
        """A partner matched this record: it will never need a null. True if it was waiting."""
        entry = (self.close_of(side, timestamp), timestamp, side, key, seq)
        pending = self.tx.pending(entry, _MISSING)
        if pending is DELETED:
            return False
        if pending is _MISSING and self.tx.partition.get(self.codec.dumps(entry)) is None:
            return False  # the common case: it found a partner when it arrived, never waited
        self.tx.delete(entry)
        return True

    def due(self) -> list[Unmatched]:
        """Remove and return every record whose window has closed, in the order they closed
        (then by timestamp, side, key bytes and seq)."""
        now = self.stream_time
        if self._next_close is not None and self._next_close >= now:
            return []
        found: dict[Any, Any] = {}
        next_close: float = math.inf
        # b"\x00" is just above the stream time entry. Leaving the scan early drops its
        # generator here, which closes the RocksDB iterator at once (rocksdb.py: "Handles").
        for raw_key, raw_value in self.tx.partition.iter_range(b"\x00", None):
            entry = self.codec.loads(raw_key)
            if entry[0] >= now:
                next_close = entry[0]  # the first not due (maybe removed meanwhile: a bound)
                break
            pending = self.tx.pending(entry, _MISSING)
            if pending is not DELETED:
                found[raw_key] = (entry, raw_value if pending is _MISSING else pending)
        dumps = self.codec.dumps
        for entry in list(self._added):
            pending = self.tx.pending(entry, _MISSING)
            if pending is _MISSING:
                del self._added[entry]  # committed since: the scan above saw it
            elif pending is not DELETED:
                if entry[0] < now:
                    found[dumps(entry)] = (entry, pending)
                elif entry[0] < next_close:
                    next_close = entry[0]
        out = []
        loads = self.tx.value_codec.loads
        for raw_key in sorted(found):
            entry, value = found[raw_key]
            if type(value) is not tuple:  # the committed value's bytes
                value = loads(value)
            _, timestamp, side, key, seq = entry
            out.append(Unmatched(side, key, timestamp, seq, value[1]))
            self.tx.delete(entry)
            self._added.pop(entry, None)
        self._next_close = next_close
        return out

    def waiting(self) -> Iterator[Unmatched]:
        """Every record still waiting, due or not, in close order."""
        found: dict[bytes, Any] = {}
        loads = self.tx.value_codec.loads
        for raw_key, raw_value in self.tx.partition.iter_range(b"\x00", None):
            entry = self.codec.loads(raw_key)
            pending = self.tx.pending(entry, _MISSING)
            if pending is not DELETED:
                found[raw_key] = (entry, loads(raw_value) if pending is _MISSING else pending)
        for entry in self._added:
            pending = self.tx.pending(entry, _MISSING)
            if pending is not _MISSING and pending is not DELETED:
                found[self.codec.dumps(entry)] = (entry, pending)
        for raw_key in sorted(found):
            (_, timestamp, side, key, seq), value = found[raw_key]
            yield Unmatched(side, key, timestamp, seq, value[1])

    @property
    def next_close(self) -> int | None:
        """When the next waiting record closes (None: none waits)."""
        first = next(self.waiting(), None)
        return None if first is None else self.close_of(first.side, first.timestamp)
