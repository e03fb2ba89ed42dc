"""Each machine mode's own input in ``make bench`` (issue 42: at least 30 s of processing per
run in both modes): the counts (``--records``, ``--machine-records``), how the one input topic
is written so that each mode reads its own count (``benchmarks.run.input_plan``), and what the
report says about them (its flag for runs too short: ``test_bench_steady``)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.report import render
from benchmarks.run import input_plan, input_records, parse_args
from tests.unit.test_bench_steady import RUNS

M = 1_000_000


def test_the_whole_machine_reads_the_whole_topic_a_pinned_system_its_tail() -> None:
    # The largest input first; each mode's input starts with its segment and runs to the end.
    assert input_plan({"per-core": 4 * M, "machine": 8 * M}) == [
        (4 * M, ("machine",)),
        (4 * M, ("per-core",)),
    ]
    assert input_plan({"per-core": 5 * M, "machine": 3 * M}) == [
        (2 * M, ("per-core",)),
        (3 * M, ("machine",)),
    ]
    assert input_plan({"per-core": 3 * M, "machine": 3 * M}) == [(3 * M, ("per-core", "machine"))]
    assert input_plan({"machine": 8 * M}) == [(8 * M, ("machine",))]
    # Whatever the counts, what is written is the largest, and each mode's part is its count.
    for counts in ({"per-core": 7, "machine": 19}, {"per-core": 19, "machine": 7}):
        plan = input_plan(counts)
        assert sum(n for n, _ in plan) == max(counts.values())
        for mode, wanted in counts.items():
            first = next(i for i, (_, modes) in enumerate(plan) if mode in modes)
            assert sum(n for n, _ in plan[first:]) == wanted


def test_the_whole_machine_reads_twice_the_per_core_input_unless_told() -> None:
    args = parse_args([])
    assert (args.records, args.machine_records) == (4 * M, 8 * M)
    assert input_records(args) == {"per-core": 4 * M, "machine": 8 * M}
    args = parse_args(["--records", "1000000", "--modes", "machine"])
    assert input_records(args) == {"machine": 2 * M}
    args = parse_args(["--records", "1000000", "--machine-records", "3000000"])
    assert input_records(args) == {"per-core": M, "machine": 3 * M}
    quick = parse_args(["--quick"])  # development runs stay short
    assert (quick.records, quick.machine_records, quick.repeat) == (200_000, 400_000, 1)
    with pytest.raises(SystemExit):
        parse_args(["--machine-records", "0"])


def settings(**extra: Any) -> dict[str, Any]:
    return {"value_bytes": 100, "keys": 10_000, "partitions": 8, "repeat": 2, **extra}


def test_the_report_says_how_many_records_each_mode_read() -> None:
    machine_runs = [{**r, "records": 8 * M} for r in RUNS if r["mode"] == "machine"]
    result = {
        "runs": [r for r in RUNS if r["mode"] == "per-core"] + machine_runs,
        "settings": settings(
            records=3 * M,
            machine_records=8 * M,
            # In the order of --modes machine,per-core: the report puts per core first.
            input_records={"machine": 8 * M, "per-core": 3 * M},
            modes={"per-core": {"parallelism": 1}, "machine": {"parallelism": 2}},
        ),
        "machine": {"cpus": 2, "python": "3.11.7"},
    }
    text = render(result)
    assert text.startswith(
        "3,000,000 input records per run per core, 8,000,000 per run on the whole machine "
        "(100-byte JSON"
    )
    assert "(1 per system, 3,000,000 input records per run)**" in text
    assert "(2 per system, 8,000,000 input records per run)**" in text
    # A result from before the modes had their own input: one count for both.
    one = {**result, "settings": settings(records=3 * M)}
    assert render(one).startswith("3,000,000 input records per run (100-byte JSON")
