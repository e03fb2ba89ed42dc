"""Models of the joins other than stream-stream (which has :mod:`tests.joins.oracle`), from
the definitions in docs/joins.md, with plain dicts and lists and no streams_app code.

Each processes one task's records in processing order (:func:`tests.joins.data.processing_order`)
and returns :class:`Row`s. Where the definition leaves something to the implementation (the
order of two records of the two topics with the same timestamp), the caller runs the model for
both orders and accepts either answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from tests.joins.data import LEFT, RIGHT, Params, Rec


class Row(NamedTuple):
    """A join result: key, the left and right record names (None: no partner), time; a
    table join's tombstone has both names None."""

    key: str | None
    left: str | None
    right: str | None
    ts: int

    @property
    def tombstone(self) -> bool:
        return self.left is None and self.right is None


def _name(value: str | None) -> str | None:
    return None if value is None else value.split(">", 1)[0]


def stream_table(order: Iterable[Rec], kind: str) -> list[Row]:
    """Stream (left) - table (right, latest value) join: each stream record, when processed,
    meets the table as it is then; table updates emit nothing. Inner: no table value, no
    output; left: ``(record, None)``, null keys included (KIP-962)."""
    table: dict[str, Rec] = {}
    out = []
    for rec in order:
        if rec.topic == RIGHT:
            if rec.key is not None:
                if rec.value is None:
                    table.pop(rec.key, None)
                else:
                    table[rec.key] = rec
            continue
        if rec.value is None or (rec.key is None and kind == "inner"):
            continue
        match = None if rec.key is None else table.get(rec.key)
        if match is not None or kind == "left":
            out.append(Row(rec.key, rec.name, None if match is None else match.name, rec.ts))
    return out


def versioned_stream_table(order: Iterable[Rec], kind: str, p: Params) -> list[Row]:
    """Stream-table join against a versioned table (history ``p.history``) with join grace
    ``p.table_grace``: a stream record waits until the stream side's observed time reaches its
    time plus grace (one that is already that late joins at once), then meets the table *as of
    its own time*; waiting records go in time order, then key, then arrival."""
    versions: dict[str, list[tuple[int, Rec | None]]] = {}
    table_time: int | None = None
    stream_time: int | None = None
    buffered: list[tuple[int, str, int, Rec]] = []
    out: list[Row] = []

    def as_of(key: str, t: int) -> Rec | None:
        history = sorted(versions.get(key, []), key=lambda v: v[0])
        if not history:
            return None
        if table_time is not None and t < table_time - p.history:
            latest_ts, latest = history[-1]
            return latest if latest_ts <= t else None
        found = [v for ts, v in history if ts <= t]
        return found[-1] if found else None

    def joined(rec: Rec) -> None:
        match = None if rec.key is None else as_of(rec.key, rec.ts)
        if match is not None or kind == "left":
            out.append(Row(rec.key, rec.name, None if match is None else match.name, rec.ts))

    for arrival, rec in enumerate(order):
        if rec.topic == RIGHT:
            if rec.key is None:
                continue
            if table_time is not None and rec.ts < table_time - p.history:
                continue  # older than the history: not stored
            table_time = rec.ts if table_time is None else max(table_time, rec.ts)
            kept = [v for v in versions.get(rec.key, []) if v[0] != rec.ts]
            versions[rec.key] = [*kept, (rec.ts, rec if rec.value is not None else None)]
            continue
        stream_time = rec.ts if stream_time is None else max(stream_time, rec.ts)
        if rec.value is None or (rec.key is None and kind == "inner"):
            continue
        if rec.ts < stream_time - p.table_grace:
            joined(rec)
            continue
        buffered.append((rec.ts, rec.key or "", arrival, rec))
        buffered.sort()
        while buffered and buffered[0][0] <= stream_time - p.table_grace:
            joined(buffered.pop(0)[3])
    return out


