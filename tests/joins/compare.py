"""What each join's output must be, given the input: checks shared by Kafka Streams' run and
(once the join processors exist) streams_app's.

:func:`check` compares one join's output rows with the oracle or model of its kind, for every
record of the input. For streams_app (``reference=False``) the output must be what the
definitions say. For Kafka Streams (``reference=True``) the differences docs/joins.md
enumerates are allowed *and counted*, and anything else fails:

- **spurious null** (left/outer stream-stream): Kafka Streams emitted a null for a record that
  was also paired: it emits the null at once when an out-of-order record's window end is
  behind stream time, though its grace is not over, and the partner came within grace;
- **pair after the null** (left/outer stream-stream): Kafka Streams paired a record whose
  window had closed and whose null had been emitted, with a partner later than grace allows
  but still within the join stores' retention; and, in an outer join, **late partner paired
  instead of its null**: that partner, which the definitions leave unmatched;
- **late pair instead of a held-back null** (left/outer stream-stream): a record whose window
  closed unmatched, whose null Kafka Streams held back (below), then paired with a partner
  later than grace allows: the pair replaced the null;
- **null emitted early** / **null held back** (left/outer stream-stream, order within a task's
  output): a null Kafka Streams emitted before, or after, the place the definitions give it
  (when stream time first passes the record's window close);
- **null key not joined** (versioned stream-table left join): Kafka Streams 4.3.1 fails on a
  null-key stream record there, so the Kafka Streams application filters them out first.

**What a task may choose.** A task processes its partitions of the two topics in timestamp
order: always the head record with the smaller time. That order is the order of each record's
*running maximum* (the largest time in its partition up to it): a left record precedes a right
record whose running maximum is larger, and follows one whose running maximum is smaller. Only
records with *equal* running maxima, which always involves two records of the same time on the
two topics, may go either way, and an implementation chooses (Kafka Streams' choice depends on
its priority queue's state). So the checks accept every answer some such order gives:
stream-table joins per stream record (any table prefix the record may have met); table-table
joins per key (some allowed order of the key's updates gives exactly its changes); versioned
stream-table and stream-stream joins as either extreme order (ties always left first, always
right first) gives: rows only one of the two gives are left out of the comparison and counted
as *decided by ties* (in a stream-stream join a tie can decide a side's observed time, and with
it whether a late record still finds a retained partner). Within a task's stream-stream output,
pairs and nulls are compared in order up to the same freedom (:func:`_compare_order`).
Foreign-key joins are compared by final state (their intermediate results depend on how
subscriptions and responses interleave on their topics).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tests.joins import models, oracle
from tests.joins.data import LEFT, RIGHT, Dataset, Rec, processing_order
from tests.joins.models import Row

STREAM_STREAM = ("ss-inner", "ss-left", "ss-outer")
STREAM_TABLE = ("st-inner", "st-left", "stv-inner", "stv-left")
GLOBAL = ("gt-inner", "gt-left")
TABLE_TABLE = ("tt-inner", "tt-left", "tt-outer")
FOREIGN_KEY = ("fk-inner", "fk-left")
KINDS = STREAM_STREAM + STREAM_TABLE + GLOBAL + TABLE_TABLE + FOREIGN_KEY


#: Differences from the definitions that Kafka Streams 4.3 may show (docs/joins.md enumerates
#: them), and those this input is built to provoke, which it must show.
ALLOWED_DIFFERENCES = {
    "stv-left": {"null key not joined (Kafka Streams fails on it)"},
    "ss-left": {
        "spurious null",
        "pair after the null",
        "late pair instead of a held-back null",
        "null held back",
        "null emitted early",
    },
}
ALLOWED_DIFFERENCES["ss-outer"] = ALLOWED_DIFFERENCES["ss-left"] | {
    "late partner paired instead of its null"
}
REQUIRED_DIFFERENCES = {
    "stv-left": {"null key not joined (Kafka Streams fails on it)"},
    "ss-left": {"spurious null", "pair after the null", "null held back"},
    "ss-outer": {"spurious null", "pair after the null", "null held back"},
}


@dataclass
class Outcome:
    """One join kind's comparison: sizes, and the allowed differences found (with examples)."""

    kind: str
    rows: int
    expected: int
    #: Rows left out of the comparison: only one of the orders a task may choose gives them.
    undecided: int = 0
    differences: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, what: str, example: object) -> None:
        self.differences[what] += 1
        if len(self.examples.setdefault(what, [])) < 3:
            self.examples[what].append(str(example))

    def line(self) -> str:
        extra = ", ".join(f"{n} {what}" for what, n in sorted(self.differences.items()))
        undecided = f" ({self.undecided} decided by ties)" if self.undecided else ""
        return f"{self.kind}: {self.rows} rows, {self.expected} expected{undecided}" + (
            f"; allowed differences: {extra}" if extra else ""
        )


