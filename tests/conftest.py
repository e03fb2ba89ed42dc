"""Suite-wide configuration. The broker fixtures come from streams_app's own pytest plugin
(streams_app.testing.plugin, registered as an entry point), exactly as app teams get them.

``--test-summary=PATH`` (``make test`` passes ``test-results.json``) writes the run's figures,
from which ``make readme-figures`` regenerates the README's (tests/figures.py)."""

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


def pytest_sessionstart(session: pytest.Session) -> None:
    figures.session_started(session.config)


def pytest_runtest_setup(item: pytest.Item) -> None:
    figures.item_started(item)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    path = config.getoption("--test-summary")
    if path:
        figures.write_summary(Path(path), terminalreporter, exitstatus, config)