def global_table(left: Iterable[Rec], right: Iterable[Rec], kind: str) -> list[Row]:
    """Stream-GlobalTable join: the table is every right record of every partition, read
    completely before the stream starts; the stream record's reference (not its key) is the
    table key; no reference: inner drops the record, left joins it with None."""
    table: dict[str, Rec] = {}
    for rec in right:
        if rec.key is not None:
            if rec.value is None:
                table.pop(rec.key, None)
            else:
                table[rec.key] = rec
    out = []
    for rec in left:
        if rec.value is None:
            continue
        match = None if rec.ref is None else table.get(rec.ref)
        if match is not None or kind == "left":
            out.append(Row(rec.key, rec.name, None if match is None else match.name, rec.ts))
    return out


def table_table(order: Iterable[Rec], kind: str) -> list[Row]:
    """Table-table join changes, as Kafka Streams' KTableKTable*Join processors emit them (no
    old values, no cache): an update on either side emits the new joined value, or a tombstone
    where the join has none; the time is the larger of the two sides' current times."""
    tables: dict[str, dict[str, Rec]] = {LEFT: {}, RIGHT: {}}
    out = []
    for rec in order:
        if rec.key is None:
            continue
        other = RIGHT if rec.topic == LEFT else LEFT
        old = tables[rec.topic].get(rec.key)
        if rec.value is None:
            tables[rec.topic].pop(rec.key, None)
        else:
            tables[rec.topic][rec.key] = rec
        row = table_table_change(rec, old, tables[other].get(rec.key), kind)
        if row is not None:
            out.append(row)
    return out


def table_table_change(rec: Rec, old: Rec | None, partner: Rec | None, kind: str) -> Row | None:
    """What one update (``rec``, replacing ``old`` on its side) of a table-table join emits,
    given the other side's current ``partner`` of its key: the new joined value, a tombstone,
    or nothing."""
    side = rec.topic
    new = rec if rec.value is not None else None
    this_outer = kind == "outer" or (kind == "left" and side == LEFT)
    other_outer = kind == "outer" or (kind == "left" and side == RIGHT)
    if partner is None:
        if not this_outer or (new is None and old is None):
            return None
        ts = rec.ts
    else:
        ts = max(rec.ts, partner.ts)
    if (new is None and not other_outer) or (new is None and partner is None):
        return Row(rec.key, None, None, ts)  # the joined value disappears
    left, right = (new, partner) if side == LEFT else (partner, new)
    return Row(rec.key, _name_of(left), _name_of(right), ts)


def _name_of(rec: Rec | None) -> str | None:
    return None if rec is None else rec.name


def final_state(rows: Iterable[Row]) -> dict[str, Row]:
    """The last result per key, tombstones removing it."""
    state: dict[str, Row] = {}
    for row in rows:
        if row.key is None:
            continue
        if row.tombstone:
            state.pop(row.key, None)
        else:
            state[row.key] = row
    return state


def foreign_key_final(left: Iterable[Rec], right: Iterable[Rec], kind: str) -> dict[str, Row]:
    """The final result per left key of a foreign-key join (KIP-213): the left table's final
    value joined with the right value its reference points to (inner: only where there is
    one; left: None where there is none, or no reference). Intermediate results depend on how
    subscriptions and responses interleave on their topics: only the final state is defined.
    Rows carry time 0 (not compared)."""
    tables: dict[str, dict[str, Rec]] = {LEFT: {}, RIGHT: {}}
    for rec in [*left, *right]:
        if rec.key is None:
            continue
        if rec.value is None:
            tables[rec.topic].pop(rec.key, None)
        else:
            tables[rec.topic][rec.key] = rec
    out = {}
    for key, rec in tables[LEFT].items():
        match = None if rec.ref is None else tables[RIGHT].get(rec.ref)
        if match is not None or kind == "left":
            out[key] = Row(key, rec.name, _name_of(match), 0)
    return out


def parse(key: bytes | None, value: bytes | None, ts: int) -> Row:
    """A Kafka Streams output record (value ``"<left>+<right>"``) as a Row."""
    k = None if key is None else key.decode()
    if value is None:
        return Row(k, None, None, ts)
    left, right = value.decode().split("+")
    return Row(k, None if left == "null" else _name(left), None if right == "null" else right, ts)
