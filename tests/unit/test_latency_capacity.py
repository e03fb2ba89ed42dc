"""The latency benchmark's search for the live rate a worker sustains
(``benchmarks.latency.live_capacity`` and ``sustained``)."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks.latency import SUSTAINED_P99_MS, live_capacity, sustained
from benchmarks.report import _live_capacity


def _round(by_second: list[int], **changes: Any) -> dict[str, Any]:
    result = {
        "rate_target": 50_000,
        "rate_achieved": 50_000,
        "missing": 0,
        "warmup_s": 2.0,
        "p99_ms_by_second": by_second,
    }
    result.update(changes)
    return result


B = SUSTAINED_P99_MS + 1  # a second the worker was behind
OK = 200


def test_a_round_keeps_up_unless_it_is_behind_for_three_seconds_in_a_row() -> None:
    # The warm-up's seconds (2 here) and the part-second after the load (the last) do not count.
    assert sustained(_round([3000, 2500, OK, OK, SUSTAINED_P99_MS, OK, 5000]))
    # One or two bad seconds it recovers from are a transient.
    assert sustained(_round([OK, OK, OK, B, B, OK, B, OK, OK]))
    assert not sustained(_round([OK, OK, OK, B, B, B, OK, OK, OK]))


def test_a_round_still_behind_when_the_load_stopped_did_not_keep_up() -> None:
    assert not sustained(_round([OK, OK, OK, OK, OK, B, OK]))


def test_a_round_whose_generator_or_outputs_fell_short_did_not_keep_up() -> None:
    assert not sustained(_round([OK, OK, OK, OK], rate_achieved=45_000))
    assert not sustained(_round([OK, OK, OK, OK], missing=3))
    assert not sustained(_round([OK, OK, OK]))  # no full steady second at all


def _search(limit: int, drain: float = 100_000) -> tuple[int | None, list[tuple[int, bool]]]:
    async def probe(rate: int) -> bool:
        return rate <= limit

    return asyncio.run(live_capacity(probe, drain))


def test_the_search_steps_up_from_055_of_the_drain_rate_until_a_round_falls_behind() -> None:
    best, steps = _search(limit=70_000)

    assert best == 65_000
    assert steps == [(55_000, True), (65_000, True), (75_000, False)]


def test_the_search_steps_down_when_the_first_rate_falls_behind() -> None:
    best, steps = _search(limit=30_000)

    assert best == 25_000
    assert steps == [(55_000, False), (45_000, False), (35_000, False), (25_000, True)]


def test_the_search_stops_at_the_drain_rate_and_at_015_of_it() -> None:
    best, steps = _search(limit=10**9)
    assert best == 95_000
    assert [rate for rate, _ in steps] == [55_000, 65_000, 75_000, 85_000, 95_000]

    best, steps = _search(limit=0)
    assert best is None
    assert [rate for rate, _ in steps] == [55_000, 45_000, 35_000, 25_000, 15_000]


def test_the_report_names_the_rate_found_and_every_step() -> None:
    text = "\n".join(
        _live_capacity(
            {
                "records_per_s": 65_000,
                "drain_records_per_s": 100_000,
                "steps": [
                    {"rate": 55_000, "sustained": True},
                    {"rate": 65_000, "sustained": True},
                    {"rate": 75_000, "sustained": False},
                ],
                "sustained_p99_ms": 1000,
                "prolonged_seconds": 3,
                "seconds": 20.0,
            }
        )
    )

    assert "**65,000 records/s**, 0.65 of its drain rate (100,000/s)" in text
    assert "75,000/s fell behind" in text
    assert "over 1,000 ms) for 3 seconds in a row" in text
    assert _live_capacity(None) == []
