"""The read cache: decoded committed values of every table and partition of a worker, bounded
in bytes as a whole (``state_cache_max_bytes``).

One cache per worker, shared by all its tables and partitions, as Kafka Streams shares one
``statestore.cache.max.bytes`` among all threads and stores: a hot partition may use what a cold
one does not, and the budget does not grow with the number of partitions owned.

**What it holds.** Only committed state: values read from a store partition (which only ever
holds what Kafka committed), and, at commit, the values the transaction just made durable
(deletes included, as "absent" entries). A read of a key the store does not hold is not
cached, as in Kafka Streams' caching store: such a key is usually written next, and RocksDB's
bloom filters answer "absent" cheaply.
Pending writes never enter it; they stay in the transaction's own dirty map
(:class:`~streams_app.state.base.PartitionTransaction`).

**Segments, and the abort guarantee.** Each transaction object (one per task and table) reads
and fills its own :class:`CacheSegment`. The cache hands out the very objects it holds (a copy
per read would cost more than the decode it saves), so an agent that reads a list, appends to it
in place and writes it back has changed the cached object too. That is harmless once the write
commits (the cache then holds the committed value) but not after an abort; so discarding a
transaction (abort, rewind, task closed) empties its segment at once, and nothing it held can be
served again. A new owner of a partition (after a rebalance, after a restore) likewise starts
from an empty segment, never from values cached before the store changed underneath it.

**Eviction: generations, not a linked list.** Each segment keeps a *young* dict and up to
three older generations. Reads look in young, then in the older ones (a hit there moves the
entry back to young: once per entry per generation), then in the store (the decoded value goes
to young); commits put their values in young. When the young generations reach a quarter of
``max_bytes`` (or everything would exceed it), every segment's oldest generation is dropped
(the entries nothing touched for three rotations) and the others age by one. This is
least-recently-used at the granularity of a generation: an entry touched at least once while
3/4 of the budget's worth of newer entries come in is never evicted. Its hit path is one dict
lookup; an exact LRU pays an ``OrderedDict.move_to_end`` and a ``(segment, key)`` tuple on
every hit and a Python-level insert per key at every commit, ``cachetools.LRUCache`` more
(measured in docs/memory.md and ``benchmarks/cache_candidates.py``), which the count workload's
">= 0.95x today's throughput" target does not leave room for.

**Accounting.** An entry costs :func:`entry_size`: ``ENTRY_OVERHEAD`` plus
:func:`~streams_app.state.sizing.sizeof` of its key and value. The overhead covers the cache's
own structures per entry (a slot in a value dict and one in a size dict at the worst fill
CPython's dict growth allows, and the size's int), an upper bound derived from CPython's
dict growth and checked with tracemalloc (tests/state/test_cache.py). ``bytes`` is exact by that
accounting, always ``<= max_bytes`` after any operation returns.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from itertools import repeat
from operator import add
from typing import Any

from streams_app.state.sizing import FLAT, size_parts, sizeof

#: Returned by lookups when the key is not cached.
MISS: Any = object()

#: Bytes one dict slot can cost at CPython's worst fill: a table of up to 6x the live entries
#: (it grows to 3-6x when full), 4-byte indices, and an entries array of 2/3 of the table at 24
#: bytes per entry: 6 * 4 + 4 * 24.
DICT_SLOT = 120
#: Bytes per entry that the cache's structures cost beyond the key and the value: a slot in the
#: value dict and one in the size dict, and the size's ``int`` (28, 32 with allocator rounding).
#: An upper bound; tests/state/test_cache.py checks it with tracemalloc.
ENTRY_OVERHEAD = 2 * DICT_SLOT + 32

_getsizeof = sys.getsizeof


def entry_size(key: Any, value: Any) -> int:
    """What one cached (or pending) entry costs, by the budget's accounting."""
    return (
        ENTRY_OVERHEAD
        + (_getsizeof(key) if type(key) in FLAT else sizeof(key))
        + (_getsizeof(value) if type(value) in FLAT else sizeof(value))
    )


def entry_sizes(entries: Mapping[Any, Any]) -> list[int]:
    """:func:`entry_size` of every ``(key, value)`` of ``entries``, in their order: one or two
    C-level passes for homogeneous flat keys and values (a commit of counts: ``str`` keys,
    ``int`` values) (:func:`~streams_app.state.sizing.size_parts`)."""
    key_constant, keys = size_parts(entries.keys())
    value_constant, values = size_parts(entries.values())
    constant = ENTRY_OVERHEAD + key_constant + value_constant
    if keys is None and values is None:
        return [constant] * len(entries)
    if keys is None or values is None:
        parts = keys if values is None else values
        assert parts is not None
        return list(map(add, parts, repeat(constant)))
    return list(map(add, map(add, keys, values), repeat(constant)))


