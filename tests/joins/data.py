"""Join test data: two co-partitioned input topics, ``left`` and ``right``, with the edge cases
that decide join semantics, and the order a task processes them in.

Every join kind of the differential test reads these two topics: as streams (stream-stream),
as a stream and a table (stream-table, versioned stream-table, stream-GlobalTable), or as two
tables (table-table, foreign key). Each record's value names the record (``L17``, ``R4``), so
every join result says which records made it (``L17+R4``, ``L17+null``). A left value may carry a
reference to a right key after ``>`` (``L17>p1.k3``): the foreign key of the foreign-key join and
the mapped key of the GlobalTable join; a reference to ``nowhere`` matches no right key, and a
left value without ``>`` has a null foreign key.

Per partition, time moves forward in steps of whole 10 ms (so window edges, ``before``,
``after`` and grace, also whole 10 ms, can be hit exactly), with these cases mixed in at random:

- ties: a left and a right record of the same key at the same time (the order the two topics'
  records are processed in is then the broker's and the task's to choose);
- exact edges: right records at exactly ``t - before`` and ``t + after`` of a left record at
  ``t``, and one 10 ms outside; and partners arriving exactly when stream time is at a record's
  window close (``t + after + grace``): still open;
- out of order within grace; late past grace but within the join stores' retention
  (``before + after + grace``: Kafka Streams still matches them); late past retention;
- duplicates (same side, key and time); null keys; null values (tombstones); keys that only
  ever appear on one side; left values whose reference changes, is deleted or points nowhere.

Keys go to the partition Kafka's default partitioner gives them (murmur2), as a foreign-key join
requires of its right table (its subscriptions are routed that way) and as any producer would
write them; null keys go to the partition chosen for them. Two scenarios are written on purpose,
each on a key of its own, because random data rarely hits them: an out-of-order left record
whose window end is behind stream time but whose grace is not over, followed by a partner (a
null there is spurious), and a left record whose window closes unmatched, followed by a partner
later than grace but within the stores' retention (a pair there comes after the null).

Each partition ends with *flush* records of a key of their own, on both sides, far enough ahead
that every window has closed, every pending left/outer record is due and every versioned
lookup is decided (they pair with each other, so they leave nothing pending themselves).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache

from aiokafka.partitioner import murmur2

# A recent whole hour, in ms (the windows tests' reasons hold: the broker's retention never
# deletes the records, and times are far from 0, where Kafka Streams clamps join windows).
from tests.windows.data import BASE

LEFT, RIGHT = "left", "right"
NOWHERE = "nowhere"


@dataclass(frozen=True)
class Params:
    """Join parameters in ms. The stream-stream window is asymmetric on purpose."""

    before: int = 3_000
    after: int = 5_000
    grace: int = 2_000
    #: Versioned table: history retention, and the stream-table join's grace (KIP-923).
    history: int = 15_000
    table_grace: int = 1_000

    @property
    def retention(self) -> int:
        """How long the stream-stream join stores keep a record (Kafka Streams: size + grace)."""
        return self.before + self.after + self.grace


@dataclass(frozen=True)
class Rec:
    topic: str
    partition: int
    key: str | None
    value: str | None
    ts: int
    #: Position in its topic partition (the offset, when written in order from an empty topic).
    offset: int = -1

    @property
    def name(self) -> str | None:
        """The record's name (``L17``), without its reference; None for a tombstone."""
        return None if self.value is None else self.value.split(">", 1)[0]

    @property
    def ref(self) -> str | None:
        """The right key a left value refers to (None: no reference)."""
        if self.value is None or ">" not in self.value:
            return None
        return self.value.split(">", 1)[1]


@dataclass
class Dataset:
    records: list[Rec]
    partitions: int
    params: Params
    made: Counter[str] = field(default_factory=Counter)

    def of(self, topic: str, partition: int) -> list[Rec]:
        return [r for r in self.records if r.topic == topic and r.partition == partition]


