"""The join rows of ``make bench`` (issue 37): their output check (``benchmarks.check.Joined``),
their ratios and targets (``benchmarks.summary``) and their rows in the report."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

from benchmarks.check import InputSummary, Joined
from benchmarks.join_bench import joiner, tier_of
from benchmarks.report import render
from benchmarks.summary import summarise
from tests.unit.test_bench_steady import run

INPUT = [("key-000001", 0), ("key-000002", 1), ("key-000001", 2), ("key-000009", 3)]
EXPECTED = InputSummary(
    records=len(INPUT),
    key_counts=Counter(k.encode() for k, _ in INPUT),
    partition_digests={},
    partition_counts={0: len(INPUT)},
)


def record(key: str, value: str, offset: int) -> Any:
    return SimpleNamespace(key=key.encode(), value=value.encode(), offset=offset)


def joined(rows: list[tuple[str, str]]) -> list[str]:
    checker = Joined()
    checker.visit(0, [record(k, v, i) for i, (k, v) in enumerate(rows)])
    return checker.problems(EXPECTED, True, {0: len(rows)})


def test_each_input_joined_once_with_its_keys_row_passes() -> None:
    rows = [(k, joiner({"seq": seq}, {"tier": tier_of(k)})) for k, seq in INPUT]
    assert rows[0][1] == "0:t1"
    assert joined(rows) == []


def test_a_duplicate_a_wrong_partner_and_a_lost_record_are_each_found() -> None:
    good = [(k, f"{seq}:{tier_of(k)}") for k, seq in INPUT]
    assert joined([*good, good[0]])[0] == "1 input records joined more than once"
    wrong = [*good[:3], ("key-000009", "3:t0")]  # key 9's tier is t2
    assert joined(wrong)[0] == "1 records joined with another key's row"
    lost = joined(good[:3])
    assert lost[0] == "1 keys with input records not joined, e.g. b'key-000009': 0 of 1"


def join_run(key: str, repeat: int, rate: int) -> dict[str, Any]:
    system = {
        "join-st": "streams_app stream-table join",
        "join-ss": "streams_app stream-stream join",
        "kstreams-join-st": "kafka_streams stream-table join",
        "kstreams-join-ss": "kafka_streams stream-stream join",
    }[key]
    return {**run("eos", "per-core", repeat, rate, 20.0), "key": key, "system": system}


def test_join_rows_give_their_ratios_targets_and_report_rows() -> None:
    runs = [
        run("eos", "per-core", 1, 60_000, 14.0),
        join_run("join-st", 1, 45_000),
        join_run("kstreams-join-st", 1, 40_000),
        join_run("join-ss", 1, 30_000),
        join_run("kstreams-join-ss", 1, 15_000),
    ]
    summary = summarise(runs)
    ratios = summary["modes"]["per-core"]["ratios"]
    assert ratios["join_st_over_eos"] == 0.75
    assert ratios["join_ss_over_kstreams_join_ss"] == 2.0
    met = {t["figure"]: t["met"] for t in summary["targets"]}
    assert met["join_st_over_kstreams_join_st"] is False  # 1.125 < 1.5
    assert met["join_ss_over_kstreams_join_ss"] is True
    assert met["join_st_over_eos"] is True  # 0.75 >= 0.7
    settings = {
        "records": 200_000,
        "value_bytes": 100,
        "keys": 10_000,
        "partitions": 8,
        "repeat": 1,
        "modes": {"per-core": {"parallelism": 1}},
        "command": "python -m benchmarks.run --quick",
    }
    text = render({"runs": runs, "settings": settings, "machine": {"cpus": 2, "python": "3.11.7"}})
    assert "| streams_app stream-table join | exactly_once_v2 | 45,000 |" in text
    assert "| kafka_streams stream-stream join | exactly_once_v2 | 15,000 |" in text
    assert "| streams_app stream-table join / plain count (EOS) | 0.75 |" in text
    assert (
        "| per core: streams_app stream-table join / its plain count (EOS) | ≥ 0.7 | 0.75 |" in text
    )
