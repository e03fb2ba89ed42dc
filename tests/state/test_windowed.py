"""Windowed state: window keys sort by (key, start), range scans find a key's windows on both
store kinds, and the windowed view of a transaction combines committed and pending windows."""

from __future__ import annotations

from streams_app.codecs import JsonCodec
from streams_app.state import Store
from streams_app.state.base import PartitionTransaction, prefix_upper_bound
from streams_app.state.windowed import (
    SlidingValue,
    SlidingValueCodec,
    WindowedTransaction,
    WindowKey,
    WindowKeyCodec,
)

codec = WindowKeyCodec(JsonCodec())


def test_window_keys_round_trip_and_sort_by_key_then_start() -> None:
    keys = [WindowKey("a", s, s + 10) for s in (-20, -1, 0, 5, 1_700_000_000_000)]
    keys.append(WindowKey("ab", 0, 10))
    keys.append(WindowKey(7, 0, 10))
    for key in keys:
        assert codec.loads(codec.dumps(key)) == key
    same_key = [codec.dumps(k) for k in keys[:5]]
    assert sorted(same_key) == same_key  # numeric order of starts, negative ones included
    # "a" is a prefix of "ab" as text, not as a window-key prefix: the length comes first.
    assert not codec.dumps(WindowKey("ab", 0, 10)).startswith(codec.prefix("a"))
    assert prefix_upper_bound(b"a\xff") == b"b" and prefix_upper_bound(b"\xff\xff") is None
    # Remembered key prefixes never confuse equal keys of different types (1 == 1.0 == True).
    fresh = WindowKeyCodec(JsonCodec())
    assert [fresh.dumps(WindowKey(k, 0, 10)) for k in ("1", 1, 1.0, True, "1")] == [
        codec.prefix(k) + codec.dumps(WindowKey(k, 0, 10))[-16:] for k in ("1", 1, 1.0, True, "1")
    ]
    assert len({fresh.dumps(WindowKey(k, 0, 10)) for k in ("1", 1, 1.0, True)}) == 4


def test_sliding_values_round_trip() -> None:
    sliding = SlidingValueCodec(JsonCodec())
    assert sliding.loads(sliding.dumps(SlidingValue({"n": 3}, 1_700_000_000_123))) == (
        {"n": 3},
        1_700_000_000_123,
    )


def test_range_scans_find_a_keys_windows(store: Store) -> None:
    part = store.partition(0)
    batch = {
        codec.dumps(WindowKey(k, s, s + 5)): b"%d" % s
        for k in ("a", "ab", "b")
        for s in (0, 5, 10, 15)
    }
    part.write(batch, 1)
    low, high = codec.range("a", 5, 10)
    found = [codec.loads(k) for k, _ in part.iter_range(low, high)]
    assert found == [WindowKey("a", 5, 10), WindowKey("a", 10, 15)]
    everything = [codec.loads(k).start for k, _ in part.iter_prefix(codec.prefix("ab"))]
    assert everything == [0, 5, 10, 15]


def test_windowed_view_merges_committed_and_pending_windows(store: Store) -> None:
    part = store.partition(0)
    tx = PartitionTransaction(part, codec, JsonCodec())
    view = WindowedTransaction(tx, codec)
    view.put(WindowKey("k", 0, 10), 1)
    view.put(WindowKey("k", 10, 20), 2)
    tx.commit(1)
    view.put(WindowKey("k", 20, 30), 3)  # pending
    view.put(WindowKey("k", 10, 20), 5)  # pending update of a committed window
    view.delete(WindowKey("k", 0, 10))  # pending delete of a committed window
    assert view.windows("k") == [(WindowKey("k", 10, 20), 5), (WindowKey("k", 20, 30), 3)]
    assert view.windows("k", 15, 25) == [(WindowKey("k", 20, 30), 3)]
    assert sorted(view.all_windows()) == [(WindowKey("k", 10, 20), 5), (WindowKey("k", 20, 30), 3)]
    tx.discard()  # an abort: back to the committed windows, pending hints forgotten
    assert view.windows("k") == [(WindowKey("k", 0, 10), 1), (WindowKey("k", 10, 20), 2)]
