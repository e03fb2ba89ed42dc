"""Windowed-count test data, and the expected results computed independently of streams_app.

The generator writes, per partition, records whose time mostly moves forward, with some records
out of order within the grace period, some late for every window they belong to, and (with
``partial=True``) some late for only some of their windows. Keys belong to one partition each, so
every partition is one task with its own stream time. The stream ends with *flush* records of a
key of their own that step time forward in small steps until every window has closed (small
steps, so stream time never jumps far; it moves by less than 1.5 s per record). Every
timestamp of that random data is a multiple of 10 ms and the grace period is not (3.005 s): no
window's end plus grace is ever equal to a record's time. That is the one instant at which
Kafka Streams' ``suppress(untilWindowCloses)`` (what the comparison test's Kafka Streams
application uses) already emits a sliding window that its aggregation still updates (their ends
are inclusive); see docs/windows.md.

*Probes* (``probes=True``) add, at a few points of each partition, hand-made sequences for two
edges, on times off the 10 ms grid chosen so that no sliding window is updated at its close
instant (see :func:`_session_probe` and :func:`_sliding_probe`): stream time reaching a session's
end + gap + grace exactly, and a sliding window that is past retention by stream time but still
in Kafka Streams' store, with a batch boundary (``fillers`` records) in between.

The oracle below computes final windowed counts from the definitions (docs/windows.md, after
Kafka Streams' TimeWindows, SlidingWindows and SessionWindows), record by record in each
partition's order, with plain Python data structures: no streams_app code is used.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

#: A whole hour, one to two hours ago, in ms: far from 0 (sliding windows' early records), and
#: recent. A broker deletes a segment whose newest record is older than the topic's
#: ``retention.ms`` (7 days for outputs, a day and the window retention for windowed
#: changelogs) whenever its retention check runs, so data from years ago would vanish from the
#: outputs mid-test if the check fell inside one (it runs every 5 minutes). Every window size
#: here divides an hour, so the windows fall on the data the same way whatever the hour.
BASE = (time.time_ns() // 1_000_000 // 3_600_000 - 1) * 3_600_000


@dataclass(frozen=True)
class Rec:
    partition: int
    key: str
    ts: int


@dataclass(frozen=True)
class Sizes:
    """Window parameters in ms (the topology gets them in seconds)."""

    tumbling: int = 10_000
    hopping: int = 20_000
    hopping_step: int = 5_000
    sliding: int = 10_000
    session_gap: int = 5_000
    #: Records fall on whole 10 ms, and no window bound plus grace does: see generate().
    grace: int = 3_005

    @property
    def longest(self) -> int:
        return max(self.tumbling, self.hopping, 2 * self.sliding, self.session_gap)


@dataclass
class Dataset:
    records: list[Rec]
    sizes: Sizes
    partitions: int
    #: Records made late on purpose (for reporting), per kind of lateness.
    made: Counter[str] = field(default_factory=Counter)
    #: Keys whose session a probe replaces at its close point with one of the same bounds.
    replaced_sessions: set[str] = field(default_factory=set)

    def by_partition(self) -> dict[int, list[Rec]]:
        out: dict[int, list[Rec]] = {p: [] for p in range(self.partitions)}
        for r in self.records:
            out[r.partition].append(r)
        return out


def _session_probe(data: Dataset, p: int, n: int, t: int) -> int:
    """At stream time ``t`` (a multiple of 10 ms), with gap 5 s and grace 3.005 s: stream time
    reaches exactly a session's end + gap + grace, then records arrive for that session's key
    within the gap (Kafka Streams: the session is closed, emitted, never merged; a record exactly
    at the close point still starts a session, which a record of the same time ends at once, and
    replaces a closed one of the same bounds). Returns the time to go on from."""
    s = data.sizes
    assert (s.session_gap, s.grace) == (5_000, 3_005), "the probe is laid out for these sizes"
    # Times 3 ms past the 10 ms grid: sessions close 8 ms past it, sliding windows 8 or 9 ms past
    # it, never at a time stream time stands at when one of their keys comes again.
    start = t + 3
    probe, twin, tick = f"session{p}.{n}", f"session{p}.{n}b", f"tick{p}.{n}"

    def add(key: str, ts: int) -> None:
        data.records.append(Rec(p, key, ts))

    add(probe, start)
    add(twin, start)
    for step in range(1, 9):
        add(tick, start + 1_000 * step)
    add(tick, start + s.session_gap + s.grace)  # closes [start, start] of probe and twin
    add(probe, start + s.session_gap // 2)  # within the gap: a new session, not merged
    add(probe, start)  # at the close point: joins the open session only
    add(twin, start)  # at the close point, no open session: replaces the closed [start, start]
    data.made["session close instant"] += 1
    data.replaced_sessions.add(twin)
    return start + s.session_gap + s.grace + 2


def _sliding_probe(data: Dataset, p: int, n: int, t: int, fillers: int) -> int:
    """At stream time ``t`` (a multiple of 10 ms), with size 10 s and grace 3.005 s: a key's
    window falls out of retention by stream time (start + 2 * size + grace < stream time) but
    not by the newest window start (what Kafka Streams' window store goes by), then ``fillers``
    records (more than one batch of the app under test) at the same time, then a record of the
    key that finds the window (it is the previous window of its own left window). Kafka Streams
    skips two windows for that record; dropping the window at the batch boundary skips one.
    Returns the time to go on from."""
    s = data.sizes
    assert (s.sliding, s.grace) == (10_000, 3_005), "the probe is laid out for these sizes"
    d, g = s.sliding, s.grace
    # Times 7 ms past the grid, the last tick 2 ms past it: see _session_probe for why.
    first = t + 7  # its left window [first - d, first]
    probe, tick, filler = f"sliding{p}.{n}", f"stick{p}.{n}", f"filler{p}.{n}"
    data.records.append(Rec(p, probe, first))
    ts = first
    for _ in range(13):
        ts += 1_000
        data.records.append(Rec(p, tick, ts))
    # Past retention by stream time by 500 ms; the newest window start (the right window of the
    # tick before, ts + 1) is 4 ms short of it.
    now = first - d + 2 * d + g + 500
    assert now - (ts + 1) < 1_000
    data.records.append(Rec(p, tick, now))
    data.records.extend(Rec(p, filler, now) for _ in range(fillers))
    data.records.append(Rec(p, probe, first + 1_000))
    data.made["sliding retention edge"] += 1
    return now + 8


def generate(
    seed: int,
    *,
    per_partition: int = 1_200,
    partitions: int = 2,
    keys: int = 5,
    sizes: Sizes | None = None,
    partial: bool = False,
    probes: bool = False,
    fillers: int = 250,
) -> Dataset:
    sizes = sizes or Sizes()
    rng = random.Random(seed)
    data = Dataset([], sizes, partitions)
    grace, longest = sizes.grace, sizes.longest
    # Where probes go, per partition: sessions at three points, the sliding edge at one.
    session_at = (
        {per_partition // 4, per_partition // 2, 3 * per_partition // 4} if probes else set()
    )
    sliding_at = {per_partition * 5 // 8} if probes else set()
    for p in range(partitions):
        t = BASE + 10 * rng.randrange(100)
        for i in range(per_partition):
            if i in session_at:
                t = _session_probe(data, p, i, t)
            if i in sliding_at:
                t = _sliding_probe(data, p, i, t, fillers)
            # Only on-time records move time on (by less than 1.5 s), so stream time never
            # jumps by more than that: see the module doc about Kafka Streams and jumps.
            roll = rng.random()
            if roll >= (0.20 if partial else 0.14):
                t += rng.choice((0, 10 * rng.randrange(1, 150)))
            ts = t
            if roll < 0.10:
                ts = t - 10 * rng.randrange(0, grace // 10 + 1)  # out of order, within grace
                data.made["within grace"] += 1
            elif roll < 0.14:
                # late for every window it belongs to, of every kind
                low, high = (grace + 2 * longest) // 10, (grace + 3 * longest) // 10
                ts = t - 10 * rng.randrange(low, high)
                data.made["late"] += 1
            elif partial and roll < 0.20:
                # late for some of its windows only
                ts = t - 10 * rng.randrange(grace // 10 + 1, (grace + longest) // 10)
                data.made["partly late"] += 1
            data.records.append(Rec(p, f"k{p}.{rng.randrange(keys)}", ts))
        end = t + 3 * longest + grace
        while t < end:
            t += 1_000
            data.records.append(Rec(p, f"flush{p}", t))
    return data


# -- the oracle -------------------------------------------------------------------------------

#: (key, start, end) -> count
Windows = Counter[tuple[str, int, int]]


@dataclass
class Expected:
    finals: dict[str, Windows]
    #: Records that updated no window at all, per kind.
    late: Counter[str]


def _time_windows(ts: int, size: int, step: int) -> Iterable[int]:
    start = max(0, ts - size + step) // step * step
    while start <= ts:
        yield start
        start += step


def expected(data: Dataset) -> Expected:
    """Final counts per window and late records, for data without partly-late records for
    sliding windows (``generate(partial=False)``): a record there is either on time for all its
    windows or late for all of them, which keeps the sliding-window definition simple, and
    without probes (a probe's session replaced by one of the same bounds is not modelled)."""
    assert not (data.made["session close instant"] or data.made["sliding retention edge"])
    s = data.sizes
    kinds = ("tumbling", "hopping", "sliding", "session")
    finals: dict[str, Windows] = {k: Counter() for k in kinds}
    late: Counter[str] = Counter()
    for records in data.by_partition().values():
        observed = -1
        sessions: dict[str, list[list[int]]] = {}  # key -> [start, end, count]
        accepted: dict[str, list[int]] = {}  # sliding: timestamps counted, per key
        for r in records:
            prior, observed = observed, max(observed, r.ts)
            for kind, size, step in (
                ("tumbling", s.tumbling, s.tumbling),
                ("hopping", s.hopping, s.hopping_step),
            ):
                counted = False
                for start in _time_windows(r.ts, size, step):
                    if start + size + s.grace > observed:  # open: end + grace > stream time
                        finals[kind][(r.key, start, start + size)] += 1
                        counted = True
                if not counted:
                    late[kind] += 1
            # sliding: on time iff its newest window [ts, ts + d] has not closed
            if r.ts + s.sliding >= observed - s.grace:
                assert r.ts >= observed - s.grace, "partly late record: use partial=False"
                accepted.setdefault(r.key, []).append(r.ts)
            else:
                late["sliding"] += 1
            # sessions: merge with the sessions within the gap that were still open before
            # this record (closed once stream time reaches end + gap + grace)
            found = [
                w
                for w in sessions.get(r.key, [])
                if w[1] >= r.ts - s.session_gap
                and w[0] <= r.ts + s.session_gap
                and w[1] + s.session_gap + s.grace > prior
            ]
            start = min([r.ts] + [w[0] for w in found])
            end = max([r.ts] + [w[1] for w in found])
            if end < observed - s.grace - s.session_gap:
                late["session"] += 1
                continue
            count = 1 + sum(w[2] for w in found)
            kept = [w for w in sessions.get(r.key, []) if w not in found]
            sessions[r.key] = [*kept, [start, end, count]]
        for key, spans in sessions.items():
            for start, end, count in spans:
                finals["session"][(key, start, end)] += count
        d = s.sliding
        for key, stamps in accepted.items():
            stamps.sort()
            windows = {(t - d, t) for t in stamps}
            windows |= {
                (t + 1, t + 1 + d) for t in stamps if any(t < u <= t + 1 + d for u in stamps)
            }
            for start, end in windows:
                n = sum(1 for u in stamps if start <= u <= end)
                if n:
                    finals["sliding"][(key, start, end)] += n
    return Expected(finals, late)


def closed_by_end(data: Dataset, finals: dict[str, Windows]) -> dict[str, Windows]:
    """The windows that have closed once each partition's stream time is at its end: those are
    emitted; the last windows of the flush keys are still open."""
    s = data.sizes
    end = {p: max(r.ts for r in records) for p, records in data.by_partition().items()}
    partition = {r.key: r.partition for r in data.records}
    closes = {
        "tumbling": lambda w, p: w[2] + s.grace <= p,
        "hopping": lambda w, p: w[2] + s.grace <= p,
        "sliding": lambda w, p: w[2] + s.grace < p,
        "session": lambda w, p: w[2] + s.session_gap + s.grace <= p,
    }
    return {
        kind: Counter(
            {w: n for w, n in finals[kind].items() if closes[kind](w, end[partition[w[0]]])}
        )
        for kind in finals
    }
