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

Figures: median ns per read of a cached key and per key of a commit's cache fill (every
candidate timed in turn in each of ``--rounds``), and the hit rate on a stream of half hot keys
(10,000) and half new keys with a budget that holds about a tenth of what passes through. Not a
test (the machine's load moves the figures; compare within one run).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocksdict import Cache, Options, Rdict, WriteBatch

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state.base import PartitionTransaction
from streams_app.state.cache import ReadCache, entry_size, entry_sizes
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


def hot_path(rounds: int, tmp: Path) -> dict[str, dict[str, float]]:
    """Median ns per hit and per committed key, each candidate timed in turn in every round
    (interleaved, so a noisy machine disturbs them alike)."""
    keys = [f"key-{i:06d}" for i in range(10_000)]
    reads = [keys[i] for i in random.Random(1).choices(range(10_000), k=100_000)]
    commit = {key: i for i, key in enumerate(keys[:2_000])}
    loads = JsonCodec().loads

    cache = ReadCache(64 << 20)
    segment = cache.segment()
    segment.fill_committed(
        {k: i for i, k in enumerate(keys)}, [entry_size(k, i) for i, k in enumerate(keys)]
    )
    part = MemoryStorePartition()
    part.write({k.encode(): b"%d" % i for i, k in enumerate(keys)}, 1)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec(), cache)
    for key in keys:
        tx.get(key)
    lru = OrderedLRU(64 << 20)
    try:
        tools: Any = CachetoolsLRU(64 << 20)
    except ImportError:
        tools = None
    for candidate in (lru, tools):
        if candidate is not None:
            for i, key in enumerate(keys):
                candidate.put(1, key, i)
    dbs = {}
    for name, row_cache in (("row", True), ("plain", False)):
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        if row_cache:
            opts.set_row_cache(Cache(64 << 20))
        db = Rdict(str(tmp / name), opts)
        batch = WriteBatch(raw_mode=True)
        for i, key in enumerate(keys):
            batch.put(key.encode(), b"%d" % i)
        db.write(batch)
        dbs[name] = db

    def generational_hits() -> int:
        lookup = segment.lookup
        for key in reads:
            lookup(key)
        return len(reads)

    def transaction_hits() -> int:
        get = tx.get
        for key in reads:
            get(key, MISSING)
        return len(reads)

    def generational_commit() -> int:
        segment.fill_committed(commit, entry_sizes(commit))
        return len(commit)

    def lru_hits(candidate: Any) -> Callable[[], int]:
        def run() -> int:
            get = candidate.get
            for key in reads:
                get(1, key)
            return len(reads)

        return run

    def lru_commit(candidate: Any) -> Callable[[], int]:
        def run() -> int:
            put = candidate.put
            for key, value in commit.items():
                put(1, key, value)
            return len(commit)

        return run

    def rocks_hits(db: Rdict) -> Callable[[], int]:
        def run() -> int:
            get = db.get
            for key in reads:
                loads(get(key.encode()))
            return len(reads)

        return run

    cases: dict[str, dict[str, Callable[[], int]]] = {
        "generational: CacheSegment": {"hit": generational_hits, "commit": generational_commit},
        "generational: PartitionTransaction.get": {"hit": transaction_hits},
        "exact LRU (OrderedDict)": {"hit": lru_hits(lru), "commit": lru_commit(lru)},
        "rocksdb row cache + decode": {"hit": rocks_hits(dbs["row"])},
        "rocksdb block cache + decode": {"hit": rocks_hits(dbs["plain"])},
    }
    if tools is not None:
        cases["cachetools.LRUCache"] = {"hit": lru_hits(tools), "commit": lru_commit(tools)}
    samples: dict[str, dict[str, list[float]]] = {}
    for _ in range(rounds):
        for name, ops in cases.items():
            for op, fn in ops.items():
                start = time.perf_counter()
                count = fn()
                elapsed = (time.perf_counter() - start) / count * 1e9
                samples.setdefault(name, {}).setdefault(op, []).append(elapsed)
    for db in dbs.values():
        db.close()
    return {
        name: {op: statistics.median(values) for op, values in ops.items()}
        for name, ops in samples.items()
    }


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
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("median ns per read of a cached key (10,000 keys) and per key of a commit of 2,000:")
        for name, ops in hot_path(args.rounds, Path(tmp)).items():
            commit = ops.get("commit")
            print(
                f"  {name:40} hit {ops['hit']:7.0f}   commit "
                + ("      -" if commit is None else f"{commit:7.0f}")
            )
    budget = 300_000 * 360 // 2 // 10  # about a tenth of the distinct keys that pass
    print(f"hit rate, half hot keys / half new keys, budget {budget:,} bytes:")
    for name, rate in hit_rates(budget).items():
        print(f"  {name:42} {rate:7.3f}")


if __name__ == "__main__":
    main()
