"""The worker's read cache: one byte budget across every table and partition, committed values
only, and nothing served after an abort."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import faust
import pytest

from streams_app.codecs import JsonCodec, RawCodec, RecordCodec, StrCodec
from streams_app.state import (
    MemoryStore,
    PartitionTransaction,
    ReadCache,
    RocksDBStore,
    StorePartition,
    UncommittedWrites,
)
from streams_app.state.cache import ENTRY_OVERHEAD, entry_size, entry_sizes
from streams_app.state.sizing import sizeof, sizes
from streams_app.state.windowed import WindowKey


class CountingJson(JsonCodec):
    def __init__(self) -> None:
        self.loads_calls = 0

    def loads(self, data: bytes) -> Any:
        self.loads_calls += 1
        return super().loads(data)


class Generated(StorePartition):
    """A store partition holding a value for every key (decoded fresh on each read) and keeping
    nothing in Python: what tracemalloc sees growing is the cache, and only the cache."""

    def get(self, key: bytes) -> bytes | None:
        return b"%d" % (len(key) * 1_000_003)  # small values: the cache's overhead dominates

    def items(self) -> Any:
        return iter(())

    @property
    def changelog_offset(self) -> int | None:
        return None

    def write(self, batch: Any, changelog_offset: int) -> None:
        pass

    def wipe(self) -> None:
        pass

    def close(self) -> None:
        pass


def accounted_floor(cache: ReadCache) -> int:
    """What the entries present right now cost, by entry_size: the accounting must cover it."""
    total = 0
    for seg in list(cache._segments):
        for gen in (seg.young, *(g.values for g in seg.older)):
            total += sum(entry_size(k, v) for k, v in gen.items())
    return total


# -- sizing ------------------------------------------------------------------------------------


class Item(faust.Record):
    name: str
    qty: int


def test_sizes_match_getsizeof_for_flat_values_and_walk_containers() -> None:
    for objs in (
        ["a", "key-000001", ""],
        [0, 1, 2**29, -(2**29)],
        [b"", b"x" * 1000],
        [1.5, 0.0],
        ["é", "x"],  # not all ASCII: per object
        [2**40, 7],  # not all small ints
        [2**40, 2**31, -(2**50)],  # all of two digits (epoch milliseconds)
        [2**61, 2**40],
        [1, "a", None],
    ):
        assert sizes(objs) == [sys.getsizeof(o) for o in objs], objs
    # Tuples of flat objects (windowed keys) take a short cut to the same figures as the walk.
    windows = [("k1", 1_700_000_000_000, 1_700_000_060_000), ("key-2", 0, 60_000)]
    assert sizes(windows) == [sizeof(w) for w in windows]
    assert sizes(windows)[0] == sys.getsizeof(windows[0]) + sum(map(sys.getsizeof, windows[0]))
    # ... column by column: one commit's windows, and tuples that are not all alike.
    for tuples in (
        [("k1", 1_700_000_000_000, 1_700_000_060_000), ("key-22", 1_700_000_060_000, 2**40)],
        [WindowKey("k", 2**40, 2**41), WindowKey("é", 2**40, 2**41)],
        [("a",), ("b", "c")],
        [(), ()],
        [("a", 1.5, b"x", True, None), ("b", 2.5, b"yy", False, None)],
        [("a", ["x"]), ("b", ["y"])],
        [("a", 1), ("b", "c")],
    ):
        assert sizes(tuples) == [sizeof(t) for t in tuples], tuples
    nested = [("k", ["a", "b"]), ("k", 1)]
    assert sizes(nested) == [sizeof(t) for t in nested]
    assert sizes(nested)[0] > sys.getsizeof(nested[0]) + sys.getsizeof(nested[0][1])
    value = {"qty": 2, "item": "apple", "tags": ["a", "b"]}
    walked = sizeof(value)
    assert walked > sys.getsizeof(value) + sys.getsizeof(value["tags"])
    # The JSON encoding is a small fraction of what the decoded object costs.
    assert walked > 10 * len(JsonCodec().dumps(value))
    record = Item(name="apple", qty=2)
    assert sizeof(record) > sys.getsizeof(record) + sys.getsizeof("apple")
    shared = [1, 2, 3]
    assert sizeof([shared, shared]) < sizeof([[1, 2, 3], [1, 2, 3]])  # counted once per value
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    assert sizeof(cyclic) == sys.getsizeof(cyclic)
    entries = {"a": 1, "bb": {"x": 1}}
    assert entry_sizes(entries) == [entry_size(k, v) for k, v in entries.items()]
    assert entry_size("a", 1) == ENTRY_OVERHEAD + sys.getsizeof("a") + sys.getsizeof(1)


# -- the budget --------------------------------------------------------------------------------


def test_one_budget_across_many_tables_and_partitions() -> None:
    budget = 200_000
    cache = ReadCache(budget)
    stores = [MemoryStore(f"table{t}") for t in range(3)]
    txs = [
        PartitionTransaction(store.partition(p), StrCodec(), JsonCodec(), cache)
        for store in stores
        for p in range(16)
    ]
    for tx in txs:
        tx.partition.write({b"k%d" % i: b"[%d]" % i for i in range(200)}, 1)
    inserted = 0
    for round_ in range(6):
        for i in range(200):
            for tx in txs:
                tx.get(f"k{i}")
                inserted += 1
                assert cache.bytes <= budget
            if i % 50 == 0:
                for tx in txs:
                    tx.set(f"new{round_}-{i}", {"round": round_})
                    tx.prepare()
                    tx.commit(round_ + 2)
                    assert cache.bytes <= budget
                assert cache.bytes >= accounted_floor(cache)
    # The run was many times the budget, so the bound was exercised, not just not reached.
    assert inserted * entry_size("k100", [100]) > 10 * budget
    assert cache.evictions > 0 and cache.rotations > 0
    assert 0 < cache.bytes <= budget
    assert cache.bytes >= accounted_floor(cache)
    assert cache.hits + cache.misses >= inserted


def test_tracemalloc_sees_no_more_than_the_budget() -> None:
    """Many distinct keys through many partitions: what Python holds for the cache stays under
    its own accounting (so its per-entry overhead is an upper bound), which stays under the
    budget."""
    budget = 512 * 1024
    slack = 32 * 1024  # the cache's and the test's fixed structures
    cache = ReadCache(budget)
    txs = [PartitionTransaction(Generated(), StrCodec(), JsonCodec(), cache) for _ in range(32)]
    gc.collect()
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        peak_growth = 0
        for i in range(40_000):
            tx = txs[i % 32]
            tx.get(f"key-{i:09d}")
            if i % 7 == 0:
                tx.set(f"key-{i:09d}", {"n": i, "words": ["x" * 20]})
            if i % 500 == 499:
                for t in txs:
                    t.prepare()
                    t.commit(i)
                # Between transactions the cache is all that grew.
                growth = tracemalloc.get_traced_memory()[0] - baseline
                assert growth <= cache.bytes + slack, (growth, cache.bytes)
                assert cache.bytes <= budget
                peak_growth = max(peak_growth, growth)
    finally:
        tracemalloc.stop()
    assert cache.rotations >= 10  # the key count went well past the budget
    assert peak_growth <= budget, f"Python held {peak_growth:,} bytes for a {budget:,} budget"


def test_no_budget_means_no_cache() -> None:
    values = CountingJson()
    store = MemoryStore("t")
    store.partition(0).write({b"a": b"1"}, 1)
    cache = ReadCache(0)
    tx = PartitionTransaction(store.partition(0), StrCodec(), values, cache)
    assert tx.get("a") == 1
    assert tx.get("a") == 1
    assert values.loads_calls == 2
    tx.set("b", 2)
    tx.commit(2)
    assert cache.bytes == 0 and cache.entries == 0


def test_an_entry_larger_than_the_budget_is_never_cached() -> None:
    cache = ReadCache(10_000)
    tx = PartitionTransaction(MemoryStore("t").partition(0), StrCodec(), RawCodec(), cache)
    tx.set("small", b"x")
    tx.set("big", b"x" * 20_000)
    tx.commit(1)
    assert cache.entries == 1
    assert tx.get("big") == b"x" * 20_000  # from the store
    assert cache.bytes <= 10_000


def test_hot_keys_survive_a_stream_of_cold_ones() -> None:
    cache = ReadCache(300_000)
    store = MemoryStore("t")
    part = store.partition(0)
    part.write({b"k%d" % i: b"%d" % i for i in range(20_000)}, 1)
    values = CountingJson()
    tx = PartitionTransaction(part, StrCodec(), values, cache)
    hot = [f"k{i}" for i in range(50)]
    for i in range(50, 20_000):
        tx.get(f"k{i}")  # cold: read once
        tx.get(hot[i % 50])  # hot: read all the time
    assert cache.rotations >= 5
    before = values.loads_calls
    for key in hot:
        tx.get(key)
    assert values.loads_calls == before  # every hot key was still cached
    assert cache.hit_rate > 0.45


# -- committed values only ---------------------------------------------------------------------


@pytest.fixture(params=["memory", "rocksdb"])
def part(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    store = MemoryStore("t") if request.param == "memory" else RocksDBStore("t", tmp_path / "t")
    try:
        yield store.partition(0)
    finally:
        store.close()


def test_pending_writes_never_enter_the_cache(part: StorePartition) -> None:
    cache = ReadCache(1 << 20)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec(), cache)
    tx.set("a", 1)
    assert cache.entries == 0
    assert tx.get("a") == 1  # from the transaction's own writes
    tx.prepare()
    tx.commit(1)
    assert cache.entries == 1  # now committed


def test_nothing_is_served_from_the_cache_after_an_abort(part: StorePartition) -> None:
    part.write({b"list": b"[1]", b"n": b"5"}, 1)
    cache = ReadCache(1 << 20)
    values = CountingJson()
    tx = PartitionTransaction(part, StrCodec(), values, cache)
    assert tx.get("list") == [1]
    assert tx.get("n") == 5
    tx.set("n", 6)
    tx.commit(2)  # "list" cached from a read, "n" from the commit
    # The next transaction changes the cached list in place and writes it back, and more.
    lst = tx.get("list")
    lst.append(2)
    tx.set("list", lst)
    tx.set("n", 7)
    tx.delete("gone")
    tx.discard()  # aborted
    loads = values.loads_calls
    assert tx.get("list") == [1]  # the committed value, not the changed object
    assert tx.get("n") == 6
    assert values.loads_calls == loads + 2  # both decoded again from the store
    # And a commit after the abort caches what was committed.
    lst = tx.get("list")
    lst.append(3)
    tx.set("list", lst)
    tx.commit(3)
    assert tx.get("list") == [1, 3]
    assert part.get(b"list") == b"[1,3]"


def test_a_new_transaction_never_sees_another_ones_cached_values(part: StorePartition) -> None:
    """A partition that changes owner (rebalance, restore) starts from an empty segment."""
    cache = ReadCache(1 << 20)
    first = PartitionTransaction(part, StrCodec(), JsonCodec(), cache)
    first.set("a", 1)
    first.commit(1)
    part.write({b"a": b"2"}, 2)  # e.g. a restore from the changelog
    second = PartitionTransaction(part, StrCodec(), JsonCodec(), cache)
    assert second.get("a") == 2


def test_uncommitted_writes_are_estimated_against_their_budget() -> None:
    budget = UncommittedWrites(100_000)
    cache = ReadCache(1 << 20)
    txs = [
        PartitionTransaction(MemoryStore("t").partition(p), StrCodec(), RawCodec(), cache)
        for p in range(4)
    ]
    assert not budget.exceeded(txs)
    for i in range(100):
        txs[i % 4].set(f"k{i}", b"x" * 500)
    exact = sum(entry_size(f"k{i}", b"x" * 500) for i in range(100))
    assert not budget.exceeded(txs)
    assert abs(budget.bytes - exact) <= exact * 0.05
    for i in range(100, 200):
        txs[i % 4].set(f"k{i}", b"x" * 500)
    assert budget.exceeded(txs)
    for tx in txs:
        tx.commit(1)
    assert not budget.exceeded(txs) and budget.bytes == 0
    assert UncommittedWrites(None).exceeded(txs) is False


def test_record_values_are_cached_decoded(part: StorePartition) -> None:
    codec = RecordCodec(Item)
    cache = ReadCache(1 << 20)
    tx = PartitionTransaction(part, StrCodec(), codec, cache)
    tx.set("a", Item(name="apple", qty=2))
    tx.commit(1)
    assert tx.get("a") == Item(name="apple", qty=2)
    assert cache.bytes >= ENTRY_OVERHEAD + sizeof(Item(name="apple", qty=2))
