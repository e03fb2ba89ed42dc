"""The README's ``make test`` figures, from a run rather than typed by hand.

``make test`` runs pytest with ``--test-summary=test-results.json``: at the end of the run the
suite's conftest (:func:`write_summary`) writes there how many tests ran and how they ended,
how many of those that passed used a real component (the single broker, the 3-node cluster,
the TLS/SASL/ACL broker, PostgreSQL, Spark), the wall time, and how long each component took
to start. Then

    python -m tests.figures [test-results.json] [--write README.md] [--allow-partial]

(``make readme-figures``) prints the README's table of them, and with ``--write`` replaces the
part of the file between ``<!-- test-results:begin -->`` and ``<!-- test-results:end -->``, as
``benchmarks.report`` does for BENCHMARKS.md. A run that is not the whole suite (test
arguments, ``-k``, ``-m``, deselected tests, one harness backend only) or that did not pass is
refused unless ``--allow-partial`` (to try the mechanism on a subset: the table then says
which run it is).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

BEGIN, END = "<!-- test-results:begin -->", "<!-- test-results:end -->"

#: A real component a test uses, by the fixtures that provide it (anywhere in the test's
#: fixture closure) or the marker that says it needs it.
COMPONENTS: dict[str, tuple[frozenset[str], str | None]] = {
    "single broker": (frozenset({"kafka_broker"}), "kafka"),
    "3-node cluster": (frozenset({"_kafka_cluster_session", "kafka_cluster"}), "cluster"),
    "TLS/SASL/ACL broker": (frozenset({"secure_kafka"}), None),
    "PostgreSQL": (frozenset({"postgres_server"}), "postgres"),
    "Spark": (frozenset({"spark"}), "spark"),
}

_STARTED = pytest.StashKey[tuple[float, float]]()
_STARTUP = pytest.StashKey[dict[str, dict[str, float]]]()
_LONG_LEFT_OUT = pytest.StashKey[int]()
_DESELECTED = pytest.StashKey[int]()
#: The key of a pytest-xdist worker's figures in its ``workeroutput``.
WORKER_KEY = "streams_app_figures"


# -- during the run (called from tests/conftest.py) ------------------------------------------


def session_started(config: pytest.Config) -> None:
    config.stash[_STARTED] = (time.time(), time.monotonic())
    config.stash[_STARTUP] = {}


def item_started(item: pytest.Item) -> None:
    """Note which real components ``item`` uses (it is about to run)."""
    fixtures = set(getattr(item, "fixturenames", ()))
    uses = [
        name
        for name, (names, marker) in COMPONENTS.items()
        if fixtures & names or (marker is not None and item.get_closest_marker(marker))
    ]
    # Travels with the test's reports: under pytest-xdist the run's summary is written by the
    # controller, which never sees a worker's stash.
    item.user_properties.append(("real_components", uses))


def long_cases_left_out(config: pytest.Config, count: int) -> None:
    """``make test`` leaves out the ``long`` cases (``make test-long`` runs them): deselected,
    but the run is still the whole of ``make test``."""
    config.stash[_LONG_LEFT_OUT] = count


def deselected(config: pytest.Config, count: int) -> None:
    """Cases deselected in this process (by ``--long``, ``-k``, ``-m``): counted here because
    under pytest-xdist the controller's report does not count what its workers deselected."""
    config.stash[_DESELECTED] = config.stash.get(_DESELECTED, 0) + count


def worker_finished(config: pytest.Config) -> None:
    """In a pytest-xdist worker: hand this process's figures to the controller."""
    output = getattr(config, "workeroutput", None)
    if output is None:
        return
    from streams_app.testing.plugin import startup_timings

    output[WORKER_KEY] = json.dumps(
        {
            "startup_seconds": {**startup_timings(config), **config.stash.get(_STARTUP, {})},
            "long_cases_left_out": config.stash.get(_LONG_LEFT_OUT, 0),
            "deselected": config.stash.get(_DESELECTED, 0),
        }
    )


def worker_figures(config: pytest.Config, output: dict[str, Any]) -> None:
    """In the controller: merge a worker's figures. Every worker collects the whole suite and
    deselects the same cases, so the counts are the largest any worker saw, not their sum."""
    if WORKER_KEY not in output:
        return
    figures = json.loads(output[WORKER_KEY])
    config.stash.setdefault(_STARTUP, {}).update(figures["startup_seconds"])
    for key, name in ((_LONG_LEFT_OUT, "long_cases_left_out"), (_DESELECTED, "deselected")):
        config.stash[key] = max(config.stash.get(key, 0), figures[name])


def record_startup(config: pytest.Config, component: str, **seconds: float) -> None:
    """A start-up time measured by a fixture outside streams_app's plugin (Spark's)."""
    config.stash.setdefault(_STARTUP, {})[component] = seconds


def _why_partial(config: pytest.Config, outcomes: dict[str, int]) -> list[str]:
    why = []
    if config.args_source != pytest.Config.ArgsSource.TESTPATHS:
        why.append("tests named: " + " ".join(config.args))
    if config.option.keyword:
        why.append(f"-k {config.option.keyword!r}")
    if config.option.markexpr:
        why.append(f"-m {config.option.markexpr!r}")
    long_left_out = config.stash.get(_LONG_LEFT_OUT, 0)
    if outcomes["deselected"] > long_left_out:
        why.append(f"{outcomes['deselected'] - long_left_out} deselected")
    long_choice = config.getoption("--long", "no")
    if long_choice != "no":
        why.append(f"--long={long_choice} (the long cases of make test-long)")
    backend = config.getoption("--streams-backend", None) or os.environ.get(
        "STREAMS_APP_TEST_BACKEND", "both"
    )
    if backend != "both":
        why.append(f"harness backend {backend} only")
    if os.environ.get("STREAMS_APP_FAUST_CONFORMANCE") == "full":
        why.append("the full Faust conformance suite (make faust-conformance)")
    return why


