"""Window edges where streams_app follows Kafka Streams 4.3 exactly, whatever the batching: a
session at the very instant it closes, and which sliding windows a late update still finds.

Each case runs the records of one partition through a table partition's windows
(:class:`~streams_app.app.windowed.WindowedTableState` on a memory store), with the end-of-batch
work (emit closed windows, delete expired ones, commit) after every ``batch`` records, as the
runtime does after each batch: the results must be the same for every batch size. The expected
results are those Kafka Streams 4.3.1 gives for the same records (``SessionWindows`` /
``SlidingWindows`` with ``count()`` and ``suppress(untilWindowCloses)``, ``dropped-records-total``),
worked out by hand below from its rules; ``tests/windows/test_vs_kafka_streams.py`` compares
with Kafka Streams itself on the real broker, these edges included.
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from streams_app import App
from streams_app.state.base import PartitionTransaction
from streams_app.state.memory import MemoryStore

T = 1_700_000_000_000  # a whole 10 s
BATCHES = (1, 2, 3, 1_000)


@dataclass
class Run:
    #: Records late for every window (the table's late count).
    late: int = 0
    #: Window updates dropped (Kafka Streams' dropped-records-total).
    dropped: int = 0
    #: Final results in emission order: (key, start, end, count).
    finals: list[tuple[Any, int, int, Any]] = field(default_factory=list)


def run(kind: str, records: list[tuple[str, int]], batch: int, **window: Any) -> Run:
    app = App("edges")
    declared = app.Table(kind, default=int, key_type=str)
    table = getattr(declared, kind)(**window).table
    part = MemoryStore("edges").partition(0)
    tx = PartitionTransaction(part, table.key_codec, table.value_codec)
    state = table.open_windowed(tx, -1)
    out = Run()

    def end_of_batch(offset: int) -> None:
        out.dropped += state.skipped_windows
        state.skipped_windows = 0
        out.finals.extend((w.key, w.start, w.end, value) for w, value in state.closed())
        state.expire()
        tx.commit(offset)

    for i, (key, ts) in enumerate(records, 1):
        if not state.update(key, ts, operator.add, 1):
            out.late += 1
        if i % batch == 0:
            end_of_batch(i)
    end_of_batch(len(records))
    return out


def each_batching(kind: str, records: list[tuple[str, int]], **window: Any) -> Run:
    """The run, once it is checked to be the same for every batch size."""
    runs = [run(kind, records, batch, **window) for batch in BATCHES]
    for batch, other in zip(BATCHES[1:], runs[1:], strict=True):
        assert other == runs[0], f"batches of {batch} differ from batches of 1"
    return runs[0]


def test_a_session_is_closed_at_the_instant_stream_time_reaches_end_gap_grace() -> None:
    # Gap 5 s, grace 3 s: [T+1s, T+1s] closes when stream time reaches T+9s exactly.
    got = each_batching(
        "session",
        [
            ("k", T + 1_000),
            ("x", T + 9_000),  # stream time = end + gap + grace: the session is closed
            ("k", T + 4_000),  # within the gap of it: a new session, not merged into it
            ("k", T + 1_000),  # at the close point: joins the open session only
            ("y", T + 30_000),  # closes everything else
        ],
        gap=5,
        grace=3,
    )
    assert got.finals == [
        ("k", T + 1_000, T + 1_000, 1),  # emitted at the instant it closed
        ("k", T + 1_000, T + 4_000, 2),
        ("x", T + 9_000, T + 9_000, 1),
    ]
    assert (got.late, got.dropped) == (0, 0)


def test_a_record_at_the_close_point_replaces_a_closed_session_of_the_same_bounds() -> None:
    # Kafka Streams accepts a record whose session would end exactly at the close point (only
    # "before" is late), and that session is closed at once: emitted, after the closed session
    # of the same bounds it replaces in the store was emitted with its own value.
    got = each_batching(
        "session",
        [
            ("k", T + 1_000),
            ("k", T + 1_000),
            ("x", T + 9_000),  # closes [T+1s, T+1s] (count 2)
            ("k", T + 1_000),  # at the close point: a new [T+1s, T+1s], closed at once
            ("k", T + 999),  # before it: late
            ("y", T + 30_000),
        ],
        gap=5,
        grace=3,
    )
    assert got.finals == [
        ("k", T + 1_000, T + 1_000, 2),
        ("k", T + 1_000, T + 1_000, 1),
        ("x", T + 9_000, T + 9_000, 1),
    ]
    assert (got.late, got.dropped) == (1, 1)


def test_a_record_that_itself_reaches_the_close_instant_still_extends_the_session() -> None:
    # Grace 0: a record exactly a gap after the session's end both extends it and moves stream
    # time to the session's close instant; the session was open when the record came.
    got = each_batching("session", [("k", T), ("k", T + 5_000), ("y", T + 20_000)], gap=5)
    assert got.finals == [("k", T, T + 5_000, 2)]


def test_a_sliding_update_finds_the_windows_kafka_streams_store_still_holds() -> None:
    # Size 10 s, grace 3.005 s, retention 2 * size + grace = 23.005 s. The first window of a
    # is [T - 23.006 s, T - 13.006 s]; b's record at T + 5 s takes stream time past that
    # window's start + retention, but the newest window start written is T - 5 s (b's left
    # window), and Kafka Streams' window store keeps windows by that: a's window is still
    # found by a's next record, which skips the previous record's right window and its own
    # left window, both closed (2 dropped), whether or not a batch ended in between.
    got = each_batching(
        "sliding",
        [("a", T - 13_006), ("b", T + 5_000), ("a", T - 5_000)],
        size=10,
        grace=3.005,
    )
    assert (got.late, got.dropped) == (0, 2)
    assert got.finals == [("a", T - 23_006, T - 13_006, 1)]


@pytest.mark.parametrize("kind", ["sliding", "session"])
def test_random_edges_give_the_same_results_whatever_the_batching(kind: str) -> None:
    # Times that land on window ends, close points and retention bounds, out of order.
    window = {"size": 10, "grace": 3.005} if kind == "sliding" else {"gap": 5, "grace": 3.005}
    for seed in range(150):
        rng = random.Random(seed)
        t, records = T, []
        for _ in range(30):
            if rng.random() < 0.6:
                t += rng.choice((0, 1_000, 3_005, 5_000, 8_005, 10_000, 13_000))
                records.append((rng.choice("ab"), t))
            else:
                back = rng.choice((0, 3_005, 3_006, 5_000, 8_005, 10_000, 13_006, 23_005, 23_006))
                records.append((rng.choice("ab"), t - back))
        each_batching(kind, records, **window)