def check_differences(outcome: Outcome) -> None:
    """Kafka Streams' differences from the definitions are the documented ones, and those the
    input is built to provoke are there."""
    found = set(outcome.differences)
    allowed = ALLOWED_DIFFERENCES.get(outcome.kind, set())
    required = REQUIRED_DIFFERENCES.get(outcome.kind, set())
    assert found <= allowed, (outcome.kind, "undocumented", found - allowed)
    assert required <= found, (outcome.kind, "not provoked", required - found)


def _fail(kind: str, what: str, items: object) -> AssertionError:
    return AssertionError(f"{kind}: {what}: {items}")


def check(
    kind: str,
    rows: list[Row],
    data: Dataset,
    *,
    reference: bool,
    partitions: list[int] | None = None,
) -> Outcome:
    """Check one join's output rows (in the order read; ``partitions``: the output partition
    of each, for the order comparison of stream-stream joins) against its definition."""
    join_kind = kind.split("-")[1]
    lefts = [r for r in data.records if r.topic == LEFT]
    rights = [r for r in data.records if r.topic == RIGHT]
    if kind in STREAM_STREAM:
        return _stream_stream(kind, rows, data, reference, partitions)
    if kind in STREAM_TABLE:
        return _stream_table(kind, rows, data, reference)
    if kind in GLOBAL:
        expected = models.global_table(lefts, rights, join_kind)
        if Counter(rows) != Counter(expected):
            only_got = Counter(rows) - Counter(expected)
            only_expected = Counter(expected) - Counter(rows)
            raise _fail(kind, "rows differ", (list(only_got)[:5], list(only_expected)[:5]))
        return Outcome(kind, len(rows), len(expected))
    if kind in TABLE_TABLE:
        return _table_table(kind, rows, data)
    if kind in FOREIGN_KEY:
        wanted = models.foreign_key_final(lefts, rights, join_kind)
        got = {k: row._replace(ts=0) for k, row in models.final_state(rows).items()}
        if got != wanted:
            diff = sorted(set(got.items()) ^ set(wanted.items()), key=repr)[:6]
            raise _fail(kind, "final state differs (got ^ expected)", diff)
        return Outcome(kind, len(rows), len(wanted))
    raise ValueError(kind)


# -- what a task may choose -------------------------------------------------------------------


def running_max(records: list[Rec]) -> list[int]:
    """Each record's running maximum time in its partition (see the module doc)."""
    out, top = [], None
    for r in records:
        top = r.ts if top is None else max(top, r.ts)
        out.append(top)
    return out


def _keyed(records: list[Rec]) -> list[tuple[Rec, int]]:
    return list(zip(records, running_max(records), strict=True))


# -- stream-stream ---------------------------------------------------------------------------


def _stream_stream(
    kind: str, rows: list[Row], data: Dataset, reference: bool, partitions: list[int] | None
) -> Outcome:
    join_kind = kind.split("-")[1]
    expected: dict[int, list[oracle.Out]] = {}
    trace = oracle.Trace()  # of both orders: released or matched in either
    arrival: dict[str, int] = {}
    undecided: set[oracle.Out] = set()
    for p in range(data.partitions):
        outs = []
        for ties in (LEFT, RIGHT):
            order = processing_order(data.of(LEFT, p), data.of(RIGHT, p), ties=ties)
            outs.append(oracle.join(order, join_kind, data.params, trace))
            if ties == LEFT:
                arrival.update({r.name or "": i for i, r in enumerate(order)})
        expected[p] = outs[0]
        # Rows only one extreme order gives: which one a task gives is its choice on ties
        # (through retention: a tie decides a side's observed time when a late record looks).
        undecided |= set((Counter(outs[0]) - Counter(outs[1])).elements())
        undecided |= set((Counter(outs[1]) - Counter(outs[0])).elements())
    flat = [o for outs in expected.values() for o in outs if o not in undecided]
    got = Counter(oracle.Out(*row) for row in rows)
    for out in undecided:
        got.pop(out, None)
    want = Counter(flat)
    outcome = Outcome(kind, len(rows), len(flat), undecided=len(undecided))
    if got != want and not reference:
        raise _fail(
            kind, "rows differ (got, expected)", (list(got - want)[:5], list(want - got)[:5])
        )
    nulled = {o.left or o.right for o in got if o.left is None or o.right is None}
    extra: set[oracle.Out] = set()
    late_pairs: dict[str, str] = {}  # record released by the definitions -> its late partner
    for out in (got - want).elements():
        extra.add(out)
        if out.left is None or out.right is None:
            if (out.left or out.right) not in trace.matched:
                raise _fail(kind, "an unexpected null", out)
            outcome.note("spurious null", f"{out} (the record is also paired)")
            continue
        first, second = sorted((out.left, out.right), key=lambda n: arrival[n])
        if first not in trace.released:
            raise _fail(kind, "an unexpected pair", out)
        late_pairs[first] = second
        if first in nulled:
            outcome.note("pair after the null", f"{out}: {first}'s null came first")
        else:
            outcome.note("late pair instead of a held-back null", f"{out}: {first} had no null")
    missing: set[oracle.Out] = set()
    for out in (want - got).elements():
        missing.add(out)
        name = out.left or out.right or ""
        if out.left is not None and out.right is not None:
            raise _fail(kind, "a pair missing", out)
        if name in late_pairs:
            continue  # counted above: its null was held back, then the late pair came instead
        if name not in late_pairs.values():
            raise _fail(kind, "a null missing", out)
        outcome.note("late partner paired instead of its null", out)
    if partitions is not None:
        blocks = _blocks(data)
        _compare_order(
            kind,
            rows,
            partitions,
            expected,
            extra | undecided,
            missing | undecided,
            blocks,
            trace,
            outcome,
        )
    return outcome


