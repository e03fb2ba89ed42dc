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
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from types import MappingProxyType
from typing import Any

from streams_app.codecs import Codec, DecodeError
from streams_app.state.base import PartitionTransaction
from streams_app.state.sizing import shared

#: PendingKeys.of when a key has no pending entries (never written to).
_NO_ENTRIES: Mapping[Any, None] = MappingProxyType({})
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


class TaggedValueCodec:
    """Stored values: ``None``, a value, or the stream time entry's :class:`StreamTime`.

    One leading tag byte says which (the module's ``TAG_*``), so ``None`` is a value like any
    other (a versioned table's tombstone version is an entry, not a deletion).
    """

    def __init__(self, value_codec: Codec) -> None:
        self.value_codec = value_codec

    def dumps(self, obj: Any) -> bytes:
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
    are a dict keyed by composite keys (decoded, or the store keys themselves, as a join
    buffer's), which a scan cannot see. This index lets a read of one user key find its
    pending entries without looking through every pending write (the same idea as
    :class:`~streams_app.state.windowed.WindowedTransaction`'s hints). The transaction stays
    the authority on values: an entry listed here is read back from it.
    Every write and delete of an entry must be touched here, in the order made. The index is
    by what ``index_of`` gives of a composite key (by default its first element: a tuple
    whose first element is its user key) and :meth:`of` is asked with the same: the log keeps
    the composite alone, with no pair made per write (a join buffers every record, and each
    object made and kept is one more that the cyclic collector walks until the commit).

    A hint outlives its write when that write commits (the scan finds it then: the hint is
    redundant, never wrong). The hints are dropped as soon as the transaction holds no pending
    writes, and those of committed writes are pruned whenever the hints have grown to twice
    what was pending at the last pruning: a worker that goes on processing while its commits
    are in flight may never see its transaction empty, and its hints must not grow with
    everything it ever buffered.

    **Pruning by position.** Touches are numbered in order. A view that calls :meth:`mark`
    whenever its transaction is prepared for a commit (``PartitionTransaction.before_prepare``)
    lets a pruning drop every touch made before the last prepare that has committed since
    (``PartitionTransaction.commits`` grew): that commit carried each of those writes, or a
    later touch of the same entry rewrote it and is kept. That is a slice of the log, with no
    hashing, and it is exact for a store written on every record and never read (the many side
    of a one-to-many join). Without a mark, or when reads have indexed touches after that
    point, a pruning asks the transaction which entries are still pending instead.
    """

    __slots__ = (
        "_count",
        "_keys",
        "_limit",
        "_log",
        "_log_base",
        "_mark",
        "_marked_at",
        "_safe",
        "index_of",
        "tx",
    )

    def __init__(
        self, tx: PartitionTransaction, index_of: Callable[[Any], Any] = itemgetter(0)
    ) -> None:
        self.tx = tx
        self.index_of = index_of
        #: user key -> composite keys written or deleted in the open transaction: the touches
        #: numbered below :attr:`_log_base` that are still hinted.
        self._keys: dict[Any, dict[Any, None]] = {}
        #: Touches not in ``_keys`` yet, in order: they are indexed when a read asks. A store
        #: that is written for every record and rarely read (the many side of a one-to-many
        #: join) pays a list append per write instead of an index update.
        self._log: list[Any] = []
        #: The number of ``_log[0]``'s touch (the log holds ``_log_base`` up to the last).
        self._log_base = 0
        #: The number of touches at the last :meth:`mark`, and ``tx.commits`` then (-1: no
        #: mark yet); every touch numbered below ``_safe`` is known to have committed.
        self._mark = 0
        self._marked_at = -1
        self._safe = -1
        #: Touches since the last pruning (at least the composite keys held), and how many
        #: trigger the next one.
        self._count = 0
        self._limit = _PRUNE_AT_LEAST

    def fresh(self) -> None:
        if (self._keys or self._log) and not self.tx.dirty:
            self._keys.clear()
            self._log_base += len(self._log)
            self._log = []
            self._count = 0

    def touch(self, composite: Any) -> None:
        """``composite`` (an entry of the user key ``index_of(composite)``) was just written
        or deleted."""
        self._log.append(composite)
        self._count += 1
        if self._count > self._limit:
            self._prune()

    def touch_all(self, composites: Iterable[Any]) -> None:
        """:meth:`touch` of each of ``composites``, in order (one pruning check at the end:
        a pruning keeps what is still pending, whenever it runs)."""
        log = self._log
        before = len(log)
        log.extend(composites)
        self._count += len(log) - before
        if self._count > self._limit:
            self._prune()

    def mark(self) -> None:
        """The transaction is being prepared for a commit: what has been touched so far
        goes with it (class doc, "Pruning by position"). Not while a commit is in flight:
        that one carries what was sealed, and what a prepare made meanwhile may be more."""
        if self.tx.sealed:
            return
        commits = self.tx.commits
        if self._marked_at >= 0 and commits > self._marked_at:
            self._safe = self._mark  # the last marked prepare has committed since
        self._mark = self._log_base + len(self._log)
        self._marked_at = commits

    def _committed_below(self) -> int:
        """Every touch numbered below this has committed (-1: none known)."""
        if self._marked_at >= 0 and self.tx.commits > self._marked_at:
            return self._mark
        return self._safe

    def _index(self) -> dict[Any, dict[Any, None]]:
        """The index, with the touches logged since the last read in it."""
        keys = self._keys
        if self._log:
            index_of = self.index_of
            for composite in self._log:
                user_key = index_of(composite)
                entries = keys.get(user_key)
                if entries is None:
                    keys[user_key] = {composite: None}
                else:
                    entries[composite] = None
            self._log_base += len(self._log)
            self._log = []
        return keys

    def _prune(self) -> None:
        """Keep the hints of entries still pending only (the others committed)."""
        committed = self._committed_below()
        base = self._log_base
        if committed >= base:  # every indexed touch is below it, and the log's first ones
            del self._log[: committed - base]
            self._log_base = committed
            self._keys = {}
            count = len(self._log)
        else:
            total = base + len(self._log)
            pending = self.tx.pending_keys()
            kept: dict[Any, dict[Any, None]] = {}
            count = 0
            if pending:
                for user_key, entries in self._keys.items():
                    live = {c: None for c in entries if c in pending}
                    if live:
                        kept[user_key] = live
                        count += len(live)
                log = [touched for touched in self._log if touched in pending]
                count += len(log)
            else:
                log = []
            # The log's survivors go into the index, so that the log stays a run of touches
            # from _log_base on (what the next pruning by position slices).
            self._keys = kept
            self._log = log
            self._index()
            self._log_base = total
        self._count = count
        self._limit = 2 * count + _PRUNE_AT_LEAST

    def of(self, user_key: Any) -> Mapping[Any, None]:
        if not self._log and not self._keys:
            return _NO_ENTRIES  # nothing written (a side only read, as the one of 1:n joins)
        self.fresh()
        return self._index().get(user_key, _NO_ENTRIES)

    def all(self) -> list[Any]:
        """Every composite key written or deleted in the open transaction."""
        self.fresh()
        return [c for entries in self._index().values() for c in entries]
