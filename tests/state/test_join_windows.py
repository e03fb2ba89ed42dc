"""The buffer of a stream-stream join side: duplicates kept, fetches by key and time range
across segments, retention as Kafka Streams' segmented window stores apply it, expiry by whole
segments with changelog tombstones, and the transactional rules, on both store kinds, with
and without the fetch cache (every test here runs both ways: the cache must never change what
a fetch returns)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state import PartitionTransaction, Store
from streams_app.state.base import DELETED
from streams_app.state.cache import ReadCache
from streams_app.state.composite import META_KEY, STREAM_TIME
from streams_app.state.join_windows import (
    SCAN_CACHE_ENTRIES,
    Buffered,
    JoinWindowKeyCodec,
    JoinWindowTransaction,
    default_segment_ms,
    join_window_codecs,
)

SEGMENT = 100
#: The worker read cache the views of the running test keep their fetches in (None: none).
_SCANS: list[ReadCache | None] = [None]


@pytest.fixture(autouse=True, params=["uncached", "cached"])
def scan_cache(request: pytest.FixtureRequest) -> Iterator[ReadCache | None]:
    _SCANS[0] = ReadCache(1 << 20) if request.param == "cached" else None
    try:
        yield _SCANS[0]
    finally:
        _SCANS[0] = None


def view(store: Store, retention: int = 250, segment: int = SEGMENT) -> JoinWindowTransaction:
    keys, values = join_window_codecs(StrCodec(), JsonCodec(), segment)
    tx = PartitionTransaction(store.partition(0), keys, values, scan_cache=_SCANS[0])
    return JoinWindowTransaction(tx, keys, retention)


def test_keys_round_trip_and_sort_by_segment_key_time_seq() -> None:
    codec = JoinWindowKeyCodec(JsonCodec(), SEGMENT)
    entries = [("a", 5, 0), ("a", 5, 1), ("a", 99, 0), ("b", 0, 0), ("a", 100, 0), ("a", -1, 3)]
    for entry in entries:
        assert codec.loads(codec.dumps(entry)) == entry
    ordered = sorted(entries, key=codec.dumps)
    assert ordered == [
        ("a", -1, 3),  # segment -1
        ("a", 5, 0),
        ("a", 5, 1),
        ("a", 99, 0),
        ("b", 0, 0),  # segment 0, key "b" after key "a"
        ("a", 100, 0),  # segment 1
    ]
    assert codec.dumps(STREAM_TIME) == META_KEY and codec.loads(META_KEY) is STREAM_TIME
    assert default_segment_ms(10_000) == 60_000 and default_segment_ms(600_000) == 300_000


def test_duplicates_are_kept_and_fetched_in_time_then_seq_order(store: Store) -> None:
    v = view(store)
    v.put("k", 50, 7, "second")
    v.put("k", 50, 3, "first")  # the same key and time: a duplicate, not an overwrite
    v.put("k", 40, 9, "earlier")
    v.put("other", 50, 1, "x")
    assert v.fetch("k", 0, 100) == [
        Buffered(40, 9, "earlier"),
        Buffered(50, 3, "first"),
        Buffered(50, 7, "second"),
    ]
    v.tx.commit(1)
    v.put("k", 50, 5, "third")  # pending, between two committed duplicates
    assert [b.value for b in v.fetch("k", 50, 50)] == ["first", "third", "second"]


def test_fetch_bounds_are_inclusive_and_span_segments(store: Store) -> None:
    v = view(store, retention=10_000)
    for t in range(0, 400, 50):
        v.put("k", t, t, t)
    v.tx.commit(1)
    v.put("k", 420, 420, 420)
    assert [b.timestamp for b in v.fetch("k", 50, 250)] == [50, 100, 150, 200, 250]
    assert [b.timestamp for b in v.fetch("k", 99, 101)] == [100]  # one either side of a boundary
    assert [b.timestamp for b in v.fetch("k", 330, 500)] == [350, 420]
    assert v.fetch("k", 251, 299) == [] and v.fetch("nobody", 0, 500) == []


def test_retention_follows_the_stores_observed_time(store: Store) -> None:
    v = view(store, retention=100)
    assert v.put("k", 0, 0, "a")
    assert v.put("k", 60, 1, "b")
    assert v.put("k", 150, 2, "c")  # observed 150: retained from 51 (ts > observed - 100)
    assert [b.value for b in v.fetch("k", 0, 1_000)] == ["b", "c"]
    assert not v.put("k", 50, 3, "late")  # not retained when it arrives: not stored
    assert v.put("k", 51, 4, "just")
    assert v.put("k", 300, 5, "x")  # moves the observed time to 300
    assert v.observed == 300
    assert [b.value for b in v.fetch("k", 0, 1_000)] == ["x"]  # 201 and up only


def test_expiry_deletes_whole_segments_with_tombstones(store: Store) -> None:
    v = view(store, retention=150)
    for t in (10, 90, 120, 210, 260):
        v.put("k", t, t, t)
    v.tx.commit(1)
    v.put("j", 400, 1, "now")  # observed 400: retained from 251, segments 0 and 1 are past
    assert v.expire() == 3
    assert v.expire() == 0  # nothing more until time moves on
    tombstones = {k for k, value in v.tx.prepare().items() if value is None}
    codec = v.codec
    assert tombstones == {codec.dumps(("k", t, t)) for t in (10, 90, 120)}
    v.tx.commit(2)
    remaining = sorted((key, b.timestamp) for key, b in v.entries())
    # 210 is past retention too, but its segment (2) still holds a retained entry (260): it stays
    # on disk until the segment goes, and fetches do not see it.
    assert remaining == [("j", 400), ("k", 210), ("k", 260)]
    assert [b.timestamp for b in v.fetch("k", 0, 1_000)] == [260]


def test_expiry_covers_pending_entries_and_abort_restores_them(store: Store) -> None:
    v = view(store, retention=100)
    v.put("k", 10, 1, "a")
    v.tx.commit(1)
    v.put("k", 20, 2, "b")  # pending, then expired in the same transaction
    v.put("k", 500, 3, "c")
    assert v.expire() == 2
    assert [(k, b.timestamp) for k, b in v.entries()] == [("k", 500)]
    v.tx.discard()  # abort: back to the committed entry and its observed time
    again = view(store, retention=100)
    assert [(k, b.timestamp) for k, b in again.entries()] == [("k", 10)]
    assert again.observed == 10


def test_delete_removes_one_duplicate(store: Store) -> None:
    v = view(store)
    v.put("k", 5, 1, "a")
    v.put("k", 5, 2, "b")
    v.tx.commit(1)
    v.delete("k", 5, 1)
    v.delete("k", 5, 99)  # absent: nothing written
    assert [b.value for b in v.fetch("k", 0, 10)] == ["b"]
    assert len(v.tx.prepare()) == 1


def test_segments_seen_empty_are_skipped_until_a_put_fills_them(store: Store) -> None:
    """A view seeks only in segments that may hold entries (one look per segment, then kept up
    to date by its puts): a segment looked at while empty, then written and committed, is
    found; a new view over the same store looks again."""
    v = view(store, retention=10_000)
    v.put("k", 50, 0, "seg0")
    v.tx.commit(1)
    assert [b.value for b in v.fetch("k", 0, 999)] == ["seg0"]  # segments 1-9 looked: empty
    v.put("k", 250, 1, "seg2")  # segment 2, seen empty a moment ago
    v.tx.commit(2)
    assert [b.value for b in v.fetch("k", 0, 999)] == ["seg0", "seg2"]
    v.put("other", 480, 2, "seg4")
    v.tx.commit(3)
    fresh = view(store, retention=10_000)
    assert [b.value for b in fresh.fetch("k", 0, 999)] == ["seg0", "seg2"]
    assert [b.value for b in fresh.fetch("other", 0, 999)] == ["seg4"]


def test_fetch_never_reads_past_the_observed_time(store: Store) -> None:
    """Nothing is stored after the observed time, so a fetch asking beyond it gets what it
    would have got, pending entries included."""
    v = view(store, retention=10_000)
    v.put("k", 120, 0, "a")
    v.tx.commit(1)
    v.put("k", 130, 1, "b")  # pending: observed 130
    assert [b.value for b in v.fetch("k", 100, 100_000)] == ["a", "b"]
    assert v.fetch("k", 131, 100_000) == []


def test_a_record_buffered_with_its_bytes_is_stored_as_those_bytes(store: Store) -> None:
    """``put(..., raw)``: the changelog and the store get the bytes the record came in (not
    the value encoded again); reads give the value, pending or committed."""
    v = view(store)
    raw = b'{"b": 1,  "a": [1, 2]}'  # not how the codec would encode it: spaces, key order
    v.put("k", 5, 1, {"b": 1, "a": [1, 2]}, raw)
    v.put("k", 6, 2, {"c": 3})  # no bytes: encoded by the codec
    assert [b.value for b in v.fetch("k", 0, 10)] == [{"b": 1, "a": [1, 2]}, {"c": 3}]
    assert [b.value for _, b in v.entries()] == [{"b": 1, "a": [1, 2]}, {"c": 3}]
    batch = v.tx.prepare()
    assert batch[v.codec.dumps(("k", 5, 1))] == b"\x01" + raw
    assert batch[v.codec.dumps(("k", 6, 2))] == b"\x01" + JsonCodec().dumps({"c": 3})
    v.tx.commit(1)
    assert [b.value for b in v.fetch("k", 0, 10)] == [{"b": 1, "a": [1, 2]}, {"c": 3}]


def test_hints_of_committed_writes_are_pruned_while_commits_are_in_flight(store: Store) -> None:
    """A worker that processes while each commit is in flight may never see its transaction
    without pending writes: the hints of the writes that committed are pruned all the same, and
    fetches find those entries in the store."""
    v = view(store, retention=10_000_000)
    seq = 0
    for commit in range(1, 21):
        v.tx.seal()
        for _ in range(1_000):  # written while the sealed commit is in flight
            v.put(f"k{seq % 7}", seq, seq, seq)
            seq += 1
        v.tx.commit_sealed(commit)
        assert v.tx.dirty  # what came meanwhile stays pending: never an empty transaction
    # Bounded by what is pending (1,000 sealed and 1,000 new at most) and a pruning's slack,
    # not by the 20,000 written so far.
    hinted = len(v._pending.all())
    assert v.tx.pending_count <= hinted <= 2 * 2_000 + 1_024
    assert [b.value for b in v.fetch("k3", 0, seq)] == list(range(3, seq, 7))
    v.delete("k3", 10, 10)
    assert [b.value for b in v.fetch("k3", 0, 40)] == [3, 17, 24, 31, 38]


def test_the_observed_time_commits_with_the_puts_that_moved_it(store: Store) -> None:
    """A put leaves the stream time entry to the commit (written when the transaction is
    prepared): each commit, plain or sealed while puts go on, carries the time of what it
    carries; a record observed without being stored writes it at once; a discard forgets it."""
    v = view(store, retention=1_000)
    v.put("k", 10, 0, "a")
    v.put("k", 20, 1, "b")
    assert v.tx.pending(STREAM_TIME, None) is None  # not written per put
    assert v.tx.prepare()[META_KEY] is not None
    v.tx.commit(1)
    assert view(store).observed == 20  # a new view reads it from the store
    v.tx.seal()  # nothing new: the seal carries no time
    v.put("k", 30, 2, "c")  # meanwhile
    v.tx.commit_sealed(2)
    assert view(store).observed == 20
    v.tx.seal()  # carries 30
    v.put("k", 25, 3, "d")  # older: the time stays 30
    v.tx.commit_sealed(3)
    assert view(store).observed == 30
    v.tx.commit(4)
    assert view(store).observed == 30
    v.observe(40)  # not stored, the time moves: written now, the only pending write
    assert v.tx.dirty and v.tx.pending(STREAM_TIME, None).ms == 40
    v.tx.commit(5)
    assert view(store).observed == 40
    v.put("k", 50, 4, "e")
    v.tx.discard()  # the view goes with it (a new one is made after an abort)
    v = view(store, retention=1_000)
    v.tx.commit(6)
    assert v.observed == 40 and view(store).observed == 40


class _CountingScans:
    """Counts the range scans a store partition serves (to see what the cache saved)."""

    def __init__(self, v: JoinWindowTransaction) -> None:
        self.scans = 0
        partition = v.tx.partition
        real = partition.range_items

        def counted(*args: object) -> list[tuple[bytes, bytes]]:
            self.scans += 1
            return real(*args)  # type: ignore[arg-type]

        partition.range_items = counted  # type: ignore[method-assign]


@pytest.mark.parametrize("scan_cache", ["cached"], indirect=True)
def test_the_fetch_cache_serves_repeated_fetches_and_follows_every_write(
    store: Store, scan_cache: ReadCache | None
) -> None:
    """One record fetched by many partners is read from the store once; a write of its key
    (pending: merged from the transaction; committed: read again), a delete, an abort and an
    expiry are all seen by the next fetch, as without the cache."""
    assert scan_cache is not None
    v = view(store, retention=1_000)
    v.put("user", 10, 1, {"tier": "gold"})
    v.put("other", 20, 2, {"tier": "tin"})
    v.tx.commit(1)
    counted = _CountingScans(v)
    encoded = _count_key_dumps(v)
    for t in range(10, 60):
        assert v.fetch("user", t - 100, t + 100) == [Buffered(10, 1, {"tier": "gold"})]
    assert counted.scans == 1 and scan_cache.hits >= 49
    assert encoded == [1]  # the key encoded for the one read of the store, not per fetch
    assert v.fetch("user", 11, 100) == []  # filtered by time from the cached segment
    v.put("user", 30, 3, {"tier": "silver"})  # pending: merged, not from the cache
    assert [b.value["tier"] for b in v.fetch("user", 0, 100)] == ["gold", "silver"]
    v.tx.commit(2)
    assert [b.value["tier"] for b in v.fetch("user", 0, 100)] == ["gold", "silver"]
    v.delete("user", 10, 1)
    v.tx.commit(3)
    assert [b.value["tier"] for b in v.fetch("user", 0, 100)] == ["silver"]
    v.put("user", 40, 4, {"tier": "lead"})
    v.tx.discard()  # abort: the cache is emptied with the transaction
    assert len(v.tx.scans or ()) == 0
    again = view(store, retention=1_000)
    assert [b.value["tier"] for b in again.fetch("user", 0, 100)] == ["silver"]
    assert [b.value["tier"] for b in again.fetch("other", 0, 100)] == ["tin"]
    again.put("late", 2_500, 5, {"tier": "new"})  # observed 2,500: segments below 15 go
    assert again.expire() == 2
    again.tx.commit(4)
    assert again.fetch("user", 0, 3_000) == [] and again.fetch("other", 0, 3_000) == []


def _count_key_dumps(v: JoinWindowTransaction) -> list[int]:
    """Count the calls of the user key codec's ``dumps`` from now on (a one-item list)."""
    codec = v.codec.key_codec
    calls = [0]
    dumps = codec.dumps

    def counted(key: object) -> bytes:
        calls[0] += 1
        return dumps(key)

    codec.dumps = counted  # type: ignore[method-assign]
    return calls


