"""Versioned tables (KIP-889): as-of lookups, history retention, tombstone versions, and the
transactional rules every store follows (pending writes, commit, abort, restore from the
changelog), on both store kinds."""

from __future__ import annotations

from typing import Any

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state import PartitionTransaction, Store
from streams_app.state.composite import META_KEY, NO_TIME, STREAM_TIME
from streams_app.state.memory import MemoryStorePartition
from streams_app.state.versioned import (
    VersionedRecord,
    VersionedTransaction,
    VersionKeyCodec,
    versioned_codecs,
)

KEYS, VALUES = versioned_codecs(StrCodec(), JsonCodec())


def view(store: Store, retention: int = 1_000, partition: int = 0) -> VersionedTransaction:
    tx = PartitionTransaction(store.partition(partition), KEYS, VALUES)
    return VersionedTransaction(tx, KEYS, retention)


def test_version_keys_round_trip_and_sort_by_key_then_time() -> None:
    codec = VersionKeyCodec(JsonCodec())
    keys = [("a", t) for t in (-5, 0, 7, 1_700_000_000_000)] + [("ab", 0), (3, 1)]
    for key in keys:
        assert codec.loads(codec.dumps(key)) == key
    same_key = [codec.dumps(k) for k in keys[:4]]
    assert sorted(same_key) == same_key
    assert not codec.dumps(("ab", 0)).startswith(codec.prefix("a"))
    assert codec.dumps(STREAM_TIME) == META_KEY and codec.loads(META_KEY) is STREAM_TIME


def test_as_of_lookups_see_the_version_valid_then(store: Store) -> None:
    v = view(store)
    assert v.put("k", "v1", 10) and v.put("k", "v2", 20)
    assert v.put("k", None, 30)  # a tombstone version
    assert v.put("k", "v3", 40)
    assert v.get_as_of("k", 9) is None
    assert v.get_as_of("k", 10) == VersionedRecord("v1", 10, 20)
    assert v.get_as_of("k", 19) == VersionedRecord("v1", 10, 20)
    assert v.get_as_of("k", 29) == VersionedRecord("v2", 20, 30)
    assert v.get_as_of("k", 30) is None and v.get_as_of("k", 39) is None
    assert v.get_as_of("k", 1_000) == VersionedRecord("v3", 40, None)
    assert v.get("k") == VersionedRecord("v3", 40, None)
    assert v.get("other") is None
    assert v.observed == 40


def test_out_of_order_versions_slot_in_and_equal_times_replace(store: Store) -> None:
    v = view(store)
    v.put("k", "late", 50)
    v.put("k", "early", 10)  # older than the latest, within the history: a historical version
    assert v.get("k") == VersionedRecord("late", 50, None)
    assert v.get_as_of("k", 30) == VersionedRecord("early", 10, 50)
    v.put("k", "early-again", 10)
    assert [r.value for r in v.versions("k")] == ["early-again", "late"]
    assert v.observed == 50  # an older put does not move the observed time back


def test_history_retention_refuses_old_puts_and_hides_old_history(store: Store) -> None:
    v = view(store, retention=100)
    v.put("k", "a", 0)
    v.put("k", "b", 50)
    v.put("k", "c", 200)  # horizon 100: "b" is the value at the horizon, "a" is gone
    assert [(r.value, r.timestamp) for r in v.versions("k")] == [("b", 50), ("c", 200)]
    assert v.get_as_of("k", 120) == VersionedRecord("b", 50, 200)
    # Older than the horizon: only the latest version may answer, and it is newer.
    assert v.get_as_of("k", 60) is None
    assert not v.put("k", "too-old", 99)  # older than the horizon: refused, nothing changes
    assert v.delete("k", 99) is None
    assert [r.value for r in v.versions("k")] == ["b", "c"]
    assert v.put("k", "just-in", 100)
    assert v.get_as_of("k", 100) == VersionedRecord("just-in", 100, 200)
    # The latest version never expires: it answers any time after it, however old.
    v.put("other", "x", 10_000)
    assert v.get_as_of("k", 300) == VersionedRecord("c", 200, None)  # long before the horizon
    assert v.get_as_of("k", 150) is None  # before the horizon, and the latest is newer


