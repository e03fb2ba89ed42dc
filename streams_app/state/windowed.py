"""Windowed state: how a windowed table's windows are keyed, and a task's view of them.

A windowed table stores one entry per (key, window). The store key and the changelog key are the
same bytes, made by one codec object, :class:`WindowKeyCodec`:

    u32 length of the key's bytes | the key's bytes | u64 start | u64 end

(start and end in integer milliseconds, offset by 2**63 so that unsigned byte order is numeric
order). All windows of a key therefore share a prefix, and a prefix seek finds them in start
order without reading the rest of the partition (:meth:`StorePartition.iter_prefix`); that is
what session merging and sliding windows need. Keeping the encoding in this one object means a
different changelog key format (Faust writes ``[key, [start, end]]`` as JSON) is one more codec
with the same methods, ``dumps``, ``loads``, ``prefix`` and ``range`` (whose keys need not sort by
start: ``range`` may return the whole prefix, windows are filtered and sorted after decoding).

:class:`WindowedTransaction` is the windowed view of a task's
:class:`~streams_app.state.base.PartitionTransaction`: it adds "every window of this key" to
the transaction's get/set/delete, combining the committed prefix scan with the task's pending
writes. Pending writes are remembered per key as *hints*; the transaction stays the authority on
values (a hint left over from an aborted transaction finds nothing and is skipped).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, NamedTuple

from streams_app.codecs import Codec, DecodeError
from streams_app.state.base import DELETED, PartitionTransaction, prefix_upper_bound

_LEN = struct.Struct(">I")
_BOUNDS = struct.Struct(">QQ")
_OFFSET = 1 << 63
_MISSING: Any = object()
#: Encoded key prefixes a codec remembers (about 100 bytes each).
_PREFIX_CACHE = 16384


class WindowKey(NamedTuple):
    """The table key of one window: the user's key and the window's bounds in milliseconds.

    ``end`` is exclusive for tumbling and hopping windows (``[start, end)``) and inclusive for
    sliding and session windows (``[start, end]``), as in Kafka Streams.
    """

    key: Any
    start: int
    end: int


class WindowKeyCodec:
    """(key, start, end) <-> store and changelog key bytes; see the module doc."""

    name = "window"

    def __init__(self, key_codec: Codec) -> None:
        self.key_codec = key_codec
        #: ``str`` key -> :meth:`prefix`: a key's windows are written again at every commit
        #: that touches it, and encoding the key is most of the cost of encoding a window key.
        #: Only ``str`` keys: equal keys of other types can encode differently (1, 1.0, True).
        self._prefixes: dict[str, bytes] = {}

    def dumps(self, obj: Any) -> bytes:
        key, start, end = obj
        if type(key) is str:
            prefix = self._prefixes.get(key)
            if prefix is None:
                if len(self._prefixes) >= _PREFIX_CACHE:
                    self._prefixes.clear()
                prefix = self._prefixes[key] = self.prefix(key)
        else:
            prefix = self.prefix(key)
        return prefix + _BOUNDS.pack(start + _OFFSET, end + _OFFSET)

    def loads(self, data: bytes) -> WindowKey:
        if len(data) < 4 + _BOUNDS.size:
            raise DecodeError("not a window key: too short")
        (length,) = _LEN.unpack_from(data)
        if len(data) != 4 + length + _BOUNDS.size:
            raise DecodeError("not a window key: length does not match")
        start, end = _BOUNDS.unpack_from(data, 4 + length)
        return WindowKey(self.key_codec.loads(data[4 : 4 + length]), start - _OFFSET, end - _OFFSET)

    def prefix(self, key: Any) -> bytes:
        """The bytes every window of ``key`` starts with (and no other key's)."""
        raw = self.key_codec.dumps(key)
        return _LEN.pack(len(raw)) + raw

    def range(self, key: Any, start_min: int | None, start_max: int | None) -> tuple[bytes, bytes]:
        """Store keys ``[low, high)`` holding exactly the windows of ``key`` whose start is in
        ``[start_min, start_max]`` (None: unbounded). A codec whose keys do not sort by start
        returns the whole prefix instead (callers filter by start anyway)."""
        prefix = self.prefix(key)
        low = prefix if start_min is None else prefix + _BOUNDS.pack(start_min + _OFFSET, 0)
        if start_max is None:
            high = prefix_upper_bound(prefix)
            assert high is not None  # a prefix starts with a 4-byte length below 2**32 - 1
        else:
            high = prefix + _BOUNDS.pack(start_max + _OFFSET + 1, 0)
        return low, high


class WindowedTransaction:
    """A task's windows of one table partition: committed state plus pending writes.

    ``indexed``: remember pending windows per key, so that :meth:`windows` (called per record
    by sliding and session windows) costs the key's windows, not every pending write. Tumbling
    and hopping windows never need it on their hot path; without it, writes are plain
    transaction writes and :meth:`windows` looks through the pending writes.
    """

    __slots__ = ("_dead", "_live", "codec", "indexed", "tx")

    def __init__(
        self, tx: PartitionTransaction, codec: WindowKeyCodec, indexed: bool = True
    ) -> None:
        self.tx = tx
        self.codec = codec
        self.indexed = indexed
        #: key -> (start, end) of windows written (put) in the open transaction.
        self._live: dict[Any, dict[tuple[int, int], None]] = {}
        #: Windows deleted in the open transaction (they may still be in the store).
        self._dead: set[WindowKey] = set()

    def _fresh(self) -> None:
        # Committed or aborted since the hints were taken: the store (or nothing) holds them.
        if (self._live or self._dead) and not self.tx.dirty:
            self._live.clear()
            self._dead.clear()

    def get(self, window: tuple[Any, int, int], default: Any = None) -> Any:
        return self.tx.get(window, default)

    def put(self, window: WindowKey, value: Any) -> None:
        self.tx.set(window, value)
        if self.indexed:
            self._fresh()
            self._live.setdefault(window[0], {})[(window[1], window[2])] = None
            self._dead.discard(window)

    def delete(self, window: tuple[Any, int, int]) -> None:
        if self.tx.contains(window):
            self.tx.delete(window)
            if self.indexed:
                self._fresh()
                live = self._live.get(window[0])
                if live is not None:
                    live.pop((window[1], window[2]), None)
                self._dead.add(WindowKey(*window))

    def windows(
        self, key: Any, start_min: int | None = None, start_max: int | None = None
    ) -> list[tuple[WindowKey, Any]]:
        """The windows of ``key`` with a start in ``[start_min, start_max]`` (None: unbounded),
        with their values, in (start, end) order."""
        if self.indexed:
            self._fresh()
            live = self._live.get(key, {})
            dead = self._dead
        else:  # look through the pending writes instead
            live, dead = {}, set()
            for window, value in self.tx.dirty_items():
                if window[0] == key:
                    if value is DELETED:
                        dead.add(WindowKey(*window))
                    else:
                        live[(window[1], window[2])] = None
        found: dict[tuple[int, int], tuple[WindowKey, Any]] = {}
        loads_key, loads_value = self.codec.loads, self.tx.value_codec.loads
        low, high = self.codec.range(key, start_min, start_max)
        lo = -(1 << 63) if start_min is None else start_min
        hi = (1 << 63) if start_max is None else start_max
        for raw_key, raw_value in self.tx.partition.iter_range(low, high):
            window = loads_key(raw_key)
            bounds = (window.start, window.end)
            if not lo <= window.start <= hi or bounds in live or window in dead:
                continue  # pending writes know better than the store
            found[bounds] = (window, loads_value(raw_value))
        for bounds in live:
            if lo <= bounds[0] <= hi:
                window = WindowKey(key, *bounds)
                value = self.tx.get(window, _MISSING)
                if value is not _MISSING:
                    found[bounds] = (window, value)
        return [found[bounds] for bounds in sorted(found)]

    def all_windows(self) -> Iterator[tuple[WindowKey, Any]]:
        """Every window of the partition (committed, with pending writes applied)."""
        pending = dict(self.tx.dirty_items())
        loads_key, loads_value = self.codec.loads, self.tx.value_codec.loads
        for raw_key, raw_value in self.tx.partition.items():
            window = loads_key(raw_key)
            if window in pending:
                continue
            yield window, loads_value(raw_value)
        for window, value in pending.items():
            if value is not DELETED:
                yield WindowKey(*window), value


class SlidingValue(NamedTuple):
    """A sliding window's aggregate and the largest record timestamp in it (ms).

    Kafka Streams' sliding-window algorithm needs the latter to decide which windows a new
    record creates, so sliding tables store both.
    """

    value: Any
    max_timestamp: int


_TS = struct.Struct(">q")


class SlidingValueCodec:
    """:class:`SlidingValue` <-> ``i64 max timestamp | the value's bytes``."""

    name = "sliding"

    def __init__(self, value_codec: Codec) -> None:
        self.value_codec = value_codec

    def dumps(self, obj: Any) -> bytes:
        value, max_timestamp = obj
        return _TS.pack(max_timestamp) + self.value_codec.dumps(value)

    def loads(self, data: bytes) -> SlidingValue:
        if len(data) < _TS.size:
            raise DecodeError("not a sliding-window value: too short")
        (max_timestamp,) = _TS.unpack_from(data)
        return SlidingValue(self.value_codec.loads(data[_TS.size :]), max_timestamp)