@pytest.mark.parametrize("scan_cache", ["cached"], indirect=True)
def test_a_key_with_more_entries_than_the_cache_keeps_is_scanned(
    store: Store, scan_cache: ReadCache | None
) -> None:
    """Past SCAN_CACHE_ENTRIES in one segment, the cache keeps only that there are more, and
    each fetch scans its own time range: the many side of a join is not copied into memory."""
    assert scan_cache is not None
    v = view(store, retention=10_000)
    many = SCAN_CACHE_ENTRIES + 4
    for seq in range(many):
        v.put("busy", seq, seq, seq)
    v.tx.commit(1)
    counted = _CountingScans(v)
    assert [b.value for b in v.fetch("busy", 0, 99)] == list(range(many))
    assert [b.value for b in v.fetch("busy", 3, 5)] == [3, 4, 5]
    assert counted.scans == 3  # the bounded look, then one scan per fetch
    assert scan_cache.bytes < 1_000  # the marker, not the entries


def test_put_all_stores_what_puts_one_by_one_store(store: Store) -> None:
    """``put_all`` (an inner join's run of puts at once) leaves the transaction, its hints,
    the observed time and the fetch cache as the same puts one by one: records with and
    without their bytes, duplicates at one time, out of order, and one too late to keep."""
    rows = [
        ("a", 10, 1, {"n": 1}, b'{"n":  1}'),
        ("b", 120, 2, {"n": 2}, None),
        ("a", 120, 3, {"n": 3}, None),
        ("a", 120, 4, {"n": 4}, b'{"n": 4}'),
        ("c", 990, 5, {"n": 5}, None),
        ("a", 800, 6, {"n": 6}, None),  # retained: 990 - 250 < 800
        ("b", 600, 7, {"n": 7}, None),  # too late: 600 <= 990 - 250
    ]
    one, many = view(store), view(store)
    one.fetch("a", 0, 2_000)  # a cached (empty) segment the puts must forget, if cached
    many.fetch("a", 0, 2_000)
    late = [row for row in rows if not one.put(*row)]
    assert many.put_all(rows) == len(late) == 1
    assert many.tx.prepare() == one.tx.prepare()
    assert list(many.tx.pending_keys()) == list(one.tx.pending_keys())
    assert many.observed == one.observed == 990
    for key in ("a", "b", "c"):
        assert many.fetch(key, 0, 2_000) == one.fetch(key, 0, 2_000)
    assert [b.value["n"] for b in many.fetch("a", 0, 2_000)] == [6]  # 10 and 120 expired
    many.tx.commit(1)
    assert [b.value["n"] for b in many.fetch("a", 750, 2_000)] == [6]


