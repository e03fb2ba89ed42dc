"""Exactly-once checks for the keyed_sum topology, on what read_committed readers see."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from streams_app.readback import ReadRecord, read_topics
from streams_app.testing.workers import WorkerProcess


@dataclass
class Outcome:
    inputs: int = 0
    duplicates: int = 0
    missing: int = 0
    wrong: int = 0
    extra: int = 0
    problems: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(message)


def _by_partition(records: Sequence[ReadRecord]) -> dict[int, list[ReadRecord]]:
    out: dict[int, list[ReadRecord]] = defaultdict(list)
    for r in records:
        out[r.partition].append(r)
    return out


def _lineage(r: ReadRecord) -> tuple[int, int]:
    lineage = r.lineage
    assert lineage is not None, "output without lineage headers"
    return lineage[1], lineage[2]


async def check_keyed_sum(
    bootstrap: str,
    suffix: str,
    *,
    exactly_once: bool = True,
    skip_values: frozenset[int] = frozenset(),
) -> Outcome:
    """Compare echo and running sums with the committed input, per partition and key.

    With ``exactly_once`` every input must appear once in echo and once in the sums, in order,
    each sum correct. Without it (at-least-once) duplicates are allowed but nothing may be lost.
    """
    names = [
        f"ks-in-{suffix}",
        f"ks-echo-{suffix}",
        f"ks-sum-{suffix}",
        f"ks-{suffix}-sums-changelog",
    ]
    data = await read_topics(bootstrap, names)
    inputs, echo, sums, changelog = (data[n] for n in names)
    outcome = Outcome(inputs=len(inputs))
    wanted = {(r.partition, r.offset): r for r in inputs if json.loads(r.value) not in skip_values}

    for name, out in (("echo", echo), ("sum", sums)):
        seen: dict[tuple[int, int], int] = defaultdict(int)
        for r in out:
            seen[_lineage(r)] += 1
        for pos, n in seen.items():
            if pos not in wanted:
                outcome.extra += 1
                outcome.note(f"{name}: output for {pos} which is not a (kept) input")
            elif n > 1:
                outcome.duplicates += n - 1
                if exactly_once:
                    outcome.note(f"{name}: {pos} appears {n} times")
        for pos in wanted:
            if pos not in seen:
                outcome.missing += 1
                outcome.note(f"{name}: input {pos} is missing")

    # Echo in input order per partition; sums are the running sums per key, in input order.
    expected_echo: dict[int, list[tuple[str, int]]] = defaultdict(list)
    expected_sum: dict[int, list[tuple[str, int]]] = defaultdict(list)
    running: dict[str, int] = defaultdict(int)
    for (p, _o), r in sorted(wanted.items()):
        key, value = r.key.decode(), json.loads(r.value)
        expected_echo[p].append((key, value))
        running[key] += value
        expected_sum[p].append((key, running[key]))
    if exactly_once:
        for name, out, expected in (("echo", echo, expected_echo), ("sum", sums, expected_sum)):
            for p, records in _by_partition(out).items():
                got = [(r.key.decode(), json.loads(r.value)) for r in records]
                if got != expected[p]:
                    outcome.wrong += 1
                    first = next(
                        (
                            i
                            for i, (a, b) in enumerate(zip(got, expected[p], strict=False))
                            if a != b
                        ),
                        min(len(got), len(expected[p])),
                    )
                    outcome.note(f"{name}[{p}] differs from the expected sequence at index {first}")
    # Table keys are JSON in the changelog (Faust's format), here JSON strings.
    final = {json.loads(r.key): json.loads(r.value) for r in changelog}
    if final != dict(running):
        diff = {k for k in set(final) | set(running) if final.get(k) != running.get(k)}
        if exactly_once or any(final.get(k, 0) < running[k] for k in diff if k in running):
            outcome.wrong += 1
            outcome.note(f"final table differs on {len(diff)} keys, e.g. {sorted(diff)[:3]}")
    return outcome


async def assert_predecessor_fenced(
    replacement: WorkerProcess, found: str, bootstrap: str, suffix: str, records: int
) -> None:
    """How a replacement's run must end when its predecessor died holding a transaction: its
    log says how it ``found`` the dead worker's id and that it fenced it, and every one of
    ``records`` inputs counted exactly once (test_unknown_predecessor, test_hanging_predecessor).
    """
    log = replacement.log_since_start()
    assert found in log, replacement.tail()
    assert "fenced 1 departed worker(s)' transactional id(s)" in log, replacement.tail()
    outcome = await check_keyed_sum(bootstrap, suffix, exactly_once=True)
    assert outcome.inputs == records
    assert (outcome.duplicates, outcome.missing, outcome.wrong, outcome.extra) == (0, 0, 0, 0), (
        outcome.problems
    )
