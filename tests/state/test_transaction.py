"""PartitionTransaction over both store kinds: buffering, encoding once, commit and discard."""

from __future__ import annotations

from typing import Any

import pytest

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state import DELETED, PartitionTransaction, ReadCache, Store


class CountingCodec(JsonCodec):
    def __init__(self) -> None:
        self.dumps_calls = 0
        self.loads_calls = 0

    def dumps(self, obj: Any) -> bytes:
        self.dumps_calls += 1
        return super().dumps(obj)

    def loads(self, data: bytes) -> Any:
        self.loads_calls += 1
        return super().loads(data)


def test_reads_see_own_writes_before_commit(store: Store) -> None:
    part = store.partition(0)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec())
    assert tx.get("a", None) is None
    with pytest.raises(KeyError):
        tx.get("a")
    tx.set("a", 1)
    tx.set("b", {"x": [1, 2]})
    assert tx.get("a") == 1
    assert tx.get("b") == {"x": [1, 2]}
    assert tx.contains("a")
    assert tx.dirty
    # Nothing reached the store yet.
    assert part.get(b"a") is None
    assert part.changelog_offset is None


def test_delete_hides_committed_value_until_commit_removes_it(store: Store) -> None:
    part = store.partition(0)
    part.write({b"a": b"1", b"b": b"2"}, 10)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec())
    assert tx.get("a") == 1
    tx.delete("a")
    assert not tx.contains("a")
    assert tx.get("a", "gone") == "gone"
    assert part.get(b"a") == b"1"
    assert dict(tx.dirty_items()) == {"a": DELETED}
    assert tx.prepare() == {b"a": None}
    tx.commit(11)
    assert part.get(b"a") is None
    assert part.get(b"b") == b"2"
    assert part.changelog_offset == 11
    # Set after delete within one transaction: the last one wins.
    tx.delete("b")
    tx.set("b", 3)
    tx.commit(12)
    assert part.get(b"b") == b"3"


def test_prepare_encodes_each_dirty_key_once(store: Store) -> None:
    values = CountingCodec()
    tx = PartitionTransaction(store.partition(0), StrCodec(), values)
    for i in range(1000):
        tx.set("counter", i)
        tx.set(f"k{i % 10}", i)
    assert values.dumps_calls == 0  # values stay decoded while the transaction is open
    first = tx.prepare()
    assert values.dumps_calls == 11
    assert tx.prepare() is first  # prepared once; the changelog and the store share it
    assert values.dumps_calls == 11
    assert first[b"counter"] == b"999"
    tx.commit(5)
    assert values.dumps_calls == 11  # commit reuses the prepared batch
    # A write after prepare invalidates it.
    tx.set("counter", 1000)
    assert tx.prepare() == {b"counter": b"1000"}


def test_commit_writes_batch_and_offset_and_keeps_a_read_cache(store: Store) -> None:
    part = store.partition(3)
    values = CountingCodec()
    tx = PartitionTransaction(part, StrCodec(), values, ReadCache(1 << 20))
    tx.set("a", [1])
    tx.set("b", "two")
    tx.commit(42)
    assert part.changelog_offset == 42
    assert dict(part.items()) == {b"a": b"[1]", b"b": b'"two"'}
    assert not tx.dirty
    assert tx.prepare() == {}
    assert tx.get("a") == [1]
    assert values.loads_calls == 0  # served from the cache, not decoded again
    # Without a cache every read of a key this transaction did not write decodes it.
    uncached = PartitionTransaction(part, StrCodec(), values)
    assert uncached.get("a") == [1]
    assert uncached.get("a") == [1]
    assert values.loads_calls == 2
    # An empty commit still moves the offset (the changelog moved past our markers).
    tx.commit(44)
    assert part.changelog_offset == 44
    assert dict(part.items()) == {b"a": b"[1]", b"b": b'"two"'}


def test_discard_forgets_pending_writes_and_cached_reads(store: Store) -> None:
    part = store.partition(0)
    part.write({b"a": b"1"}, 1)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec())
    tx.set("a", 2)
    tx.set("new", 3)
    tx.delete("a")
    tx.discard()
    assert not tx.dirty
    assert tx.get("a") == 1
    assert tx.get("new", None) is None
    assert part.changelog_offset == 1
    assert dict(part.items()) == {b"a": b"1"}


