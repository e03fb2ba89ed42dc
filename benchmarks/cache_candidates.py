"""How the read-cache candidates compare on the hot path and on hit rate (docs/memory.md).

    python -m benchmarks.cache_candidates [--rounds 5]

Candidates, each with the same byte accounting (streams_app.state.cache.entry_size):

- ``generational``: streams_app's ReadCache, read through a PartitionTransaction (what runs);
- ``lru-ordereddict``: an exact LRU, ``OrderedDict`` keyed by ``(segment, key)``,
  ``move_to_end`` on every hit, evicting from the front;
- ``cachetools``: ``cachetools.LRUCache(maxsize=budget, getsizeof=...)`` (if installed:
  ``pip install cachetools``);
- ``rocksdb-row-cache``: no Python cache, RocksDB's row cache (``Options.set_row_cache``) and a
  decode per read;
- ``rocksdb``: no cache at all but RocksDB's block cache, a decode per read.

Figures: ns per read of a hot key (all cached), and the hit rate on a stream of half hot keys
(10,000) and half new keys with a budget that holds about a tenth of what passes through.
Best of ``--rounds``; not a test (the machine's load moves the figures).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocksdict import Cache, Options, Rdict, WriteBatch

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state.base import PartitionTransaction
from streams_app.state.cache import ReadCache, entry_size
from streams_app.state.memory import MemoryStorePartition

MISSING: Any = object()


class OrderedLRU:
    """An exact byte-bounded LRU, for comparison."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.entries: OrderedDict[tuple[int, Any], tuple[Any, int]] = OrderedDict()
        self.bytes = 0
        self.hits = self.misses = 0

    def get(self, segment: int, key: Any) -> Any:
        ck = (segment, key)
        entry = self.entries.get(ck)
        if entry is None:
            self.misses += 1
            return MISSING
        self.entries.move_to_end(ck)
        self.hits += 1
        return entry[0]

    def put(self, segment: int, key: Any, value: Any) -> None:
        size = entry_size(key, value)
        ck = (segment, key)
        old = self.entries.pop(ck, None)
        if old is not None:
            self.bytes -= old[1]
        self.entries[ck] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, evicted) = self.entries.popitem(last=False)
            self.bytes -= evicted


class CachetoolsLRU:
    def __init__(self, max_bytes: int) -> None:
        import cachetools

        self.cache: Any = cachetools.LRUCache(max_bytes, getsizeof=lambda entry: entry[1])
        self.hits = self.misses = 0

    def get(self, segment: int, key: Any) -> Any:
        entry = self.cache.get((segment, key))
        if entry is None:
            self.misses += 1
            return MISSING
        self.hits += 1
        return entry[0]

    def put(self, segment: int, key: Any, value: Any) -> None:
        self.cache[(segment, key)] = (value, entry_size(key, value))


def best(fn: Callable[[], int], rounds: int) -> float:
    """Best ns per operation over ``rounds`` (``fn`` returns its operation count)."""
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        ops = fn()
        times.append((time.perf_counter() - start) / ops * 1e9)
    return min(times)


def hot_path(rounds: int, tmp: Path) -> dict[str, float]:
    keys = [f"key-{i:06d}" for i in range(10_000)]
    reads = [keys[i] for i in random.Random(1).choices(range(10_000), k=200_000)]
    out: dict[str, float] = {}

    part = MemoryStorePartition()
    part.write({k.encode(): b"%d" % i for i, k in enumerate(keys)}, 1)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec(), ReadCache(64 << 20))
    for key in keys:
        tx.get(key)

    def generational() -> int:
        get = tx.get
        for key in reads:
            get(key, MISSING)
        return len(reads)

    out["generational (PartitionTransaction.get)"] = best(generational, rounds)
    for name, cache in (("lru-ordereddict", OrderedLRU(64 << 20)), ("cachetools", None)):
        if cache is None:
            try:
                cache = CachetoolsLRU(64 << 20)
            except ImportError:
                continue
        for i, key in enumerate(keys):
            cache.put(1, key, i)

        def lookup(cache: Any = cache) -> int:
            get = cache.get
            for key in reads:
                get(1, key)
            return len(reads)

        out[name] = best(lookup, rounds)
    loads = JsonCodec().loads
    for name, row_cache in (("rocksdb-row-cache (+ decode)", True), ("rocksdb (+ decode)", False)):
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        if row_cache:
            opts.set_row_cache(Cache(64 << 20))
        db = Rdict(str(tmp / name.split()[0]), opts)
        batch = WriteBatch(raw_mode=True)
        for i, key in enumerate(keys):
            batch.put(key.encode(), b"%d" % i)
        db.write(batch)

        def rocks(db: Rdict = db) -> int:
            get = db.get
            for key in reads:
                loads(get(key.encode()))
            return len(reads)

        out[name] = best(rocks, rounds)
        db.close()
    return out


def hit_rates(budget: int) -> dict[str, float]:
    """Half the reads from 10,000 hot keys, half new keys; every read fills on a miss."""
    rng = random.Random(2)
    stream = [
        f"hot-{rng.randrange(10_000)}" if rng.random() < 0.5 else f"new-{i}" for i in range(300_000)
    ]
    out: dict[str, float] = {}
    cache = ReadCache(budget)
    segments = [cache.segment() for _ in range(16)]
    for key in stream:
        seg = segments[hash(key) % 16]
        if seg.lookup(key) is MISSING_CACHE:
            seg.fill(key, 1, entry_size(key, 1))
    out["generational"] = cache.hit_rate
    candidates: list[tuple[str, Callable[[int], Any]]] = [("lru-ordereddict", OrderedLRU)]
    try:
        import cachetools  # noqa: F401

        candidates.append(("cachetools", CachetoolsLRU))
    except ImportError:
        pass
    for name, make in candidates:
        lru = make(budget)
        for key in stream:
            segment = hash(key) % 16
            if lru.get(segment, key) is MISSING:
                lru.put(segment, key, 1)
        out[name] = lru.hits / (lru.hits + lru.misses)
    return out


MISSING_CACHE: Any = __import__("streams_app.state.cache", fromlist=["MISS"]).MISS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("ns per read of a cached hot key (10,000 keys, 200,000 reads, best of rounds):")
        for name, ns in hot_path(args.rounds, Path(tmp)).items():
            print(f"  {name:42} {ns:7.0f}")
    budget = 300_000 * 360 // 2 // 10  # about a tenth of the distinct keys that pass
    print(f"hit rate, half hot keys / half new keys, budget {budget:,} bytes:")
    for name, rate in hit_rates(budget).items():
        print(f"  {name:42} {rate:7.3f}")


if __name__ == "__main__":
    main()