def _blocks(data: Dataset) -> dict[object, int]:
    """Each record's running maximum (the block of processing order it falls in), by record
    and, for records with a value, by name."""
    out: dict[object, int] = {}
    for p in range(data.partitions):
        for topic in (LEFT, RIGHT):
            records = data.of(topic, p)
            for rec, top in zip(records, running_max(records), strict=True):
                out[rec] = top
                if rec.name is not None:
                    out[rec.name] = top
    return out


def _compare_order(
    kind: str,
    rows: list[Row],
    partitions: list[int],
    expected: dict[int, list[oracle.Out]],
    extra: set[oracle.Out],
    missing: set[oracle.Out],
    blocks: dict[object, int],
    trace: oracle.Trace,
    outcome: Outcome,
) -> None:
    """Order within each task's output (a key's output partition is its input partition: both
    are the default partitioner's). A pair is emitted while its later record's block (running
    maximum) is processed, and blocks come in order; within a block the task may order records
    of equal running maxima either way. A null is emitted while the block of the record that
    closed its window is processed (before that record's own pairs): emitted in an earlier
    block, it came early; in a later one, it was held back."""
    for p in range(len(expected)):
        got = [
            oracle.Out(*row)
            for row, part in zip(rows, partitions, strict=True)
            if part == p and row.key is not None and oracle.Out(*row) not in extra
        ]
        want = [o for o in expected[p] if o.key is not None and o not in missing]

        def block(out: oracle.Out) -> int:
            return max(blocks[out.left or ""], blocks[out.right or ""])

        got_pairs = oracle.pairs(got)
        seq = [block(o) for o in got_pairs]
        if seq != sorted(seq):
            raise _fail(kind, f"pairs out of block order in task {p}", got_pairs[:3])
        if Counter((block(o), o) for o in got_pairs) != Counter(
            (block(o), o) for o in oracle.pairs(want)
        ):
            raise _fail(kind, f"pairs in other blocks in task {p}", got_pairs[:3])
        places = _null_places(got)
        for null in _null_places(want):
            name = null.left or null.right or ""
            trigger = blocks[trace.emitted_by[name]]
            low = sum(1 for b in seq if b < trigger)
            high = sum(1 for b in seq if b <= trigger)
            if places[null] > high:
                outcome.note(
                    "null held back", f"{null}: after {places[null]} pairs, not {low}-{high}"
                )
            elif places[null] < low:
                outcome.note(
                    "null emitted early", f"{null}: after {places[null]} pairs, not {low}-{high}"
                )


def _null_places(outs: list[oracle.Out]) -> dict[oracle.Out, int]:
    """Each null, with the number of pairs before it."""
    places, pairs = {}, 0
    for out in outs:
        if out.left is None or out.right is None:
            places[out] = pairs
        else:
            pairs += 1
    return places


# -- stream-table ----------------------------------------------------------------------------


