"""Assertions for topology tests whose failures say what was expected and what was seen.

Every message names the topic (or table) and, for records, the partition they are in, so a
failure reads as a diagnosis: ``topic 'inventory', key 'apple' (partition 2): expected 2
records, saw 3; [1] appears twice (offsets 4 and 7)``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

from streams_app.testing.driver import OutputRecord

_MAX_LINES = 25


def _fmt(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _topic_of(records: Sequence[OutputRecord], topic: str | None) -> str:
    if topic is not None:
        return topic
    return records[0].topic if records else "<no records>"


def _fail(title: str, lines: list[str]) -> None:
    shown = lines[:_MAX_LINES]
    if len(lines) > _MAX_LINES:
        shown.append(f"... and {len(lines) - _MAX_LINES} more differences")
    raise AssertionError(title + "\n" + "\n".join("  " + line for line in shown))


def _key(value: Any) -> Hashable:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


def _compare_sequences(expected: Sequence[Any], seen: Sequence[Any]) -> str:
    """One line on how ``seen`` differs from ``expected`` (both in order)."""
    parts = [f"expected {len(expected)} record(s), saw {len(seen)}"]
    counts_seen = Counter(_key(v) for v in seen)
    counts_expected = Counter(_key(v) for v in expected)
    repeated = [v for v, n in counts_seen.items() if n > counts_expected.get(v, 0) and n > 1]
    if repeated:
        parts.append("repeated: " + ", ".join(_fmt(v) for v in repeated[:3]))
    for index, (want, got) in enumerate(zip(expected, seen, strict=False)):
        if want != got:
            parts.append(f"first difference at [{index}]: expected {_fmt(want)}, saw {_fmt(got)}")
            break
    else:
        if len(seen) > len(expected):
            parts.append(f"extra from [{len(expected)}]: {_fmt(list(seen[len(expected) :]))}")
        elif len(expected) > len(seen):
            parts.append(f"missing from [{len(seen)}]: {_fmt(list(expected[len(seen) :]))}")
    return "; ".join(parts)


def assert_output(
    records: Sequence[OutputRecord],
    expected: Iterable[tuple[Any, Any]],
    *,
    topic: str | None = None,
    ordered: bool = True,
) -> None:
    """The records hold exactly ``expected`` (key, value) pairs, **in order per key**.

    Per key is what Kafka guarantees for keyed records (one key, one partition); across keys
    the order depends on partitioning and is not compared. ``ordered=False`` ignores the order
    within a key too: for records of one key produced from several input partitions (their
    relative order depends on scheduling). Use :func:`assert_partitions` to compare whole
    partitions.
    """
    name = _topic_of(records, topic)
    want: dict[Hashable, list[Any]] = defaultdict(list)
    order: list[Hashable] = []
    for key, value in expected:
        k = _key(key)
        if k not in want:
            order.append(k)
        want[k].append(value)
    got: dict[Hashable, list[OutputRecord]] = defaultdict(list)
    for r in records:
        k = _key(r.key)
        if k not in want and k not in got:
            order.append(k)
        got[k].append(r)
    lines = []
    for k in order:
        seen = got.get(k, [])
        values = [r.value for r in seen]
        if not ordered:
            values = sorted(values, key=repr)
            want[k] = sorted(want.get(k, []), key=repr)
        if values == want.get(k, []):
            continue
        where = sorted({r.partition for r in seen})
        place = f" (partition {', '.join(map(str, where))})" if where else ""
        if k not in want:
            offsets = [f"{r.partition}@{r.offset}" for r in seen]
            lines.append(f"key {_fmt(k)}{place}: not expected, saw {_fmt(values)} at {offsets[:5]}")
        elif not seen:
            lines.append(f"key {_fmt(k)}: expected {_fmt(want[k])}, saw nothing")
        else:
            diff = _compare_sequences(want[k], values)
            lines.append(f"key {_fmt(k)}{place}: {diff}; saw {_fmt(values)}")
    if lines:
        _fail(f"topic {name!r}: the output differs from what was expected", lines)


def assert_partitions(
    records: Sequence[OutputRecord],
    expected: Mapping[int, Sequence[tuple[Any, Any]]],
    *,
    topic: str | None = None,
) -> None:
    """Each partition holds exactly ``expected[partition]`` (key, value) pairs, in order;
    partitions not in ``expected`` must be empty."""
    name = _topic_of(records, topic)
    got: dict[int, list[tuple[Any, Any]]] = defaultdict(list)
    for r in records:
        got[r.partition].append((r.key, r.value))
    lines = []
    for partition in sorted(set(got) | set(expected)):
        want, seen = list(expected.get(partition, ())), got.get(partition, [])
        if want != seen:
            lines.append(f"partition {partition}: {_compare_sequences(want, seen)}")
    if lines:
        _fail(f"topic {name!r}: partitions differ from what was expected", lines)


def assert_table(
    actual: Mapping[Any, Any], expected: Mapping[Any, Any], *, table: str = "table"
) -> None:
    """The table holds exactly ``expected``: reports missing, unexpected and wrong keys."""
    lines = []
    for key in expected:
        if key not in actual:
            lines.append(f"key {_fmt(key)}: expected {_fmt(expected[key])}, missing")
        elif actual[key] != expected[key]:
            lines.append(
                f"key {_fmt(key)}: expected {_fmt(expected[key])}, saw {_fmt(actual[key])}"
            )
    for key in actual:
        if key not in expected:
            lines.append(f"key {_fmt(key)}: not expected, saw {_fmt(actual[key])}")
    if lines:
        _fail(f"table {table!r} differs from what was expected", lines)


def assert_no_duplicates(records: Sequence[OutputRecord], *, topic: str | None = None) -> None:
    """No input record produced this topic's records twice, judged by the lineage header
    (``src``, :mod:`streams_app.lineage`) the runtime adds to every output.
    Outputs without lineage (timers) are ignored; one input may produce several records, so
    this compares (input, key, value) triples."""
    name = _topic_of(records, topic)
    seen: dict[tuple[Any, ...], list[OutputRecord]] = defaultdict(list)
    for r in records:
        lineage = r.lineage
        if lineage is not None:
            seen[(lineage, _key(r.key), _key(r.value))].append(r)
    lines = []
    for (lineage, key, value), outs in seen.items():
        if len(outs) > 1:
            at = ", ".join(f"partition {r.partition} offset {r.offset}" for r in outs)
            src = f"{lineage[0]}[{lineage[1]}]@{lineage[2]}"
            lines.append(
                f"input {src} produced ({_fmt(key)}, {_fmt(value)}) {len(outs)} times: {at}"
            )
    if lines:
        _fail(f"topic {name!r}: records were produced more than once", lines)


def assert_exactly_once(seen: Iterable[Any], expected: Iterable[Any], *, what: str) -> None:
    """``seen`` holds each of ``expected`` exactly once (order ignored): for effects a test
    collects itself, e.g. calls an agent made to an outside system."""
    got, want = Counter(_key(v) for v in seen), Counter(_key(v) for v in expected)
    lines = []
    for value in want:
        n = got.get(value, 0)
        if n == 0:
            lines.append(f"{_fmt(value)}: expected once, never seen")
        elif n != want[value]:
            lines.append(f"{_fmt(value)}: expected {want[value]} time(s), seen {n} times")
    for value in got:
        if value not in want:
            lines.append(f"{_fmt(value)}: not expected, seen {got[value]} time(s)")
    if lines:
        _fail(f"{what}: not exactly once", lines)
