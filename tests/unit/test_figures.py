"""The README's `make test` figures (tests/figures.py): rendered from a run's summary, written
between the markers only, and refused when the run is partial or did not pass."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests import figures

RUN: dict[str, Any] = {
    "started": "2026-11-28 15:02 UTC",
    "wall_seconds": 952.4,
    "commit": "a1b2c3d",
    "machine": {"cpus": 2, "python": "3.11.7"},
    "args": ["--test-summary=test-results.json"],
    "whole_suite": True,
    "partial": [],
    "exitstatus": 0,
    "outcomes": {
        "passed": 912,
        "failed": 0,
        "error": 0,
        "skipped": 0,
        "xfailed": 0,
        "xpassed": 0,
        "deselected": 0,
    },
    "real_components": {
        "any": 231,
        "single broker": 190,
        "3-node cluster": 12,
        "TLS/SASL/ACL broker": 9,
        "PostgreSQL": 25,
        "Spark": 14,
    },
    "startup_seconds": {
        "single broker": {"format": 1.04, "ready": 2.71},
        "3-node cluster": {"format": 2.6, "ready": 5.2},
        "PostgreSQL": {"start": 0.8},
        "Spark": {"start": 9.14},
    },
}


def test_a_whole_passing_run_is_rendered_with_its_own_figures() -> None:
    assert figures.refusal(RUN) is None
    table = figures.render(RUN)
    assert table.startswith("From the `make test` run of 2026-11-28 15:02 UTC at a1b2c3d, 2 CPUs")
    assert "| Tests passed (failed, skipped) | 912 (0, 0) |" in table
    assert "| 231; 190, 12, 9, 25, 14 |" in table
    assert "| 15 min 52 s |" in table
    assert "| 1.0 s + 2.7 s |" in table and "| 2.6 s + 5.2 s |" in table
    assert "| PostgreSQL initdb + start | 0.8 s |" in table
    assert "| 9.1 s |" in table
    assert "TLS/SASL/ACL broker: format" not in table  # not started by this run: no row


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"outcomes": {**RUN["outcomes"], "failed": 1}, "exitstatus": 1}, "did not pass"),
        (
            {"whole_suite": False, "partial": ["-k 'kafka'", "400 deselected"]},
            "not the whole suite: -k 'kafka'; 400 deselected",
        ),
    ],
)
def test_a_partial_or_failing_run_is_refused(
    change: dict[str, Any], why: str, tmp_path: Path
) -> None:
    run = {**copy.deepcopy(RUN), **change}
    assert why in (figures.refusal(run) or "")
    summary = tmp_path / "test-results.json"
    summary.write_text(json.dumps(run))
    readme = tmp_path / "README.md"
    readme.write_text(f"a\n{figures.BEGIN}\nold\n{figures.END}\nb\n")
    with pytest.raises(SystemExit, match=why):
        figures.main([str(summary), "--write", str(readme)])
    assert "old" in readme.read_text()
    # Forced, the table says which run it is.
    figures.main([str(summary), "--write", str(readme), "--allow-partial"])
    if not run["whole_suite"]:
        assert "partial run (-k 'kafka'; 400 deselected)" in readme.read_text()


def test_only_the_block_between_the_markers_is_replaced(tmp_path: Path) -> None:
    summary = tmp_path / "test-results.json"
    summary.write_text(json.dumps(RUN))
    readme = tmp_path / "README.md"
    stale = f"{figures.BEGIN}\nstale: 255 tests\n{figures.END}"
    readme.write_text(f"# Title\n\nbefore\n\n{stale}\nafter\n")
    figures.main([str(summary), "--write", str(readme)])
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n" + figures.BEGIN + "\nFrom the `make test` run")
    assert text.endswith(figures.END + "\nafter\n") and "255" not in text
    figures.main([str(summary), "--write", str(readme)])
    assert readme.read_text() == text  # idempotent


def test_the_long_cases_left_out_are_counted_not_hidden() -> None:
    run = {**copy.deepcopy(RUN), "long_cases_left_out": 7}
    run["outcomes"]["deselected"] = 7
    assert figures.refusal(run) is None
    assert "| Long cases left out (`make test-long` runs them) | 7 |" in figures.render(run)


class _Marker:
    def __init__(self, *args: str) -> None:
        self.args = args


class _CallSpec:
    def __init__(self, backend: str) -> None:
        self.params = {"streams_backend": backend}


class _Case:
    def __init__(self, name: str, long: bool, on: str | None = None, backend: str = "") -> None:
        self.name, self.long, self.on = name, long, on
        if backend:
            self.callspec = _CallSpec(backend)

    def get_closest_marker(self, name: str) -> _Marker | None:
        if name == "long" and self.long:
            return _Marker()
        if name == "long_on" and self.on:
            return _Marker(self.on)
        return None


def test_long_selects_the_long_cases_out_also_or_only() -> None:
    from tests.conftest import split_long

    cases = [
        _Case("a", False),
        _Case("b", True),
        _Case("c", False),
        _Case("d[memory]", False, on="kafka", backend="memory"),
        _Case("d[kafka]", False, on="kafka", backend="kafka"),
    ]
    names = lambda got: [c.name for c in got]  # noqa: E731
    kept, dropped = split_long(cases, "no")
    assert (names(kept), names(dropped)) == (["a", "c", "d[memory]"], ["b", "d[kafka]"])
    kept, dropped = split_long(cases, "only")
    assert (names(kept), names(dropped)) == (["b", "d[kafka]"], ["a", "c", "d[memory]"])
    kept, dropped = split_long(cases, "also")
    assert names(kept) == [c.name for c in cases] and dropped == []