def _stream_table(kind: str, rows: list[Row], data: Dataset, reference: bool) -> Outcome:
    join_kind = kind.split("-")[1]
    allowed: dict[str, set[Row | None]] = {}
    for p in range(data.partitions):
        if kind.startswith("stv"):
            for ties in (LEFT, RIGHT):
                order = processing_order(data.of(LEFT, p), data.of(RIGHT, p), ties=ties)
                found = {
                    row.left: row
                    for row in models.versioned_stream_table(order, join_kind, data.params)
                }
                for rec in data.of(LEFT, p):
                    if rec.name is not None:
                        allowed.setdefault(rec.name, set()).add(found.get(rec.name))
        else:
            for name, choices in _table_prefixes(data, p, join_kind).items():
                allowed[name] = choices
    got: dict[str, Row] = {}
    for row in rows:
        if row.left is None or row.left in got:
            raise _fail(kind, "a row twice, or without its stream record", row)
        got[row.left] = row
    outcome = Outcome(kind, len(rows), sum(1 for c in allowed.values() if None not in c))
    if reference and kind == "stv-left":
        for name in [r.name for r in data.records if r.topic == LEFT and r.key is None]:
            if name is not None and name not in got:
                allowed[name] = {None}
                outcome.note("null key not joined (Kafka Streams fails on it)", name)
    wrong = [
        (name, got.get(name), choices)
        for name, choices in allowed.items()
        if got.get(name) not in choices
    ]
    if wrong:
        raise _fail(kind, "rows differ (record, got, allowed)", wrong[:5])
    return outcome


def _table_prefixes(data: Dataset, p: int, kind: str) -> dict[str, set[Row | None]]:
    """Per stream record, every result it may have: the table as any right prefix between the
    records surely before it and those surely after it left it (module doc)."""
    left, right = data.of(LEFT, p), data.of(RIGHT, p)
    rkeys = running_max(right)
    out: dict[str, set[Row | None]] = {}
    for rec, key in zip(left, running_max(left), strict=True):
        if rec.name is None or rec.value is None:
            continue
        if rec.key is None:
            out[rec.name] = {Row(None, rec.name, None, rec.ts) if kind == "left" else None}
            continue
        low = sum(1 for k in rkeys if k < key)
        high = sum(1 for k in rkeys if k <= key)
        choices: set[Row | None] = set()
        for j in range(low, high + 1):
            table = [r for r in right[:j] if r.key == rec.key]
            match = table[-1] if table and table[-1].value is not None else None
            if match is not None:
                choices.add(Row(rec.key, rec.name, match.name, rec.ts))
            else:
                choices.add(Row(rec.key, rec.name, None, rec.ts) if kind == "left" else None)
        out[rec.name] = choices
    return out


# -- table-table -----------------------------------------------------------------------------


def _table_table(kind: str, rows: list[Row], data: Dataset) -> Outcome:
    join_kind = kind.split("-")[1]
    got: dict[str | None, list[Row]] = {}
    for row in rows:
        got.setdefault(row.key, []).append(row)
    outcome = Outcome(kind, len(rows), 0)
    seen: set[str | None] = set()
    for p in range(data.partitions):
        left, right = _keyed(data.of(LEFT, p)), _keyed(data.of(RIGHT, p))
        keys = {r.key for r, _ in left + right if r.key is not None}
        seen |= keys
        for key in sorted(keys):
            mine = [x for x in left if x[0].key == key], [x for x in right if x[0].key == key]
            outcome.expected += 1
            if not _some_order_gives(*mine, got.get(key, []), join_kind):
                raise _fail(kind, f"no allowed order gives the changes of {key}", got.get(key))
    if set(got) - seen:
        raise _fail(kind, "rows of keys never written", set(got) - seen)
    return outcome


def _some_order_gives(
    left: list[tuple[Rec, int]], right: list[tuple[Rec, int]], want: list[Row], kind: str
) -> bool:
    """Whether some order of one key's updates that a task may choose (module doc) makes the
    join emit exactly ``want``. A search over (left done, right done, rows emitted): the
    tables' state after ``i`` left and ``j`` right updates does not depend on their order."""
    seen: set[tuple[int, int, int]] = set()

    def current(side: list[tuple[Rec, int]], n: int) -> Rec | None:
        return side[n - 1][0] if n and side[n - 1][0].value is not None else None

    def step(i: int, j: int, k: int) -> bool:
        if (i, j, k) in seen:
            return False
        seen.add((i, j, k))
        if i == len(left) and j == len(right):
            return k == len(want)
        moves = []
        if i < len(left) and (j == len(right) or left[i][1] <= right[j][1]):
            moves.append((left[i][0], current(left, i), current(right, j), i + 1, j))
        if j < len(right) and (i == len(left) or right[j][1] <= left[i][1]):
            moves.append((right[j][0], current(right, j), current(left, i), i, j + 1))
        for rec, old, partner, ni, nj in moves:
            row = models.table_table_change(rec, old, partner, kind)
            if row is None:
                if step(ni, nj, k):
                    return True
            elif k < len(want) and want[k] == row and step(ni, nj, k + 1):
                return True
        return False

    return step(0, 0, 0)