def test_delete_returns_the_version_it_ends(store: Store) -> None:
    v = view(store)
    v.put("k", "a", 10)
    assert v.delete("k", 15) == VersionedRecord("a", 10, None)
    assert v.get("k") is None and v.get_as_of("k", 12) == VersionedRecord("a", 10, 15)
    assert v.delete("missing", 20) is None


def test_purge_sweeps_keys_not_written_again(store: Store) -> None:
    v = view(store, retention=100)
    for t, value in ((0, "a"), (10, "b"), (20, "c")):
        v.put("old", value, t)
    v.put("gone", "x", 0)
    v.put("gone", None, 10)  # deleted long ago
    v.tx.commit(1)
    v.put("new", "n", 1_000)  # horizon 900: "old" needs only "c", "gone" nothing
    assert v.purge() == 4
    assert [r.value for r in v.versions("old")] == ["c"] and v.versions("gone") == []
    assert sorted(v.keys()) == ["new", "old"]
    v.tx.commit(2)
    assert {VALUES.loads(raw) for key, raw in v.tx.partition.items() if key != META_KEY} == {
        "c",
        "n",
    }


def test_pending_versions_commit_abort_and_the_observed_time(store: Store) -> None:
    v = view(store)
    assert v.observed == NO_TIME
    v.put("k", "a", 10)
    v.tx.commit(5)
    v.put("k", "b", 20)
    v.put("k", None, 30)
    assert v.get("k") is None and v.observed == 30
    v.tx.discard()  # an abort: the pending versions and the time they moved go
    assert v.get("k") == VersionedRecord("a", 10, None) and v.observed == 10
    # The committed state, seen by a new task's view (a restart, a move).
    again = view(store)
    assert again.get_as_of("k", 15) == VersionedRecord("a", 10, None) and again.observed == 10


def test_sealed_commit_keeps_later_versions_pending(store: Store) -> None:
    v = view(store)
    v.put("k", "a", 10)
    v.tx.seal()  # a commit is in flight with "a"
    v.put("k", "b", 20)  # processed meanwhile
    v.tx.commit_sealed(7)
    assert [r.value for r in v.versions("k")] == ["a", "b"]
    assert view(store).get("k") == VersionedRecord("a", 10, None)  # only "a" committed
    v.tx.discard()
    assert v.get("k") == VersionedRecord("a", 10, None) and v.observed == 10


def test_changelog_replays_to_the_same_answers(store: Store) -> None:
    """What a commit sends to the changelog (``prepare()``) restores the same table."""
    v = view(store, retention=50)
    changelog: list[tuple[bytes, bytes | None]] = []

    def commit(offset: int) -> None:
        changelog.extend(v.tx.prepare().items())
        v.tx.commit(offset)

    steps: list[tuple[str, Any, int]] = [
        ("a", 1, 0),
        ("a", 2, 30),
        ("b", 1, 40),
        ("a", None, 60),
        ("a", 3, 100),
        ("b", 2, 45),
        ("c", 1, 200),
    ]
    for offset, (key, value, t) in enumerate(steps):
        v.put(key, value, t)
        if offset % 2:
            commit(offset)
    commit(len(steps))
    v.purge()
    commit(len(steps) + 1)
    restored = MemoryStorePartition()
    for raw_key, raw_value in changelog:  # a compacted changelog: the last value per key
        restored.write({raw_key: raw_value}, 0)
    replica = VersionedTransaction(PartitionTransaction(restored, KEYS, VALUES), KEYS, 50)
    assert dict(restored.items()) == dict(v.tx.partition.items())
    for key in ("a", "b", "c"):
        for t in range(0, 260, 5):
            assert replica.get_as_of(key, t) == v.get_as_of(key, t), (key, t)
    assert replica.observed == v.observed == 200
