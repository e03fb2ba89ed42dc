"""Suite-wide configuration. The broker fixtures come from streams_app's own pytest plugin
(streams_app.testing.plugin, registered as an entry point), exactly as app teams get them.

``--test-summary=PATH`` (``make test`` passes ``test-results.json``) writes the run's figures,
from which ``make readme-figures`` regenerates the README's (tests/figures.py).

``--long=no|also|only``: the cases marked ``long`` (a further real-broker case of a capability
that ``make test`` already covers on a real broker, or a run too long for it) are left out of a
plain run (``make test``), run as well (``also``), or alone (``only``: ``make test-long``). They
are deselected, not skipped: a left-out case is never reported as a pass or a skip.

``--lanes`` with ``-n 2`` (``make test``; pytest-xdist): two lanes (tests/lanes.py). One worker
runs most cases in collection order, as a plain ``pytest`` run does; the other runs, beside it,
the few cases that spend minutes waiting on purpose and the suites with a server of their own
(the 3-node cluster's, Spark's, PostgreSQL's). A plain ``pytest`` (no ``-n``) runs everything in
one process."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tests import figures

# aiokafka logs every failed connection attempt during fault tests at ERROR; keep the report quiet.
logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--test-summary",
        metavar="PATH",
        default=None,
        help="write the run's figures (outcomes, tests on real components, wall time, start-up "
        "times) to PATH as JSON; `python -m tests.figures PATH` renders the README's table",
    )
    parser.addoption(
        "--long",
        choices=("no", "also", "only"),
        default="no",
        help="the cases marked `long` (make test-long): left out (no, the default: make test), "
        "run as well (also), or alone (only)",
    )
    parser.addoption(
        "--lanes",
        action="store_true",
        help="with -n 2 (make test): the cases that mostly wait, and the suites with a server "
        "of their own, run beside the rest (tests/lanes.py)",
    )


def split_long(items: list[Any], choice: str) -> tuple[list[Any], list[Any]]:
    """(kept, left out) of ``items`` for ``--long=choice``."""
    if choice == "also":
        return list(items), []
    keep: list[Any] = []
    drop: list[Any] = []
    for item in items:
        (drop if is_long(item) == (choice == "no") else keep).append(item)
    return keep, drop


def is_long(item: Any) -> bool:
    """Marked ``long``, or ``long_on(backend, ...)`` and run on one of those harness backends
    (``pytest.param(..., marks=pytest.mark.long_on("kafka"))``: the [memory] run stays)."""
    if item.get_closest_marker("long") is not None:
        return True
    marker = item.get_closest_marker("long_on")
    callspec = getattr(item, "callspec", None)
    return (
        marker is not None
        and callspec is not None
        and callspec.params.get("streams_backend") in marker.args
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    choice = config.getoption("--long")
    keep, drop = split_long(items, choice)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if choice == "no":
        figures.long_cases_left_out(config, len(drop))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "long: a further real-broker case of a capability make test already covers, or a run "
        "too long for it: run by make test-long (--long=only), left out of make test",
    )
    config.addinivalue_line(
        "markers", "long_on(*backends): long only when run on these harness backends ('kafka')"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    figures.session_started(session.config)


def pytest_runtest_setup(item: pytest.Item) -> None:
    figures.item_started(item)


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        figures.deselected(items[0].config, len(items))


def pytest_sessionfinish(session: pytest.Session) -> None:
    figures.worker_finished(session.config)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hooks
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if not config.getoption("--lanes"):
        return None
    from tests.lanes import LaneScheduling

    return LaneScheduling(config, log)


@pytest.hookimpl(optionalhook=True)  # a worker's figures reach the run's summary
def pytest_testnodedown(node: Any, error: Any) -> None:
    figures.worker_figures(node.config, getattr(node, "workeroutput", {}))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    path = config.getoption("--test-summary")
    if path:
        figures.write_summary(Path(path), terminalreporter, exitstatus, config)