def test_a_buffers_commit_encodes_its_writes_as_its_codecs_do(store: Store) -> None:
    """A buffer's pending writes are its stored bytes, so ``prepare`` copies them and encodes
    only the rest (``PartitionTransaction._prepare_as_is``): the stream time entry, a
    deletion, a value not yet encoded. What it gives must be each write through the store's
    own codecs, as every other store's ``prepare`` gives it."""
    v = view(store)
    for seq, (key, t) in enumerate([("a", 10), ("b", 20), ("a", 30), ("c", 40)]):
        v.put(key, t, seq, {"n": seq}, b'{"n": %d}' % seq)
    v.tx.commit(1)
    v.put("d", 50, 9, {"n": 9})  # no bytes at hand: stored encoded
    v.delete("a", 30, 2)  # a deletion of a committed entry
    raw_entry = v.codec.entry("e", 60, 10)
    v.tx.set(raw_entry, {"n": 10})  # a decoded value under a key already encoded
    keys, values = v.tx.key_codec, v.tx.value_codec
    prepared = v.tx.prepare()  # the stream time entry is written here (before_prepare)
    written = list(v.tx.dirty_items())
    assert any(key is STREAM_TIME for key, _ in written)
    assert prepared == {
        keys.dumps(key): None if value is DELETED else values.dumps(value) for key, value in written
    }
    assert prepared[META_KEY] is not None and prepared[v.codec.entry("a", 30, 2)] is None
    assert all(type(k) is bytes and type(val) in (bytes, type(None)) for k, val in prepared.items())
