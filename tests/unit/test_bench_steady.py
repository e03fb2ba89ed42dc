"""The benchmark's steady-state figures (``benchmarks.steady``), its summary and targets
(``benchmarks.summary``) and the report made from them (``benchmarks.report``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks.report import render, write
from benchmarks.steady import Progress, cpu_seconds, descendants, tree_cpu_seconds
from benchmarks.summary import summarise


def progress_of(commits: list[tuple[float, int, float]], records: int) -> Progress:
    """Samples every 0.1 s of a run whose commits land at the given (time, total, cpu)."""
    progress = Progress(records)
    t, step, committed, cpu = 0.0, 0, 0, 0.0
    while t <= commits[-1][0] + 0.25:
        while step < len(commits) and commits[step][0] <= t:
            _, committed, cpu = commits[step]
            step += 1
        progress.add(t, committed, cpu, cpu / 2)
        t = round(t + 0.1, 3)
    return progress


def test_the_steady_window_runs_from_10_to_90_percent_between_commits() -> None:
    # A slow start (2 s for the first 1,000), then 1,000 records a second committed every
    # second: the 10% crossing (1,000) is the first commit, the 90% one (9,000) the ninth.
    commits = [(2.0, 1_000, 1.0)] + [
        (2.0 + i, 1_000 + 1_000 * i, 1.0 + 0.01 * i) for i in range(1, 10)
    ]
    steady = progress_of(commits, 10_000).steady()
    assert steady is not None
    assert steady["seconds"] == 8.0
    assert steady["records"] == 8_000
    assert steady["records_per_s"] == 1_000  # the slow start left out
    assert steady["worker_cpu_s"] == 0.08
    assert steady["worker_cpu_us_per_record"] == 10.0
    assert steady["broker_cpu_us_per_record"] == 5.0
    assert steady["worker_cores"] == 0.01


def test_a_crossing_falls_between_the_commits_around_it_not_on_the_poll_after() -> None:
    # Commits of 500 records every 0.5 s: 2,500 of 5,000 are crossed half-way between the
    # commits at 1,000/2.0 s and 3,000/... linearly, whatever the polls in between saw.
    commits = [(0.5 * i, 500 * i, 0.0) for i in range(1, 11)]
    progress = progress_of(commits, 5_000)
    crossed = progress.crossing(2_250)
    assert crossed is not None
    assert abs(crossed[0] - 2.25) < 1e-9
    assert progress.crossing(6_000) is None
    assert Progress(100).steady() is None  # nothing committed: no window


def test_cpu_of_a_process_tree_counts_the_children() -> None:
    """A supervisor's CPU is its own and its workers': here a child that starts a grandchild
    burning 0.3 s of CPU, then both sleep."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            f"subprocess.Popen([sys.executable, '-c', {burn + 'time.sleep(30)'!r}])\n"
            "time.sleep(30)\n",
        ]
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            total = tree_cpu_seconds([parent.pid])
            if total is not None and total >= 0.3:
                break
            assert time.monotonic() < deadline, "the grandchild's CPU never showed in the tree's"
            time.sleep(0.05)
        own = cpu_seconds(parent.pid)
        assert own is not None and own < 0.3  # the rest is the grandchild's
        assert tree_cpu_seconds([2**22 + 12345]) is None  # no such process
    finally:
        for pid in descendants(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()


def run(key: str, mode: str, repeat: int, rate: int, cpu: float, **extra: Any) -> dict[str, Any]:
    system, guarantee = {
        "eos": ("streams_app", "exactly_once_v2"),
        "alos": ("streams_app", "at_least_once"),
        "kstreams-eos": ("kafka_streams", "exactly_once_v2"),
    }[key]
    return {
        "system": system,
        "guarantee": guarantee,
        "key": key,
        "mode": mode,
        "parallelism": 1 if mode == "per-core" else 2,
        "repeat": repeat,
        "records": 3_000_000,
        "finished": True,
        "seconds": 3_000_000 / rate * 1.1,
        "records_per_s": round(rate / 1.1),
        "steady": {
            "seconds": 2_400_000 / rate,
            "records_per_s": rate,
            "worker_cpu_us_per_record": cpu,
            "broker_cpu_us_per_record": 8.0,
            "worker_cores": 0.9,
        },
        "correct": True,
        "problems": [],
        "load_before": 0.5,
        "load_after": 0.7,
        **extra,
    }


RUNS = [
    run("eos", "per-core", 1, 60_000, 14.0),
    run("alos", "per-core", 1, 62_000, 12.0),
    run("kstreams-eos", "per-core", 1, 50_000, 30.0),
    run("eos", "per-core", 2, 64_000, 13.0),
    run("alos", "per-core", 2, 66_000, 12.5),
    run("kstreams-eos", "per-core", 2, 40_000, 31.0),
    run("eos", "machine", 1, 100_000, 15.0),
    run("alos", "machine", 1, 101_000, 13.0),
    run("kstreams-eos", "machine", 1, 90_000, 28.0),
    # A wrong run counts for nothing.
    {**run("eos", "machine", 2, 900_000, 1.0), "correct": False, "problems": ["3 gaps"]},
]


def test_ratios_and_targets_come_from_steady_rates_per_mode() -> None:
    summary = summarise(RUNS)
    per_core, machine = summary["modes"]["per-core"], summary["modes"]["machine"]
    assert per_core["steady_records_per_s"] == {
        "eos": 62_000,
        "alos": 64_000,
        "kstreams-eos": 45_000,
    }
    assert per_core["ratios"]["eos_over_kstreams_eos"] == round(62_000 / 45_000, 3)
    assert per_core["paired_ratios"]["eos_over_kstreams_eos"] == round(
        (60_000 / 50_000 + 64_000 / 40_000) / 2, 3
    )
    assert machine["steady_records_per_s"]["eos"] == 100_000  # the wrong run left out
    assert summary["scaling"]["eos"] == round(100_000 / 62_000, 3)
    met = {(t["mode"], t["figure"]): t["met"] for t in summary["targets"]}
    assert met == {
        ("per-core", "eos_over_kstreams_eos"): False,  # 1.378 < 1.5
        ("machine", "eos_over_kstreams_eos"): False,  # 1.111 < 1.2
        ("per-core", "eos_over_alos"): True,
        ("machine", "eos_over_alos"): True,
        ("per-core", "cpu:eos"): False,  # 13.5 us > 12
    }
    assert summary["incorrect_runs"] == ["eos (machine) #2: 3 gaps"]


def test_the_report_is_made_from_the_recorded_runs(tmp_path: Path) -> None:
    result = {
        "runs": RUNS,
        # A stale stored summary is not what the report shows: it recomputes from the runs.
        "summary": {"modes": {}},
        "settings": {
            "records": 3_000_000,
            "value_bytes": 100,
            "keys": 10_000,
            "partitions": 8,
            "repeat": 2,
            "modes": {"per-core": {"parallelism": 1}, "machine": {"parallelism": 2}},
            "command": "python -m benchmarks.run --repeat 2",
        },
        "machine": {"cpus": 2, "python": "3.11.7"},
        "load_average": {"start": [0.1, 0.2, 0.3], "end": [1.0, 1.1, 1.2]},
    }
    text = render(result)
    assert (
        "| per core: streams_app EOS / Kafka Streams EOS v2 | ≥ 1.5 | 1.38 | 1.40 | **no** |"
        in text
    )
    assert "| streams_app | exactly_once_v2 | 62,000 | 60,000-64,000 |" in text
    assert "- eos (machine) #2: 3 gaps" in text
    assert "0.1/0.2/0.3 before, 1.0/1.1/1.2 after" in text
    assert "Not steady enough" not in text  # every correct run processed for 33 s or more
    saved = tmp_path / "bench-results.json"
    saved.write_text(json.dumps(result))
    document = tmp_path / "BENCHMARKS.md"
    document.write_text(
        "head\n<!-- bench-results:begin -->\nold\n<!-- bench-results:end -->\ntail\n"
    )
    write(document, render(json.loads(saved.read_text())))
    assert document.read_text() == (
        f"head\n<!-- bench-results:begin -->\n{text}<!-- bench-results:end -->\ntail\n"
    )


@pytest.mark.parametrize(
    ("short", "inputs", "flagged", "rerun"),
    [
        # One input for both modes (before each mode had its own): 3,000,000 in 18.3 s.
        (
            [run("eos", "machine", 3, 180_000, 9.0)],
            {"records": 3_000_000},
            "1 run(s) processed for less than 30 s (shortest 18.3 s: eos (machine))",
            "--machine-records 5000000",
        ),
        # Each mode's own option: 4,000,000 in 25 s per core (4,800,000 for 30 s), 8,000,000
        # in 20 s on the whole machine (12,000,000).
        (
            [
                run("kstreams-eos", "per-core", 3, 160_000, 12.0, records=4_000_000, seconds=25.0),
                run("eos", "machine", 3, 400_000, 9.0, records=8_000_000, seconds=20.0),
            ],
            {"input_records": {"per-core": 4_000_000, "machine": 8_000_000}},
            "2 run(s) processed for less than 30 s (shortest 20.0 s: eos (machine), "
            "kstreams-eos (per-core))",
            "--records 5000000 --machine-records 13000000",
        ),
    ],
)
def test_the_report_says_when_runs_were_too_short_to_be_steady(
    short: list[dict[str, Any]], inputs: dict[str, Any], flagged: str, rerun: str
) -> None:
    """A run that processed for less than 30 s: its ratio is flagged, with the option and
    count to rerun its mode with (the whole machine at 3,000,000 records gave 1.41x Kafka
    Streams, at 6,000,000 1.06x)."""
    result = {
        "runs": [*RUNS, *short],
        "settings": {"value_bytes": 100, "keys": 10_000, "partitions": 8, **inputs},
        "machine": {"cpus": 2, "python": "3.11.7"},
    }
    text = render(result)
    assert f"**Not steady enough:** {flagged}" in text
    assert f"Rerun with `{rerun}` or more." in text