def _commit() -> str | None:
    root = Path(__file__).resolve().parents[1]
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def write_summary(
    path: Path, terminalreporter: Any, exitstatus: int, config: pytest.Config
) -> None:
    """The run's figures as JSON (the module docstring says what they are)."""
    from streams_app.testing.plugin import startup_timings

    stats = terminalreporter.stats
    names = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")
    outcomes = {name: len(stats.get(name, ())) for name in names}
    outcomes["deselected"] = max(outcomes["deselected"], config.stash.get(_DESELECTED, 0))
    uses = {
        report.nodeid: dict(report.user_properties).get("real_components", [])
        for report in stats.get("passed", ())
    }
    real = {"any": sum(1 for components in uses.values() if components)}
    for component in COMPONENTS:
        real[component] = sum(1 for components in uses.values() if component in components)
    started, clock = config.stash.get(_STARTED, (time.time(), time.monotonic()))
    why = _why_partial(config, outcomes)
    summary = {
        "started": datetime.datetime.fromtimestamp(started, datetime.UTC).strftime(
            "%Y-%m-%d %H:%M UTC"
        ),
        "wall_seconds": round(time.monotonic() - clock, 1),
        "commit": _commit(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "args": list(config.invocation_params.args),
        "whole_suite": not why,
        "partial": why,
        "exitstatus": int(exitstatus),
        "outcomes": outcomes,
        "long_cases_left_out": config.stash.get(_LONG_LEFT_OUT, 0),
        "real_components": real,
        "startup_seconds": {**startup_timings(config), **config.stash.get(_STARTUP, {})},
    }
    path.write_text(json.dumps(summary, indent=2) + "\n")
    terminalreporter.write_line(f"test figures written to {path} (python -m tests.figures)")


# -- the README's table ----------------------------------------------------------------------


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def refusal(summary: dict[str, Any]) -> str | None:
    """Why this run's figures are not the README's (None: they are)."""
    failing = {k: summary["outcomes"][k] for k in ("failed", "error", "xpassed")}
    if summary["exitstatus"] != 0 or any(failing.values()):
        return f"the run did not pass (exit status {summary['exitstatus']}, {failing})"
    if not summary["whole_suite"]:
        return "not the whole suite: " + "; ".join(summary["partial"])
    return None


def render(summary: dict[str, Any]) -> str:
    outcomes, real = summary["outcomes"], summary["real_components"]
    machine = summary["machine"]
    run = "run" if summary["whole_suite"] else "partial run (" + "; ".join(summary["partial"]) + ")"
    lines = [
        f"From the `make test` {run} of {summary['started']} at "
        f"{summary['commit'] or 'an unknown commit'}, {machine['cpus']} CPUs, Python "
        f"{machine['python']}; generated by `make readme-figures` (nothing here is typed by "
        "hand):",
        "",
        "| `make test` | |",
        "|---|---|",
        f"| Tests passed (failed, skipped) | {outcomes['passed']:,} "
        f"({outcomes['failed'] + outcomes['error']}, {outcomes['skipped']}) |",
        "| of them using a real component (any; " + ", ".join(COMPONENTS) + ") | "
        f"{real['any']:,}; " + ", ".join(f"{real[c]:,}" for c in COMPONENTS) + " |",
        "| Long cases left out (`make test-long` runs them) | "
        f"{summary.get('long_cases_left_out', 0):,} |",
        f"| Wall time (pytest's; set-up before it excluded) | "
        f"{_duration(summary['wall_seconds'])} |",
    ]
    startup = summary["startup_seconds"]
    for component in ("single broker", "3-node cluster", "TLS/SASL/ACL broker"):
        if component in startup:
            times = startup[component]
            lines.append(
                f"| {component[0].upper()}{component[1:]}: format, then start-to-ready (JVM start "
                f"until it answers metadata requests) | {times['format']:.1f} s + "
                f"{times['ready']:.1f} s |"
            )
    if "PostgreSQL" in startup:
        lines.append(f"| PostgreSQL initdb + start | {startup['PostgreSQL']['start']:.1f} s |")
    if "Spark" in startup:
        lines.append(
            "| SparkSession start (Spark's Kafka connector jars resolved when not cached yet) | "
            f"{startup['Spark']['start']:.1f} s |"
        )
    return "\n".join(lines)


def write(document: Path, block: str) -> None:
    text = document.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{document}: no {BEGIN} ... {END} block to replace")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    document.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.figures", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("summary", nargs="?", default="test-results.json", type=Path)
    parser.add_argument("--write", type=Path, metavar="DOCUMENT", help="e.g. README.md")
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="take a run that is not the whole suite, or did not pass (the table says so)",
    )
    args = parser.parse_args(argv)
    summary = json.loads(args.summary.read_text())
    why = refusal(summary)
    if why is not None and not args.allow_partial:
        sys.exit(f"{args.summary}: {why}; not the README's figures (--allow-partial to force)")
    block = render(summary)
    if args.write is None:
        print(block)
    else:
        write(args.write, block)
        print(f"{args.write}: test figures from {args.summary} ({summary['started']})")


if __name__ == "__main__":
    main()
