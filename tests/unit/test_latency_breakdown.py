"""The latency benchmark's cut of each output's time at the commit that made it visible
(``benchmarks.latency.breakdown``)."""

from __future__ import annotations

import pytest

from benchmarks.latency import breakdown

# Two commits 100 ms apart: (sealed, EndTxn sent, EndTxn answered), in seconds.
MARKS = [(1.000, 1.010, 1.014), (1.100, 1.110, 1.114)]


def test_an_output_read_before_the_worker_had_the_answer_is_cut_at_its_own_commit() -> None:
    # Produced at 1.050 (after the first seal), read at 1.112: after the second EndTxn was
    # sent, before the worker saw it answered (the reader can be quicker than the worker).
    cut = breakdown([(1.050, 0.062)], MARKS)

    row = cut["all"]
    assert row["n"] == 1
    assert row["to_seal"]["p50"] == pytest.approx(50.0)  # 1.050 -> the second seal at 1.100
    assert row["seal_to_end"]["p50"] == pytest.approx(10.0)
    assert row["end_to_read"]["p50"] == pytest.approx(2.0)  # not ~100 ms after the first
    assert cut["read_before_answer"] == 1.0


def test_outputs_read_after_the_answer_count_as_read_after_it() -> None:
    cut = breakdown([(0.950, 0.070), (1.050, 0.080)], MARKS)

    assert cut["all"]["n"] == 2
    assert cut["all"]["end_to_read"]["p99"] == pytest.approx(20.0)  # 1.130 - 1.110
    assert cut["read_before_answer"] == 0.0


def test_no_commits_no_cut() -> None:
    assert breakdown([(1.0, 0.1)], []) == {}
    # Read before any EndTxn was sent: no commit to cut it at.
    assert breakdown([(0.900, 0.050)], MARKS) == {}


def test_marks_of_an_older_checkout_cut_at_the_answer() -> None:
    # (sealed, EndTxn answered) only, from a --compare checkout before EndTxn-sent marks.
    cut = breakdown([(1.050, 0.070)], [(m[0], m[2]) for m in MARKS])

    assert cut["all"]["end_to_read"]["p50"] == pytest.approx(6.0)  # 1.120 - 1.114
    assert cut["read_before_answer"] == 0.0