#: Generations per segment. An entry survives as long as it is touched at least once while
#: ``(GENERATIONS - 1) / GENERATIONS`` of the budget's worth of new entries come in (an exact
#: LRU: the whole budget). Hit rates against an exact LRU of the same budget, half the reads
#: from a hot set (benchmarks/cache_candidates.py): 1 KB values, 10,000 hot keys, 64 MiB: LRU
#: 0.444, 2 generations 0.417, 4: 0.421 (5,000 hot keys: 0.475 / 0.473 / 0.474); small int
#: values with the hot set at 60% of the budget, the worst case: 0.287 / 0.223 / 0.242. More
#: than 4 gains under 1% and promotes entries more often.
GENERATIONS = 4


class _Generation:
    """Older entries: the values, what each costs, and their total."""

    __slots__ = ("bytes", "sizes", "values")

    def __init__(self, values: dict[Any, Any], sizes: dict[Any, int], size: int) -> None:
        self.values = values
        self.sizes = sizes
        self.bytes = size


class CacheSegment:
    """One table partition's share of the cache, as one transaction object sees it.

    The young generation is two dicts with the same keys (the values, and what each entry
    costs), so that a commit's writes go in with C-level ``dict.update`` calls and a hit is
    one lookup; older generations are :class:`_Generation` objects, newest first. Every change
    of bytes is mirrored in the cache's totals.
    """

    __slots__ = ("__weakref__", "cache", "hits", "older", "young", "young_bytes", "young_sizes")

    def __init__(self, cache: ReadCache) -> None:
        self.cache = cache
        #: Hits in this segment (counted here, where the hot path already holds the segment;
        #: ReadCache.hits adds them up).
        self.hits = 0
        self.young: dict[Any, Any] = {}
        self.young_sizes: dict[Any, int] = {}
        self.young_bytes = 0
        self.older: list[_Generation] = []

    def lookup(self, key: Any) -> Any:
        """The cached value (or the store's "absent" marker), or :data:`MISS`."""
        value = self.young.get(key, MISS)
        if value is not MISS:
            self.hits += 1
            return value
        return self.lookup_older(key)

    def lookup_older(self, key: Any) -> Any:
        """:meth:`lookup` for a key the caller found not young (the transaction inlines the
        young-generation hit, the hot path)."""
        for gen in self.older:
            value = gen.values.pop(key, MISS)
            if value is not MISS:
                break
        else:
            self.cache.misses += 1
            return MISS
        # Touched again: into the young generation. Its slots in the older dicts stay
        # allocated until that generation is dropped, so they stay counted there.
        size = gen.sizes.pop(key)
        gen.bytes -= size - _SLOTS
        self.young[key] = value
        self.young_sizes[key] = size
        self.young_bytes += size
        self.hits += 1
        self.cache._grew(size, _SLOTS)
        return value

    def fill(self, key: Any, value: Any, size: int) -> None:
        """Cache a committed value read from the store (the key was a miss)."""
        cache = self.cache
        if size > cache.max_bytes:
            return
        self.young[key] = value
        self.young_sizes[key] = size
        self.young_bytes += size
        cache._grew(size, size)

    def fill_committed(self, values: Mapping[Any, Any], entry_sizes: list[int]) -> None:
        """Cache what a commit just made durable: ``values``, whose entries cost
        ``entry_sizes`` (in the same order), replacing what was cached for those keys."""
        cache = self.cache
        limit = cache.max_bytes
        if max(entry_sizes, default=0) > limit:
            # Never cache an entry larger than the whole budget (rare: filter in Python).
            kept = {}
            kept_sizes = []
            for (key, value), size in zip(values.items(), entry_sizes, strict=True):
                if size > limit:
                    self._forget(key)
                else:
                    kept[key] = value
                    kept_sizes.append(size)
            values, entry_sizes = kept, kept_sizes
        young_sizes = self.young_sizes
        young_delta = sum(entry_sizes) - sum(map(young_sizes.get, values, repeat(0)))
        older_delta = 0
        for gen in self.older:
            if gen.values:
                for key in gen.values.keys() & values.keys():
                    del gen.values[key]
                    freed = gen.sizes.pop(key) - _SLOTS
                    gen.bytes -= freed
                    older_delta -= freed
        self.young.update(values)
        young_sizes.update(zip(values, entry_sizes, strict=True))
        self.young_bytes += young_delta
        cache._grew(young_delta, young_delta + older_delta)

    def forget(self, key: Any) -> None:
        """Drop ``key`` wherever it is (its dict slots stay counted until rotation)."""
        if key in self.young_sizes or self.older:
            self._forget(key)

    def _forget(self, key: Any) -> None:
        """Drop ``key`` wherever it is (its dict slots stay counted until rotation)."""
        size = self.young_sizes.pop(key, None)
        if size is not None:
            del self.young[key]
            self.young_bytes -= size - _SLOTS
            self.cache._grew(_SLOTS - size, _SLOTS - size)
        for gen in self.older:
            size = gen.sizes.pop(key, None)
            if size is not None:
                del gen.values[key]
                gen.bytes -= size - _SLOTS
                self.cache._grew(0, _SLOTS - size)

    def _age(self, keep: int) -> tuple[int, int]:
        """Young becomes the newest older generation; only the ``keep`` newest stay. Returns
        the entries dropped and the bytes still held."""
        gens = [_Generation(self.young, self.young_sizes, self.young_bytes), *self.older]
        self.older, dropped = gens[:keep], gens[keep:]
        self.young, self.young_sizes, self.young_bytes = {}, {}, 0
        return sum(len(g.values) for g in dropped), sum(g.bytes for g in self.older)

    def clear(self) -> None:
        """Forget everything (the transaction was discarded)."""
        held = self.young_bytes + sum(g.bytes for g in self.older)
        self.cache._grew(-self.young_bytes, -held)
        self.cache._retired_hits += self.hits
        self.hits = 0
        self.young, self.young_sizes, self.young_bytes = {}, {}, 0
        self.older = []

    def __len__(self) -> int:
        return len(self.young) + sum(len(g.values) for g in self.older)