def test_items_never_show_bookkeeping_and_come_in_key_order(store: Store) -> None:
    part = store.partition(0)
    keys = [b"", b"\x00", b"changelog-offset", b"format-version", b"__streams_app", b"\xff" * 3]
    part.write(dict.fromkeys(keys, b"v"), 7)
    assert [k for k, _ in part.items()] == sorted(keys)
    assert all(v == b"v" for _, v in part.items())
    part.write({b"changelog-offset": None}, 8)
    assert part.changelog_offset == 8
    assert b"changelog-offset" not in dict(part.items())


def test_wipe_drops_data_and_offset(store: Store) -> None:
    part = store.partition(0)
    part.write({b"a": b"1", b"\xff\xff\xff": b"2", b"": b"3"}, 9)
    part.wipe()
    assert part.changelog_offset is None
    assert list(part.items()) == []
    assert part.get(b"") is None
    part.write({b"b": b"1"}, 1)
    assert dict(part.items()) == {b"b": b"1"}


def test_store_keeps_released_partitions_for_a_later_return(store: Store) -> None:
    store.partition(1).write({b"k": b"v"}, 3)
    assert store.partition(1) is store.partition(1)
    store.close_partition(1)
    again = store.partition(1)
    assert again.changelog_offset == 3
    assert again.get(b"k") == b"v"
    store.close_partition(99)  # never opened: nothing to do


def test_closed_partition_refuses_use(store: Store) -> None:
    part = store.partition(0)
    store.close_partition(0)
    with pytest.raises(RuntimeError):
        part.write({b"a": b"1"}, 1)


# -- sealed writes: a commit in flight while the worker processes on (runtime/commit.py) ------


def test_sealed_writes_reach_the_store_only_at_commit_sealed_and_later_ones_stay_pending(
    store: Store,
) -> None:
    part = store.partition(0)
    part.write({b"kept": b"1", b"gone": b"2"}, 5)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec(), ReadCache(1 << 20))
    tx.set("a", 1)
    tx.set("b", 1)
    tx.delete("gone")
    tx.seal()
    assert tx.sealed
    # Processing goes on: reads see the sealed writes, and later writes win over them.
    assert tx.get("a") == 1 and not tx.contains("gone")
    tx.set("b", 2)
    tx.set("c", 1)
    assert tx.get("b") == 2
    assert part.get(b"a") is None  # nothing reached the store while the commit is in flight
    tx.commit_sealed(6)
    assert not tx.sealed
    # The store holds exactly what was sealed, with its changelog offset.
    assert part.get(b"a") == b"1" and part.get(b"b") == b"1" and part.get(b"gone") is None
    assert part.changelog_offset == 6
    # What was written since is still pending, for the next commit's changelog and store.
    assert dict(tx.dirty_items()) == {"b": 2, "c": 1}
    assert tx.prepare() == {b"b": b"2", b"c": b"1"}
    # Reads still see the newest values; the committed ones come from the cache or store.
    assert tx.get("a") == 1 and tx.get("b") == 2 and tx.get("kept") == 1
    tx.commit(7)
    assert part.get(b"b") == b"2" and part.get(b"c") == b"1"
    assert not tx.dirty


def test_a_key_rewritten_with_the_same_object_while_sealed_stays_pending(store: Store) -> None:
    # A mutable value changed in place and written back is the same object: it must still be
    # written again by the next commit, or the change is lost.
    part = store.partition(0)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec(), ReadCache(1 << 20))
    value = [1]
    tx.set("k", value)
    tx.seal()
    value.append(2)
    tx.set("k", value)
    tx.commit_sealed(1)
    assert part.get(b"k") == b"[1]"
    assert dict(tx.dirty_items()) == {"k": [1, 2]}
    tx.commit(2)
    assert part.get(b"k") == b"[1,2]"


def test_discard_while_sealed_drops_sealed_and_later_writes(store: Store) -> None:
    part = store.partition(0)
    part.write({b"a": b"1"}, 3)
    tx = PartitionTransaction(part, StrCodec(), JsonCodec(), ReadCache(1 << 20))
    tx.set("a", 2)
    tx.seal()
    tx.set("b", 1)
    tx.discard()  # the commit in flight failed: the abort undoes both
    assert not tx.sealed and not tx.dirty
    assert tx.get("a") == 1 and tx.get("b", None) is None
    assert part.get(b"a") == b"1" and part.changelog_offset == 3
