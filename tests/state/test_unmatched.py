"""The store of unmatched left/outer join records (KAFKA-10847): due exactly when their window
closes, in the order they close (asymmetric windows included), never once matched, with the
join's stream time committed alongside, on both store kinds."""

from __future__ import annotations

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state import PartitionTransaction, Store
from streams_app.state.composite import META_KEY, NO_TIME, STREAM_TIME
from streams_app.state.unmatched import (
    LEFT,
    RIGHT,
    Unmatched,
    UnmatchedKeyCodec,
    UnmatchedTransaction,
    unmatched_codecs,
)

# A window of before=2, after=10, grace=3: a left record closes 13 after its time, a right one 5.
CLOSE_AFTER = (13, 5)


def view(store: Store) -> UnmatchedTransaction:
    keys, values = unmatched_codecs(StrCodec(), JsonCodec(), StrCodec())
    tx = PartitionTransaction(store.partition(0), keys, values)
    return UnmatchedTransaction(tx, keys, CLOSE_AFTER)


def test_keys_round_trip_and_sort_by_close_time_first() -> None:
    codec = UnmatchedKeyCodec(JsonCodec())
    entries = [(13, 0, LEFT, "a", 1), (10, 5, RIGHT, "a", 2), (13, 0, RIGHT, "a", 0)]
    for entry in entries:
        assert codec.loads(codec.dumps(entry)) == entry
    assert sorted(entries, key=codec.dumps) == [
        (10, 5, RIGHT, "a", 2),
        (13, 0, LEFT, "a", 1),
        (13, 0, RIGHT, "a", 0),
    ]
    assert codec.dumps(STREAM_TIME) == META_KEY and codec.loads(META_KEY) is STREAM_TIME


def test_records_are_due_when_their_own_window_closes(store: Store) -> None:
    v = view(store)
    assert v.stream_time == NO_TIME
    v.advance(5)
    v.add(LEFT, "a", 0, 1, {"l": 0})  # closes at 13
    v.add(RIGHT, "b", 5, 2, "r5")  # closes at 10: later timestamp, earlier close
    assert not v.closed(LEFT, 0) and v.next_close == 10
    v.advance(10)
    assert v.due() == []  # due when stream time *passes* the close
    v.advance(11)
    assert v.due() == [Unmatched(RIGHT, "b", 5, 2, "r5")]
    assert v.due() == []
    v.advance(13)
    assert v.due() == []
    v.advance(14)
    assert v.due() == [Unmatched(LEFT, "a", 0, 1, {"l": 0})]
    assert list(v.waiting()) == [] and v.next_close is None
    assert v.closed(LEFT, 0) and v.closed(RIGHT, 8) and not v.closed(RIGHT, 9)


def test_a_matched_record_is_never_due(store: Store) -> None:
    v = view(store)
    v.advance(0)
    v.add(LEFT, "a", 0, 1, "x")
    v.add(LEFT, "a", 0, 2, "y")  # a duplicate: the same key and time, its own entry
    v.tx.commit(1)
    assert v.remove(LEFT, "a", 0, 1)  # committed, now matched
    assert not v.remove(LEFT, "a", 0, 1)  # already removed
    assert not v.remove(LEFT, "a", 0, 99)  # never waited (matched when it arrived)
    assert not v.remove(RIGHT, "a", 0, 2)  # the other side's record of that seq
    v.advance(100)
    assert v.due() == [Unmatched(LEFT, "a", 0, 2, "y")]


def test_due_merges_committed_and_pending_in_close_order(store: Store) -> None:
    v = view(store)
    v.advance(0)
    v.add(LEFT, "k", 0, 1, "l0")  # closes 13
    v.add(RIGHT, "k", 4, 2, "r4")  # closes 9
    v.tx.commit(1)
    v.add(RIGHT, "k", 6, 3, "r6")  # pending, closes 11
    v.add(LEFT, "j", -2, 4, None)  # pending, closes 11 too, earlier timestamp; value None
    v.advance(50)
    assert v.due() == [
        Unmatched(RIGHT, "k", 4, 2, "r4"),
        Unmatched(LEFT, "j", -2, 4, None),
        Unmatched(RIGHT, "k", 6, 3, "r6"),
        Unmatched(LEFT, "k", 0, 1, "l0"),
    ]
    v.tx.commit(2)
    assert [k for k, _ in v.tx.partition.items()] == [META_KEY]  # only the stream time is left


def test_the_stream_time_and_releases_commit_together(store: Store) -> None:
    v = view(store)
    v.advance(0)
    v.add(LEFT, "a", 0, 1, "x")
    v.tx.commit(1)
    v.advance(20)
    assert len(v.due()) == 1
    v.tx.discard()  # the transaction that released it aborted: it waits again, time is back
    again = view(store)
    assert again.stream_time == 0 and [u.seq for u in again.waiting()] == [1]
    again.advance(20)
    assert [u.seq for u in again.due()] == [1]
    again.tx.commit(2)
    after_restart = view(store)
    assert after_restart.stream_time == 20 and list(after_restart.waiting()) == []


def test_as_a_stream_table_grace_buffer(store: Store) -> None:
    """The versioned stream-table join's grace buffer is this store with ``close_after =
    grace - 1`` on the stream side: a record at ``t`` is released once the stream side's time
    reaches ``t + grace`` (Kafka Streams' time-ordered buffer evicts ``t <= observed - grace``),
    in time order, then key, then arrival."""
    grace = 100
    keys, values = unmatched_codecs(StrCodec(), JsonCodec(), JsonCodec())
    tx = PartitionTransaction(store.partition(0), keys, values)
    buffer = UnmatchedTransaction(tx, keys, (grace - 1, grace - 1))
    for offset, (key, t) in enumerate([("b", 1_000), ("a", 1_000), ("c", 950), ("a", 1_050)]):
        buffer.advance(t)
        buffer.add(LEFT, key, t, offset, f"{key}@{t}")
    buffer.advance(1_099)
    assert [u.value for u in buffer.due()] == ["c@950"]
    buffer.advance(1_100)  # reaches 1,000 + grace: both records at 1,000, key order
    assert [u.value for u in buffer.due()] == ["a@1000", "b@1000"]
    assert [u.value for u in buffer.waiting()] == ["a@1050"]
