"""The subscription store of a foreign-key join: a right row's subscribers by one prefix
scan, merged with pending (un)subscriptions, replaced per left row, on both store kinds."""

from __future__ import annotations

from streams_app.codecs import JsonCodec, StrCodec
from streams_app.state import PartitionTransaction, Store
from streams_app.state.subscriptions import (
    Subscription,
    SubscriptionKeyCodec,
    SubscriptionTransaction,
    SubscriptionValueCodec,
    value_hash,
)

CODEC = SubscriptionKeyCodec(StrCodec(), JsonCodec())


def view(store: Store) -> SubscriptionTransaction:
    tx = PartitionTransaction(store.partition(0), CODEC, SubscriptionValueCodec())
    return SubscriptionTransaction(tx, CODEC)


def test_keys_round_trip_and_group_by_foreign_key() -> None:
    entries = [("c1", "o2"), ("c1", "o10"), ("c10", "o1"), ("c", 5)]
    for entry in entries:
        assert CODEC.loads(CODEC.dumps(entry)) == entry
    # "c1" is not a prefix of "c10" as a foreign key: the length comes first.
    assert not CODEC.dumps(("c10", "o1")).startswith(CODEC.prefix("c1"))
    assert len(value_hash(b"x")) == 16 and value_hash(b"x") != value_hash(b"y")


def test_subscribers_merge_committed_and_pending(store: Store) -> None:
    v = view(store)
    h1, h2 = value_hash(b"order 1"), value_hash(b"order 2")
    v.subscribe("c1", "o1", h1, 0)
    v.subscribe("c1", "o2", h2, 1)
    v.subscribe("c2", "o3", h1, 0)
    v.tx.commit(1)
    h1b = value_hash(b"order 1, changed")
    v.subscribe("c1", "o1", h1b, 0)  # the same row again: its new value's hash
    v.unsubscribe("c1", "o2")  # its foreign key changed
    v.subscribe("c1", "o4", h2, 1)
    assert v.subscribers("c1") == [Subscription("o1", h1b, 0), Subscription("o4", h2, 1)]
    assert v.subscribers("c2") == [Subscription("o3", h1, 0)]
    assert v.subscribers("nobody") == []
    assert v.get("c1", "o2") is None and v.get("c1", "o1") == Subscription("o1", h1b, 0)
    v.tx.discard()  # abort: the committed subscriptions only
    again = view(store)
    assert [s.left_key for s in again.subscribers("c1")] == ["o1", "o2"]
    assert again.get("c1", "o1") == Subscription("o1", h1, 0)


def test_unsubscribing_what_is_not_there_writes_nothing(store: Store) -> None:
    v = view(store)
    v.unsubscribe("c1", "o1")
    assert not v.tx.dirty
