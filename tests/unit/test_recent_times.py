"""Tests that write to a real broker use recent record times, not fixed ones years old.

A broker deletes a segment whose newest record is older than the topic's ``retention.ms``
whenever its retention check runs (every 5 minutes): inputs written with a time from 2023 can
vanish between a test's two reads of them, which is how two join tests failed one whole run in
five (a buffer restored from its input topic found the topic empty). The plugin's brokers now keep
records whatever their time (``streams_app.broker.TEST_SETTINGS``), but a broker of the user's
(``STREAMS_APP_TEST_BOOTSTRAP``) and a topic that declares its own retention do not: a test
that talks to a broker takes its times from ``tests.windows.data.BASE`` (an hour ago or two).
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
#: Epoch milliseconds from 2001 on: what a record time literal looks like.
EPOCH_MS = 1_000_000_000_000


def old_times(source: str, before_ms: int) -> list[tuple[int, int]]:
    """(line, value) of every integer literal that reads as a record time before ``before_ms``."""
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and type(node.value) is int
        and EPOCH_MS <= node.value < before_ms
    ]


def test_old_times_finds_a_literal_time_and_nothing_else() -> None:
    source = "T = 1_700_000_000_000\nN = 40\nNOW = 1_999_999_999_999\n"
    assert old_times(source, before_ms=1_800_000_000_000) == [(1, 1_700_000_000_000)]


def test_tests_that_use_a_broker_write_recent_times() -> None:
    week_ago = int(time.time() * 1000) - 7 * 86_400_000
    found = {
        str(path.relative_to(TESTS)): hits
        for path in sorted(TESTS.rglob("*.py"))
        if path != Path(__file__).resolve()
        and "bootstrap_servers" in (source := path.read_text())
        and (hits := old_times(source, week_ago))
    }
    assert found == {}, (
        "record times more than a week old in tests that write to a broker, which may delete "
        f"them mid-test (use tests.windows.data.BASE): {found}"
    )
