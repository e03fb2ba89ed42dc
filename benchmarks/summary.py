"""The medians, ratios and targets of a ``make bench`` run, from its runs alone.

Both ``benchmarks.run`` (which stores the summary with the runs) and ``benchmarks.report``
(which recomputes it from the stored runs, so that BENCHMARKS.md is always made the same way
from a recorded ``bench-results.json``) call :func:`summarise`.

Every rate here is a **steady-state** rate (``benchmarks/steady.py``: the records committed
between 10 % and 90 % of the input, over the time that took) unless it says whole-run; CPU per
record is the system's own processes' (the broker apart) over the same window.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

#: (name, numerator system, denominator system): streams_app against the others, per mode.
RATIOS = (
    ("eos_over_kstreams_eos", "eos", "kstreams-eos"),
    ("alos_over_kstreams_alos", "alos", "kstreams-alos"),
    ("eos_over_alos", "eos", "alos"),
    ("eos_over_ceiling", "eos", "ceiling"),
    ("eos_over_quix_eos", "eos", "quix-eos"),
    ("eos_over_faust", "eos", "faust"),
    ("kstreams_eos_over_kstreams_alos", "kstreams-eos", "kstreams-alos"),
    ("windowed_over_eos", "windowed", "eos"),
    ("join_st_over_kstreams_join_st", "join-st", "kstreams-join-st"),
    ("join_ss_over_kstreams_join_ss", "join-ss", "kstreams-join-ss"),
    ("join_st_over_eos", "join-st", "eos"),
    ("join_ss_over_eos", "join-ss", "eos"),
)

#: The issues' targets (issue 42; the join rows: issue 37), each read in one mode: (mode,
#: figure, at least / at most, bound, what it says). ``figure`` names a ratio, or
#: ``cpu:<system>``: the system's worker CPU µs per record at steady state.
TARGETS = (
    (
        "per-core",
        "eos_over_kstreams_eos",
        ">=",
        1.5,
        "per core: streams_app EOS / Kafka Streams EOS v2",
    ),
    (
        "machine",
        "eos_over_kstreams_eos",
        ">=",
        1.2,
        "whole machine (a worker per core / a stream thread per core): streams_app EOS / "
        "Kafka Streams EOS v2",
    ),
    ("per-core", "eos_over_alos", ">=", 0.95, "per core: streams_app EOS / its at-least-once"),
    ("machine", "eos_over_alos", ">=", 0.95, "whole machine: streams_app EOS / its at-least-once"),
    (
        "per-core",
        "cpu:eos",
        "<=",
        12.0,
        "per core: streams_app EOS worker CPU per record (µs, broker excluded)",
    ),
    (
        "per-core",
        "join_st_over_kstreams_join_st",
        ">=",
        1.5,
        "per core: streams_app stream-table join / Kafka Streams' (EOS)",
    ),
    (
        "per-core",
        "join_ss_over_kstreams_join_ss",
        ">=",
        1.5,
        "per core: streams_app stream-stream join / Kafka Streams' (EOS)",
    ),
    (
        "per-core",
        "join_st_over_eos",
        ">=",
        0.7,
        "per core: streams_app stream-table join / its plain count (EOS)",
    ),
)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _good(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in runs if "error" not in r and r["correct"]]


def steady_rate(run: dict[str, Any]) -> float | None:
    return (run.get("steady") or {}).get("records_per_s")


def _per_system(
    runs: list[dict[str, Any]], figure: Callable[[dict[str, Any]], float | None]
) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in runs:
        value = figure(r)
        if value is not None:
            out.setdefault(r["key"], []).append(value)
    return out


def summarise_mode(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = _good(runs)
    steady = _per_system(good, steady_rate)
    whole = _per_system(good, lambda r: r.get("records_per_s"))
    worker_cpu = _per_system(
        good, lambda r: (r.get("steady") or {}).get("worker_cpu_us_per_record")
    )
    broker_cpu = _per_system(
        good, lambda r: (r.get("steady") or {}).get("broker_cpu_us_per_record")
    )
    cores = _per_system(good, lambda r: (r.get("steady") or {}).get("worker_cores"))
    window = _per_system(good, lambda r: (r.get("steady") or {}).get("seconds"))
    medians = {k: round(statistics.median(v)) for k, v in steady.items()}
    by_round: dict[int, dict[str, float]] = {}
    for r in good:
        rate = steady_rate(r)
        if rate:
            by_round.setdefault(r["repeat"], {})[r["key"]] = rate
    ratios: dict[str, float | None] = {}
    paired: dict[str, float | None] = {}
    keys = {r["key"] for r in runs}
    for name, top, bottom in RATIOS:
        if top not in keys or bottom not in keys:
            continue
        ratios[name] = _ratio(medians.get(top), medians.get(bottom))
        pairs = [x[top] / x[bottom] for x in by_round.values() if x.get(top) and x.get(bottom)]
        paired[name] = round(statistics.median(pairs), 3) if pairs else None
    return {
        "steady_records_per_s": medians,
        "steady_range": {k: [round(min(v)), round(max(v))] for k, v in steady.items()},
        "records_per_s": {k: round(statistics.median(v)) for k, v in whole.items()},
        "worker_cpu_us_per_record": {
            k: round(statistics.median(v), 2) for k, v in worker_cpu.items()
        },
        "broker_cpu_us_per_record": {
            k: round(statistics.median(v), 2) for k, v in broker_cpu.items()
        },
        "worker_cores": {k: round(statistics.median(v), 2) for k, v in cores.items()},
        "steady_seconds": {k: round(statistics.median(v), 1) for k, v in window.items()},
        "ratios": ratios,
        "paired_ratios": paired,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else round(a / b, 3)


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    modes: dict[str, Any] = {}
    for mode in dict.fromkeys(r.get("mode", "per-core") for r in runs):
        modes[mode] = summarise_mode([r for r in runs if r.get("mode", "per-core") == mode])
    scaling: dict[str, float | None] = {}
    if "per-core" in modes and "machine" in modes:
        one, all_ = (
            modes["per-core"]["steady_records_per_s"],
            modes["machine"]["steady_records_per_s"],
        )
        scaling = {k: _ratio(all_.get(k), one.get(k)) for k in one if k in all_}
    first: dict[str, Any] = next(iter(modes.values()), {})
    return {
        "modes": modes,
        # Whole machine / per core, steady state: what the second core adds to each system.
        "scaling": scaling,
        "targets": targets(modes),
        # The per-core (else first mode's) steady medians: the latency mode's rates are halves.
        "median_records_per_s": (modes.get("per-core") or first).get("steady_records_per_s", {}),
        "incorrect_runs": [
            f"{r['key']} ({r.get('mode', '-')}) #{r['repeat']}: "
            f"{r.get('error') or '; '.join(r['problems'])}"
            for r in runs
            if "error" in r or not r["correct"]
        ],
    }


def targets(modes: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for mode, figure, sense, bound, what in TARGETS:
        summary = modes.get(mode)
        if summary is None:
            continue
        if figure.startswith("cpu:"):
            value = summary["worker_cpu_us_per_record"].get(figure[4:])
            paired = None
        else:
            value = summary["ratios"].get(figure)
            paired = summary["paired_ratios"].get(figure)
        if figure not in summary["ratios"] and not figure.startswith("cpu:"):
            continue
        met = None if value is None else (value >= bound if sense == ">=" else value <= bound)
        out.append(
            {
                "mode": mode,
                "figure": figure,
                "what": what,
                "target": f"{'≥' if sense == '>=' else '≤'} {bound:g}",
                "value": value,
                "paired": paired,
                "met": met,
            }
        )
    return out
