"""The stream-stream join oracle checks itself: worked cases for every rule in its docstring,
brute force on random in-order inputs (every pair within the window, once; nulls exactly for
the unmatched), and invariants on random out-of-order inputs."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.joins.data import LEFT, RIGHT, Params, Rec
from tests.joins.oracle import KINDS, Out, Trace, close_of, join, nulls, pairs

P = Params(before=30, after=50, grace=20)  # retention 100


def recs(*spec: tuple[str, str | None, str | None, int]) -> list[Rec]:
    """Records in processing order: (side "L"/"R", key, name, time)."""
    return [Rec(LEFT if s == "L" else RIGHT, 0, k, n, t) for s, k, n, t in spec]


def test_window_edges_are_inclusive_and_asymmetric() -> None:
    records = recs(
        ("L", "k", "L1", 100),
        ("R", "k", "R60", 60),  # t - before - 10: outside
        ("R", "k", "R70", 70),  # t - before: inside
        ("R", "k", "R150", 150),  # t + after: inside
        ("R", "k", "R160", 160),  # outside
    )
    got = pairs(join(records, "inner", P))
    assert got == [Out("k", "L1", "R70", 100), Out("k", "L1", "R150", 150)]
    # From the right side's view the window is mirrored: a left record at 150 is within
    # [R100 - after, R100 + before] = [50, 130]? No; one at 130 is.
    mirrored = recs(("R", "k", "R100", 100), ("L", "k", "L130", 130), ("L", "k", "L140", 140))
    assert pairs(join(mirrored, "inner", P)) == [Out("k", "L130", "R100", 130)]


def test_each_pair_once_by_the_later_arrival_with_the_larger_time() -> None:
    records = recs(
        ("R", "k", "R1", 100),
        ("R", "k", "R2", 100),  # a duplicate: both pair
        ("L", "k", "L1", 90),
        ("L", "j", "L2", 95),  # another key: nothing
    )
    assert join(records, "inner", P) == [
        Out("k", "L1", "R1", 100),
        Out("k", "L1", "R2", 100),
    ]


def test_left_null_waits_for_the_close_and_a_partner_within_grace_cancels_it() -> None:
    records = recs(
        ("L", "k", "L1", 100),  # window [70, 150], closes when stream time passes 170
        ("L", "x", "Lx", 160),
        ("R", "k", "R1", 150),  # out of order by 10, within grace: matches, no null
        ("L", "j", "L2", 110),
        ("L", "x", "Ly", 170),  # stream time 170 = L2's close... L2 closes at 180
        ("R", "j", "Rj", 160),  # exactly at L2's window end, stream time 170 <= 180: matches
        ("L", "x", "Lz", 240),  # passes the closes of Lx (230) too
    )
    trace = Trace()
    out = join(records, "left", P, trace)
    assert pairs(out) == [Out("k", "L1", "R1", 150), Out("j", "L2", "Rj", 160)]
    assert nulls(out) == [Out("x", "Lx", None, 160)]
    assert trace.released == {"Lx": 240}
    assert out.index(Out("x", "Lx", None, 160)) == len(out) - 1


def test_a_released_record_takes_no_late_partner_but_inner_joins_pair_them() -> None:
    records = recs(
        ("L", "k", "L1", 100),
        ("L", "x", "L2", 171),  # passes L1's close (170): L1's null now
        ("R", "k", "R1", 140),  # late by 31 > grace, still retained: Kafka Streams pairs it
    )
    left = join(records, "left", P)
    assert Out("k", "L1", None, 100) in left and not pairs(left)
    assert pairs(join(records, "inner", P)) == [Out("k", "L1", "R1", 140)]


def test_retention_bounds_matching_by_the_stored_sides_observed_time() -> None:
    records = recs(
        ("L", "k", "L1", 100),
        ("L", "j", "L2", 200),  # left observed 200: L1 (100 <= 200 - 100) no longer retained
        ("R", "k", "R1", 120),
    )
    assert pairs(join(records, "inner", P)) == []
    kept = recs(("L", "k", "L1", 100), ("L", "j", "L2", 199), ("R", "k", "R1", 120))
    assert pairs(join(kept, "inner", P)) == [Out("k", "L1", "R1", 120)]
    # Right records moving time on do not expire left ones: each side keeps its own time.
    other = recs(("L", "k", "L1", 100), ("R", "j", "R0", 500), ("R", "k", "R1", 120))
    assert pairs(join(other, "inner", P)) == [Out("k", "L1", "R1", 120)]


def test_null_keys_and_values() -> None:
    records = recs(
        ("L", None, "Ln", 100),  # left/outer: emitted at once, no partner
        ("R", None, "Rn", 100),  # inner side of a left join: dropped
        ("L", "k", "L1", 100),
        ("R", "k", None, 300),  # a null value: dropped, but it moves stream time (L1 is due)
    )
    assert join(records, "inner", P) == []
    assert join(records, "left", P) == [Out(None, "Ln", None, 100), Out("k", "L1", None, 100)]
    assert join(records, "outer", P)[:2] == [Out(None, "Ln", None, 100), Out(None, None, "Rn", 100)]


def test_outer_nulls_come_in_order_of_their_own_close() -> None:
    records = recs(
        ("L", "a", "La", 100),  # closes 170
        ("R", "b", "Rb", 110),  # closes 110 + before + grace = 160
        ("R", "c", "Rc", 400),
    )
    assert nulls(join(records, "outer", P))[:2] == [
        Out("b", None, "Rb", 110),
        Out("a", "La", None, 100),
    ]


def _random(seed: int, n: int, in_order: bool) -> list[Rec]:
    rng = random.Random(seed)
    t = 1_000
    out = []
    for i in range(n):
        t += rng.choice((0, 0, 10, 20, 40, 90))
        ts = t
        if not in_order and rng.random() < 0.3:
            ts = max(0, t - 10 * rng.randrange(0, 25))  # within grace, late, past retention
        side = rng.choice((LEFT, RIGHT))
        key = rng.choice(("a", "b", "c", None)) if not in_order else rng.choice("abc")
        name = ("L" if side == LEFT else "R") + str(i)
        value = None if (not in_order and rng.random() < 0.05) else name
        out.append(Rec(side, 0, key, value, ts))
    flush = t + 10 * P.retention
    out += [Rec(LEFT, 0, "zz", "Lflush", flush), Rec(RIGHT, 0, "zz", "Rflush", flush)]
    return out


@pytest.mark.parametrize("seed", range(25))
def test_in_order_inputs_give_every_pair_within_the_window_once(seed: int) -> None:
    records = _random(seed, 200, in_order=True)
    lefts = [r for r in records if r.topic == LEFT]
    rights = [r for r in records if r.topic == RIGHT]
    expected_pairs = Counter(
        Out(lt.key, lt.name, rt.name, max(lt.ts, rt.ts))
        for lt in lefts
        for rt in rights
        if lt.key == rt.key and lt.ts - P.before <= rt.ts <= lt.ts + P.after
    )
    paired = {o.left for o in expected_pairs} | {o.right for o in expected_pairs}
    for kind in KINDS:
        out = join(records, kind, P)
        assert Counter(pairs(out)) == expected_pairs, kind
        unmatched = [r for r in records if r.topic in _outer(kind) and r.name not in paired]
        expected_nulls = Counter(_null(r) for r in unmatched if r.key != "zz")
        assert Counter(o for o in nulls(out) if o.key != "zz") == expected_nulls, kind


def _null(r: Rec) -> Out:
    if r.topic == LEFT:
        return Out(r.key, r.name, None, r.ts)
    return Out(r.key, None, r.name, r.ts)


def _outer(kind: str) -> tuple[str, ...]:
    return {"inner": (), "left": (LEFT,), "outer": (LEFT, RIGHT)}[kind]


@pytest.mark.parametrize("seed", range(25))
def test_out_of_order_inputs_keep_the_invariants(seed: int) -> None:
    records = _random(seed, 300, in_order=False)
    named = {r.name: r for r in records if r.name is not None}
    results = {}
    for kind in KINDS:
        trace = Trace()
        out = join(records, kind, P, trace)
        results[kind] = out
        got = pairs(out)
        assert len(set(got)) == len(got), "a pair twice"
        for o in got:
            left, right = named[o.left or ""], named[o.right or ""]
            assert left.key == right.key == o.key
            assert left.ts - P.before <= right.ts <= left.ts + P.after
            assert o.ts == max(left.ts, right.ts)
        null_count = Counter(o.left or o.right for o in nulls(out))
        assert max(null_count.values(), default=1) == 1, "a record with two nulls"
        for name, rec in named.items():
            if rec.topic not in _outer(kind) or rec.value is None or rec.key == "zz":
                continue
            has_pair = any(name in (o.left, o.right) for o in got)
            assert has_pair != (null_count[name] == 1), (kind, name)
            if name in trace.released and rec.key is not None:
                assert trace.released[name] > close_of(rec.topic, rec.ts, P)
    inner, left, outer = (set(pairs(results[k])) for k in KINDS)
    assert outer <= left <= inner