#: The two dict slots an entry leaves behind in a generation it was removed from.
_SLOTS = 2 * DICT_SLOT


class ReadCache:
    """Byte-bounded cache of decoded committed values, one per worker; ``max_bytes=0`` is off.

    The counters are plain attributes and properties, cheap to read at any time (a metrics
    endpoint reads them): ``hits``, ``misses``, ``evictions``, ``rotations``, ``bytes``,
    ``entries``.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        self.max_bytes = max_bytes
        self.enabled = max_bytes > 0
        #: Rotate when the young generations reach 1/GENERATIONS of the budget: the older
        #: generations then hold at most the rest.
        self._young_limit = max_bytes // GENERATIONS
        self._segments: weakref.WeakSet[CacheSegment] = weakref.WeakSet()
        self._bytes = 0
        self._young_bytes = 0
        self._retired_hits = 0
        self.misses = 0
        self.evictions = 0
        self.rotations = 0

    def segment(self) -> CacheSegment:
        """A new, empty segment (for a new transaction object)."""
        seg = CacheSegment(self)
        self._segments.add(seg)
        return seg

    # -- counters -------------------------------------------------------------------------

    @property
    def bytes(self) -> int:
        """Bytes the cached entries cost, by the cache's own accounting (<= ``max_bytes``)."""
        return self._bytes

    @property
    def hits(self) -> int:
        """Reads served from the cache (segments count them; cleared ones hand them over)."""
        return self._retired_hits + sum(seg.hits for seg in list(self._segments))

    @property
    def entries(self) -> int:
        return sum(len(seg) for seg in list(self._segments))

    @property
    def hit_rate(self) -> float:
        hits = self.hits
        lookups = hits + self.misses
        return hits / lookups if lookups else 0.0

    def stats(self) -> dict[str, int]:
        return {
            "max_bytes": self.max_bytes,
            "bytes": self._bytes,
            "entries": self.entries,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "rotations": self.rotations,
        }

    # -- eviction -------------------------------------------------------------------------

    def _grew(self, young: int, total: int) -> None:
        self._young_bytes += young
        self._bytes += total
        if self._young_bytes > self._young_limit or self._bytes > self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        """Drop every segment's oldest generation and age the others, until within budget."""
        segments = list(self._segments)
        keep = GENERATIONS - 1
        while True:
            evicted = 0
            total = 0
            for seg in segments:
                dropped, held = seg._age(keep)
                evicted += dropped
                total += held
            # Recomputed from the segments, so a segment dropped without clear() (garbage
            # collected) cannot leave its bytes counted for ever.
            self._bytes = total
            self._young_bytes = 0
            self.evictions += evicted
            self.rotations += 1
            if total <= self.max_bytes:
                return
            keep = max(0, keep - 1)

    def clear(self) -> None:
        for seg in list(self._segments):
            seg.clear()
        self._bytes = 0
        self._young_bytes = 0

    def __repr__(self) -> str:
        return (
            f"ReadCache({self._bytes:,}/{self.max_bytes:,} bytes, {self.hits:,} hits, "
            f"{self.misses:,} misses, {self.evictions:,} evictions)"
        )
