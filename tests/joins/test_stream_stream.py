"""The stream-stream join processor against the definitions: worked cases for each rule, and the
independent oracle (tests/joins/oracle.py) on random inputs (out of order, equal timestamps,
exact window edges, late records, duplicates, null keys and values) and on the differential
test's generated input, through commits, commits sealed while processing goes on, aborts (state
made anew, records processed again) and restarts from the changelog, on both store kinds."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from streams_app.codecs import StrCodec
from streams_app.runtime.joins.stream_stream import (
    LEFT,
    RIGHT,
    JoinResult,
    JoinWindows,
    StreamStreamJoin,
)
from tests.joins.data import LEFT as L_TOPIC
from tests.joins.data import RIGHT as R_TOPIC
from tests.joins.data import Params, Rec, generate, processing_order
from tests.joins.oracle import KINDS, Out, join, nulls, pairs
from tests.joins.processor import (
    Faults,
    JoinTask,
    canonical,
    drive,
    memory_stores,
    rocksdb_stores,
)

P = Params(before=30, after=50, grace=20)  # retention 100; a left record closes 70 after its time


def recs(*spec: tuple[str, str | None, str | None, int]) -> list[Rec]:
    """Records in processing order: (side "L"/"R", key, value, time); offsets per side."""
    out, seen = [], Counter[str]()
    for s, k, v, t in spec:
        topic = L_TOPIC if s == "L" else R_TOPIC
        out.append(Rec(topic, 0, k, v, t, seen[topic]))
        seen[topic] += 1
    return out


def run(records: list[Rec], how: str, p: Params = P) -> list[Out]:
    return drive(records, how, p).outputs


# -- the definition ---------------------------------------------------------------------------


def test_join_windows_check_their_bounds() -> None:
    with pytest.raises(ValueError, match="before \\+ after >= 0"):
        JoinWindows(before=-20, after=10)
    with pytest.raises(ValueError, match="grace"):
        JoinWindows(before=0, after=10, grace=-1)
    with pytest.raises(ValueError, match="one of"):
        StreamStreamJoin("full", JoinWindows(1, 1))
    w = JoinWindows(before=-10, after=30, grace=5)  # a window entirely after the left record
    assert w.retention == 25 and w.close_after == (35, -5)
    assert w.other_side_range(LEFT, 100) == (110, 130)
    assert w.other_side_range(RIGHT, 120) == (90, 110)
    assert w.other_side_range(LEFT, 5) == (15, 35) and w.other_side_range(RIGHT, 5) == (0, 0)
    inner = StreamStreamJoin("inner", w)
    assert set(inner.store_codecs(*[StrCodec()] * 3)) == {"left", "right"}
    outer = StreamStreamJoin("outer", w)
    assert set(outer.store_codecs(*[StrCodec()] * 3)) == {"left", "right", "unmatched"}


def test_window_edges_are_inclusive_and_pairs_take_the_larger_time() -> None:
    records = recs(
        ("L", "k", "L1", 100),
        ("R", "k", "R69", 69),  # t - before - 1: outside
        ("R", "k", "R70", 70),  # t - before: inside
        ("R", "k", "R150", 150),  # t + after: inside
        ("R", "k", "R151", 151),  # outside
    )
    assert pairs(run(records, "inner")) == [Out("k", "L1", "R70", 100), Out("k", "L1", "R150", 150)]


def test_each_pair_once_by_the_second_arrival_duplicates_both_pair() -> None:
    records = recs(
        ("R", "k", "R1", 100),
        ("R", "k", "R2", 100),  # a duplicate (same key and time): kept apart by its offset
        ("L", "k", "L1", 100),  # a tie with both: pairs with each, in offset order
        ("L", "k", "L2", 90),  # out of order: pairs with both too
        ("R", "j", "R3", 100),  # another key: nothing
    )
    assert run(records, "inner") == [
        Out("k", "L1", "R1", 100),
        Out("k", "L1", "R2", 100),
        Out("k", "L2", "R1", 100),
        Out("k", "L2", "R2", 100),
    ]


def test_a_partner_within_grace_cancels_the_null_and_none_is_spurious() -> None:
    # Kafka Streams 4.3 emits L2's null at once (its window end, 110 + 50, is behind stream
    # time 170, though its grace is not over), then pairs it with R2 too.
    records = recs(
        ("L", "x", "Lx", 170),
        ("L", "k", "L2", 110),  # closes at 180: waits
        ("R", "k", "R2", 150),  # out of order, within grace: the pair, and no null
        ("L", "x", "Ly", 200),  # passes L2's close: nothing due, it matched
    )
    for how in ("left", "outer"):
        out = run(records, how)
        assert Out("k", "L2", "R2", 150) in out
        assert Out("k", "L2", None, 110) not in out, how


def test_a_released_record_takes_no_late_partner_inner_joins_pair_it() -> None:
    records = recs(
        ("L", "k", "L1", 100),  # closes 170
        ("L", "x", "Lx", 171),  # passes it: L1's null now
        ("R", "k", "R1", 140),  # later than grace, still retained (100 > 171 - 100)
        ("R", "x", "Rz", 400),
    )
    left = run(records, "left")
    assert left[0] == Out("k", "L1", None, 100) and not [o for o in pairs(left) if o.key == "k"]
    outer = run(records, "outer")
    assert Out("k", None, "R1", 140) in outer  # the late partner gets its own null
    assert pairs(run(records, "inner"))[0] == Out("k", "L1", "R1", 140)


def test_nulls_come_at_the_close_in_close_order_before_the_record_that_closed_them() -> None:
    records = recs(
        ("L", "a", "La", 100),  # closes 170
        ("R", "b", "Rb", 110),  # closes 110 + before + grace = 160: first
        ("L", "c", "Lc", 170),  # stream time 170: La not due yet (due when time passes 170)
        ("R", "c", "Rc", 171),  # passes both: Rb, La, then Rc's pair with Lc
    )
    assert run(records, "outer") == [
        Out("b", None, "Rb", 110),
        Out("a", "La", None, 100),
        Out("c", "Lc", "Rc", 171),
    ]


def test_a_record_arriving_closed_and_unmatched_gets_its_null_at_once() -> None:
    records = recs(
        ("L", "x", "Lx", 300),
        ("L", "k", "L1", 100),  # closed (300 > 170) on arrival, no partner: its null now
        ("R", "k", "R1", 120),  # would match it, but its result is final
    )
    left = run(records, "left")
    assert left[0] == Out("k", "L1", None, 100) and Out("k", "L1", "R1", 120) not in left


def test_null_keys_and_null_values() -> None:
    records = recs(
        ("L", None, "Ln", 100),  # left/outer: emitted at once
        ("R", None, "Rn", 100),  # outer only
        ("L", "k", "L1", 100),
        ("R", "k", None, 300),  # a null value: dropped, but moves stream time: L1 is due
        ("R", "k", "R1", 120),  # late; an inner join still pairs it (L1 is retained)
    )
    assert run(records, "inner") == [Out("k", "L1", "R1", 120)]
    assert run(records, "inner", Params(0, 0, 0)) == []  # not in the window
    assert run(records, "left")[:2] == [Out(None, "Ln", None, 100), Out("k", "L1", None, 100)]
    assert run(records, "outer")[:3] == [
        Out(None, "Ln", None, 100),
        Out(None, None, "Rn", 100),
        Out("k", "L1", None, 100),
    ]


def test_records_past_retention_are_not_buffered_but_still_look() -> None:
    records = recs(
        ("L", "j", "Lj", 500),
        ("L", "k", "L1", 100),  # 100 <= 500 - 100: too late to be buffered
        ("R", "k", "R1", 110),  # finds nothing
        ("R", "k", "R2", 480),
        ("L", "k", "L2", 470),  # too? 470 > 500 - 100: buffered, and pairs with R2
    )
    driven = drive(records, "inner", P)
    assert driven.outputs == [Out("k", "L2", "R2", 480)]
    assert driven.too_late == 1


def test_advance_to_releases_due_nulls_without_a_record_and_never_goes_back() -> None:
    task = JoinTask("outer", P)
    try:
        for rec in recs(("L", "a", "La", 100), ("R", "b", "Rb", 150)):
            assert task.process(rec) == []
        state = task.state
        assert state.next_close() == 170 and state.stream_time == 150
        assert state.advance_to(170) == []  # due when stream time *passes* the close
        assert state.advance_to(171) == [JoinResult("a", "La", None, 100)]
        assert state.advance_to(100) == [] and state.stream_time == 171
        assert state.advance_to(10_000) == [JoinResult("b", None, "Rb", 150)]
        task.commit()
        task.restart()  # the stream time committed with the releases
        assert task.state.stream_time == 10_000 and task.state.next_close() is None
        # A partner of La arriving now is late: no pair (La's result was final).
        assert task.process(recs(("R", "a", "Ra", 120))[0]) == [Out("a", None, "Ra", 120)]
    finally:
        task.close()
    inner = JoinTask("inner", P)
    try:
        assert inner.state.advance_to(10_000) == [] and inner.state.stream_time is None
    finally:
        inner.close()


def test_an_abort_mid_window_rebuilds_the_state_and_the_replay_gives_the_same_answer() -> None:
    """A partner processed in an aborted transaction must not leave its match behind: after
    the abort the waiting record waits again, and the replay pairs it once."""
    records = recs(
        ("L", "k", "L1", 100),
        ("L", "x", "Lx", 120),
        ("R", "k", "R1", 130),  # matches L1 (removes it from the unmatched store)
        ("L", "x", "Ly", 400),  # would release L1's null if R1 had not matched it
    )
    task = JoinTask("outer", P)
    try:
        for rec in records[:2]:
            task.process(rec)
        task.commit()
        assert task.process(records[2]) == [Out("k", "L1", "R1", 130)]
        task.abort()  # R1's transaction is gone: L1 waits again, R1 is not buffered
        assert [u.value for u in task.state.unmatched.waiting()] == ["L1", "Lx"]  # type: ignore[union-attr]
        assert task.state.buffers[RIGHT].fetch("k", 0, 1_000) == []
        got = task.process(records[2]) + task.process(records[3])
        assert got == [Out("k", "L1", "R1", 130), Out("x", "Lx", None, 120)]
        task.abort()  # and once more, this time with the release in the aborted part
        assert task.process(records[3]) == [Out("k", "L1", None, 100), Out("x", "Lx", None, 120)]
    finally:
        task.close()


def test_released_and_expired_records_leave_the_stores() -> None:
    records = recs(
        ("L", "k", "L1", 100),
        ("R", "k", "R1", 100),  # pairs
        ("L", "j", "L2", 150),  # never matched
        ("L", "z", "Lz", 1_000),  # releases L2 and moves both sides' retention
        ("R", "z", "Rz", 1_000),
    )
    task = JoinTask("left", P)
    try:
        for rec in records:
            task.process(rec)
        task.end_of_batch()
        task.commit()
        stored = {
            role: [k for k, _ in task.stores[role].partition(0).items() if k]
            for role in ("left", "right", "unmatched")
        }
        # Only Lz and Rz are left (the segments are 60 s: L1 and R1 went by retention, which
        # fetch applies before expiry deletes a whole segment; L2 went when released).
        left = task.state.buffers[LEFT]
        assert [b.value for _, b in left.entries()] in (["L1", "Lz"], ["Lz"])
        assert left.fetch("k", 0, 10_000) == [] and left.fetch("j", 0, 10_000) == []
        assert stored["unmatched"] == []
    finally:
        task.close()


# -- the oracle on random inputs --------------------------------------------------------------

PARAMS = [
    P,
    Params(before=0, after=40, grace=0),
    Params(before=60, after=10, grace=30),
    Params(before=-10, after=50, grace=10),  # a window entirely after the left record
    Params(before=20, after=20, grace=200),  # grace longer than the window
]


def random_records(seed: int, n: int, p: Params, *, in_order: bool) -> list[Rec]:
    """One task's processing order: ties between the two sides, exact window edges and close
    instants, duplicates, late records (within grace, past grace within retention, past
    retention), null keys and values. Keys are of one length (``canonical``)."""
    rng = random.Random(seed)
    t = 10_000
    spec: list[tuple[str, str | None, str | None, int]] = []
    keys = ("a", "b", "c", "d")
    for i in range(n):
        t += rng.choice((0, 0, 10, 10, 20, 50, 90))
        side = rng.choice("LR")
        key: str | None = rng.choice(keys)
        ts = t
        roll = rng.random()
        if roll < 0.1:  # a partner at an exact edge of an earlier record's window
            earlier = [s for s in spec if s[1] is not None][-8:]
            if earlier:
                other = rng.choice(earlier)
                key = other[1]
                side = "R" if other[0] == "L" else "L"
                edge = (p.after, -p.before) if other[0] == "L" else (p.before, -p.after)
                ts = other[3] + rng.choice(edge) + rng.choice((-1, 0, 0, 1))
        elif roll < 0.18:  # a tie across the sides
            spec.append(("L" if side == "R" else "R", key, None, t))
        elif roll < 0.25 and spec:  # a duplicate
            same = [s for s in spec if s[0] == side and s[1] is not None]
            if same:
                _, key, _, ts = same[-1]
        if not in_order and roll >= 0.25 and rng.random() < 0.35:
            ts = t - rng.choice(
                (p.grace // 2, p.grace, p.after + p.grace, p.retention, 3 * p.retention)
            )
            ts -= rng.randrange(0, 20)
        if not in_order and rng.random() < 0.04:
            key = None
        value = f"{side}{i}"
        if not in_order and rng.random() < 0.04:
            value = None  # type: ignore[assignment]
        spec.append((side, key, value, max(ts, 0)))
    flush = t + 10 * max(p.retention, 1) + 1_000
    spec += [("L", "z", "Lflush", flush), ("R", "z", "Rflush", flush)]
    return recs(*spec)


@pytest.mark.parametrize("seed", range(40))
def test_the_oracle_on_random_inputs_with_commits_aborts_and_restarts(seed: int) -> None:
    p = PARAMS[seed % len(PARAMS)]
    records = random_records(seed, 250, p, in_order=seed % 4 == 0)
    faults = Faults(commit=0.08, seal=0.05, abort=0.02, restart=0.01, seed=seed)
    for how in KINDS:
        want = join(records, how, p)
        driven = drive(records, how, p, faults)
        assert canonical(driven.outputs) == canonical(want), (how, seed)
    assert any(nulls(join(records, how, p)) for how in ("left", "outer"))


@pytest.mark.parametrize("seed", range(3))
def test_the_oracle_on_random_inputs_on_rocksdb(seed: int, tmp_path: Path) -> None:
    p = PARAMS[seed % len(PARAMS)]
    records = random_records(seed + 100, 150, p, in_order=False)
    faults = Faults(commit=0.1, seal=0.05, abort=0.03, restart=0.02, seed=seed)
    for how in KINDS:
        driven = drive(records, how, p, faults, rocksdb_stores(tmp_path / how))
        assert canonical(driven.outputs) == canonical(join(records, how, p)), (how, seed)
        assert driven.aborts + driven.restarts > 0


def test_the_oracle_on_the_differential_input_both_tie_orders() -> None:
    """The generated input of the Kafka Streams differential test (tests/joins/data.py), each
    partition in both extreme orders of its ties: exactly the oracle's answer."""
    data = generate(37)
    faults = Faults(commit=0.05, seal=0.03, abort=0.01, restart=0.005, seed=37)
    counted = Counter[str]()
    for part in range(data.partitions):
        for ties in (L_TOPIC, R_TOPIC):
            order = processing_order(data.of(L_TOPIC, part), data.of(R_TOPIC, part), ties=ties)
            for how in KINDS:
                want = join(order, how, data.params)
                driven = drive(order, how, data.params, faults, memory_stores)
                assert canonical(driven.outputs) == canonical(want), (how, part, ties)
                counted[how] += len(want)
                counted["aborts"] += driven.aborts
    assert counted["inner"] > 500 and counted["outer"] > counted["left"] > counted["inner"]
    assert counted["aborts"] > 0


