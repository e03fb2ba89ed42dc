"""An independent oracle for stream-stream windowed joins (inner, left, outer).

Written from the definitions in docs/joins.md with plain lists and loops, and no streams_app
code, so that a join implementation (ours, or Kafka Streams through the differential test) can
be checked against it on any input. It processes one task's records in the order given
(:func:`tests.joins.data.processing_order`) and returns the join's output records in order.

The definitions, for a window of ``before``/``after`` and a grace period:

- a left record at ``t`` matches right records of the same key with a time in
  ``[t - before, t + after]``; a right record at ``t`` matches left records in
  ``[t - after, t + before]`` (the same pairs, seen from the other side);
- each pair is emitted once, by whichever of the two is processed second, with the larger of
  the two times, *if the first is still retained*: stored when it arrived, and its time more than
  ``before + after + grace`` behind its own side's observed time (the largest time of that side's
  stored records) when the second arrives. This is Kafka Streams' matching, late records
  included: grace does not stop a record from matching what is retained;
- the join's stream time is the largest time of every record either side processed (null keys
  and null values included);
- left join (left records) and outer join (both sides): a record that found no partner when it
  arrived waits; it is *due* once stream time passes ``t + after + grace`` (left) or
  ``t + before + grace`` (right). A waiting record that a partner matches never gets a null. A
  due record gets exactly one null, ``(value, None)`` or ``(None, value)``, with its own time,
  emitted before the record that moved stream time is joined, due records in order of their
  close time (then time, left before right, key, arrival); a record already due when it arrives
  unmatched gets it at once. From then on the record takes no partner (a late record that
  would have matched it is not paired with it: its result is final);
- a record with a null key on a left/outer side is emitted at once with a None partner
  (KIP-962) and matches nothing; on an inner side it is dropped; a null value is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tests.joins.data import LEFT, RIGHT, Params, Rec

KINDS = ("inner", "left", "outer")
OUTER_SIDES = {"inner": (), "left": (LEFT,), "outer": (LEFT, RIGHT)}


class Out(NamedTuple):
    """One join result: the key, the left and right record names (None: no partner), and the
    result's time."""

    key: str | None
    left: str | None
    right: str | None
    ts: int


@dataclass
class _Stored:
    rec: Rec
    arrival: int


@dataclass
class Trace:
    """What happened besides the output, for tests that look inside the oracle."""

    #: Record name -> the stream time when its null was emitted.
    released: dict[str, int] = field(default_factory=dict)
    #: Record name -> the record being processed when its null was emitted.
    emitted_by: dict[str, Rec] = field(default_factory=dict)
    #: Record names a partner matched.
    matched: set[str] = field(default_factory=set)
    #: Records processed on a side, not stored because past retention when they arrived.
    too_late: list[str] = field(default_factory=list)


def _window(side: str, ts: int, p: Params) -> tuple[int, int]:
    """The other side's times a record of ``side`` at ``ts`` matches."""
    low, high = (ts - p.before, ts + p.after) if side == LEFT else (ts - p.after, ts + p.before)
    return max(low, 0), max(high, 0)  # Kafka timestamps are never negative (Kafka Streams clamps)


def close_of(side: str, ts: int, p: Params) -> int:
    return ts + (p.after if side == LEFT else p.before) + p.grace


def join(records: list[Rec], kind: str, p: Params, trace: Trace | None = None) -> list[Out]:
    """The output of a ``kind`` join of one task that processes ``records`` in this order."""
    if kind not in KINDS:
        raise ValueError(kind)
    outer = OUTER_SIDES[kind]
    trace = trace if trace is not None else Trace()
    stream_time: int | None = None
    observed: dict[str, int | None] = {LEFT: None, RIGHT: None}
    stored: dict[str, list[_Stored]] = {LEFT: [], RIGHT: []}
    waiting: list[_Stored] = []
    out: list[Out] = []

    def result(side: str, rec: Rec, other: Rec | None, ts: int) -> Out:
        mine, theirs = rec.name, None if other is None else other.name
        if side == LEFT:
            return Out(rec.key, mine, theirs, ts)
        return Out(rec.key, theirs, mine, ts)

    for arrival, rec in enumerate(records):
        side = rec.topic
        other = RIGHT if side == LEFT else LEFT
        stream_time = rec.ts if stream_time is None else max(stream_time, rec.ts)
        now = stream_time
        # Nulls of the records whose window this record's time closed.
        due = [w for w in waiting if now > close_of(w.rec.topic, w.rec.ts, p)]
        due.sort(
            key=lambda w: (
                close_of(w.rec.topic, w.rec.ts, p),
                w.rec.ts,
                w.rec.topic != LEFT,
                w.rec.key,
                w.arrival,
            )
        )
        for w in due:
            waiting.remove(w)
            out.append(result(w.rec.topic, w.rec, None, w.rec.ts))
            trace.released[w.rec.name or ""] = now
            trace.emitted_by[w.rec.name or ""] = rec
        if rec.key is None:
            if side in outer and rec.value is not None:
                out.append(result(side, rec, None, rec.ts))
                trace.emitted_by[rec.name or ""] = rec
            continue
        if rec.value is None:
            continue
        low, high = _window(side, rec.ts, p)
        seen = observed[other]
        partners = [
            s
            for s in stored[other]
            if s.rec.key == rec.key
            and low <= s.rec.ts <= high
            and seen is not None
            and s.rec.ts > seen - p.retention
            and s.rec.name not in trace.released
        ]
        partners.sort(key=lambda s: (s.rec.ts, s.arrival))
        for s in partners:
            out.append(result(side, rec, s.rec, max(rec.ts, s.rec.ts)))
            trace.matched.update((rec.name or "", s.rec.name or ""))
            waiting[:] = [w for w in waiting if w is not s]
        entry = _Stored(rec, arrival)
        if not partners and side in outer:
            if now > close_of(side, rec.ts, p):
                out.append(result(side, rec, None, rec.ts))  # it arrived closed: final now
                trace.released[rec.name or ""] = now
                trace.emitted_by[rec.name or ""] = rec
            else:
                waiting.append(entry)
        # Then it is stored on its own side (after the lookup, as Kafka Streams does).
        mine = observed[side]
        top = observed[side] = rec.ts if mine is None else max(mine, rec.ts)
        if rec.ts > top - p.retention:
            stored[side].append(entry)
        else:
            trace.too_late.append(rec.name or "")
    return out


def pairs(outputs: list[Out]) -> list[Out]:
    return [o for o in outputs if o.left is not None and o.right is not None]


def nulls(outputs: list[Out]) -> list[Out]:
    return [o for o in outputs if o.left is None or o.right is None]