def partition_of(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` (murmur2, as the Java client)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


@cache
def keys_of(partition: int, partitions: int, prefix: str, count: int) -> tuple[str, ...]:
    """``count`` keys ``<prefix><n>`` that the default partitioner puts in ``partition``."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        key = f"{prefix}{n}"
        if partition_of(key, partitions) == partition:
            found.append(key)
        n += 1
    return tuple(found)


def processing_order(left: list[Rec], right: list[Rec], *, ties: str = LEFT) -> list[Rec]:
    """The order one task processes a partition of each topic in: always the head record with
    the smaller timestamp (Kafka Streams' ``PartitionGroup``, and ours), each topic in offset
    order. On equal head timestamps, ``ties`` goes first (the real order there is up to the
    implementation: comparisons must not depend on it)."""
    out: list[Rec] = []
    i = j = 0
    while i < len(left) or j < len(right):
        if j >= len(right):
            take_left = True
        elif i >= len(left):
            take_left = False
        elif left[i].ts != right[j].ts:
            take_left = left[i].ts < right[j].ts
        else:
            take_left = ties == LEFT
        if take_left:
            out.append(left[i])
            i += 1
        else:
            out.append(right[j])
            j += 1
    return out


def generate(seed: int, *, per_partition: int = 300, partitions: int = 2) -> Dataset:
    rng = random.Random(seed)
    params = Params()
    data = Dataset([], partitions, params)
    names = {LEFT: 0, RIGHT: 0}
    shared = [k for p in range(partitions) for k in keys_of(p, partitions, "k", 6)]

    def value(topic: str) -> str:
        names[topic] += 1
        name = ("L" if topic == LEFT else "R") + str(names[topic])
        if topic == LEFT:
            roll = rng.random()
            if roll < 0.45:
                return f"{name}>{rng.choice(shared)}"
            if roll < 0.55:
                return f"{name}>{NOWHERE}"
        return name

    for p in range(partitions):
        data.records.extend(_partition(rng, data, p, value, per_partition))
    # Offsets: the position of each record in its topic partition.
    positions: Counter[tuple[str, int]] = Counter()
    numbered = []
    for r in data.records:
        numbered.append(
            Rec(r.topic, r.partition, r.key, r.value, r.ts, positions[(r.topic, r.partition)])
        )
        positions[(r.topic, r.partition)] += 1
    data.records = numbered
    return data


def _partition(
    rng: random.Random, data: Dataset, p: int, value: Callable[[str], str], size: int
) -> list[Rec]:
    """One partition's records of both topics, in the order they are written."""
    params = data.params
    keys = list(keys_of(p, data.partitions, "k", 6))
    own = iter(keys_of(p, data.partitions, "own", size))  # keys used once, by one scenario
    out: list[Rec] = []
    #: Edge partners: (when to write it, order, record), written once time reaches it.
    scheduled: list[tuple[int, int, Rec]] = []
    t = BASE + 10 * rng.randrange(100)

    def emit(topic: str, key: str | None, ts: int, val: str | None = "", why: str = "") -> None:
        v = value(topic) if val == "" else val
        out.append(Rec(topic, p, key, v, ts))
        if why:
            data.made[why] += 1

    while len(out) < size:
        for entry in sorted(e for e in scheduled if e[0] <= t):
            scheduled.remove(entry)
            out.append(entry[2])
        roll = rng.random()
        side = rng.choice((LEFT, RIGHT))
        key = rng.choice(keys)
        if roll < 0.40:
            emit(side, key, t)
        elif roll < 0.46:
            emit(LEFT, key, t, why="tie")
            emit(RIGHT, key, t)
        elif roll < 0.51:
            # A left record and right partners at its exact window edges (and one just
            # outside), written when time reaches them; and one right record that arrives
            # exactly when stream time is at the left record's window close.
            emit(LEFT, key, t, why="edges")
            edges = (t - params.before, t - params.before - 10, t + params.after)
            for ts in (*edges, t + params.after + 10):
                scheduled.append((ts, len(scheduled), Rec(RIGHT, p, key, value(RIGHT), ts)))
            # Stream time reaches the close exactly (a record of a key of its own), then a
            # partner at the window's end arrives: open at that instant, so it matches.
            close = t + params.after + params.grace
            clock = Rec(LEFT, p, next(own), value(LEFT), close)
            partner = Rec(RIGHT, p, key, value(RIGHT), t + params.after)
            scheduled.append((close, len(scheduled), clock))
            scheduled.append((close, len(scheduled), partner))
        elif roll < 0.58:
            emit(side, key, t - 10 * rng.randrange(params.grace // 10 + 1), why="within grace")
        elif roll < 0.63:
            late = params.grace + 10 * rng.randrange(1, (params.before + params.after) // 10)
            emit(side, key, t - late, why="late, retained")
        elif roll < 0.65:
            emit(side, key, t - params.retention - 10 * rng.randrange(1, 300), why="too late")
        elif roll < 0.69 and out:
            same = [r for r in out if r.topic == side and r.key is not None]
            if same:
                prev = same[-1]
                emit(side, prev.key, prev.ts, why="duplicate")
        elif roll < 0.72:
            emit(side, None, t, why="null key")
        elif roll < 0.77:
            emit(side, key, t, None, why="null value")
        elif roll < 0.81:
            only = keys_of(p, data.partitions, f"only-{side}-", 1)[0]
            emit(side, only, t, why="one-sided key")
        elif roll < 0.83:
            # Behind stream time by more than ``after`` but less than ``after + grace``,
            # unmatched, then a partner at the same time: no null is due (Kafka Streams emits
            # one). The records of keys of their own around them make the task process stream
            # time up to ``now`` first, then the left record, then its partner.
            now = max(r.ts for r in out) if out else t
            fresh, at = next(own), now - params.after - params.grace // 2
            emit(LEFT, next(own), now)
            emit(LEFT, fresh, at, why="partner after an early null")
            emit(RIGHT, next(own), now + 10)
            emit(RIGHT, fresh, at)
        elif roll < 0.85:
            # Unmatched until its window closes, then a partner later than grace allows but
            # still retained: the null is final (Kafka Streams pairs them too).
            fresh = next(own)
            emit(LEFT, fresh, t, why="partner after the null")
            write_at = t + params.after + params.grace + 500
            # Stream time past the close, on the partner's topic: processed before the partner.
            clock = Rec(RIGHT, p, next(own), value(RIGHT), write_at)
            partner = Rec(RIGHT, p, fresh, value(RIGHT), t + params.after)
            scheduled.append((write_at, len(scheduled), clock))
            scheduled.append((write_at, len(scheduled), partner))
        else:
            emit(side, key, t)
        t += rng.choice((0, 10 * rng.randrange(1, 200)))
    out.extend(entry[2] for entry in sorted(scheduled))
    end = max(r.ts for r in out)
    step = params.retention + params.history + params.table_grace
    key = keys_of(p, data.partitions, "flush", 1)[0]
    for i in range(1, 4):
        flush = end + i * step
        out.append(Rec(LEFT, p, key, f"L-flush{p}.{i}", flush))
        out.append(Rec(RIGHT, p, key, f"R-flush{p}.{i}", flush))
    return out


def by_name(records: Iterable[Rec]) -> dict[str, Rec]:
    return {r.name: r for r in records if r.name is not None}