def test_every_pair_within_the_window_once_and_nulls_exactly_for_the_unmatched() -> None:
    """Brute force, without the oracle, on in-order inputs (no lateness: every record is
    retained while a partner can come): all pairs in the window once; a null exactly for each
    left (outer: and right) record with no partner."""
    p = Params(before=30, after=50, grace=20)
    for seed in range(10):
        records = random_records(seed + 500, 200, p, in_order=True)
        records = sorted(records, key=lambda r: r.ts)  # strictly in time order
        records = recs(
            *[("L" if r.topic == L_TOPIC else "R", r.key, r.value, r.ts) for r in records]
        )
        lefts = [r for r in records if r.topic == L_TOPIC and r.value is not None and r.key]
        rights = [r for r in records if r.topic == R_TOPIC and r.value is not None and r.key]
        expected = Counter(
            Out(lt.key, lt.value, rt.value, max(lt.ts, rt.ts))
            for lt in lefts
            for rt in rights
            if lt.key == rt.key and lt.ts - p.before <= rt.ts <= lt.ts + p.after
        )
        paired = {o.left for o in expected} | {o.right for o in expected}
        for how, sides in (("inner", ()), ("left", (L_TOPIC,)), ("outer", (L_TOPIC, R_TOPIC))):
            out = drive(records, how, p, Faults(commit=0.1, abort=0.02, seed=seed)).outputs
            assert Counter(pairs(out)) == expected, how
            want_nulls = Counter(
                Out(r.key, r.value, None, r.ts)
                if r.topic == L_TOPIC
                else Out(r.key, None, r.value, r.ts)
                for r in lefts + rights
                if r.topic in sides and r.value not in paired
            )
            assert Counter(nulls(out)) == want_nulls, how
