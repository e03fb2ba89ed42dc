"""BENCHMARKS.md's result tables, regenerated from a ``bench-results.json``.

    python -m benchmarks.report [bench-results.json] [--write BENCHMARKS.md]

Prints the tables as Markdown; with ``--write`` replaces the part of the file between the
``<!-- bench-results:begin -->`` and ``<!-- bench-results:end -->`` markers, so that the
document's figures are always those of one whole ``make bench`` run.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

BEGIN, END = "<!-- bench-results:begin -->", "<!-- bench-results:end -->"

RATIO_NAMES = {
    "eos_over_kstreams_eos": "streams_app EOS / Kafka Streams EOS v2",
    "eos_over_quix_eos": "streams_app EOS / quixstreams EOS",
    "eos_over_faust": "streams_app EOS / faust-streaming EOS",
    "eos_over_alos": "streams_app EOS / streams_app ALOS",
    "eos_over_ceiling": "streams_app EOS / bare aiokafka loop",
    "eos_2w_over_eos": "two streams_app workers / one (EOS)",
    "windowed_over_eos": "streams_app windowed count / plain count (EOS)",
}


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def render(result: dict[str, Any]) -> str:
    runs = result["runs"]
    summary = result["summary"]
    settings = result["settings"]
    versions = result.get("versions", {})
    loads = [r[k] for r in runs if "error" not in r for k in ("load_before", "load_after")]
    out = [
        f"{settings['records']:,} input records, {settings['value_bytes']}-byte values, "
        f"{settings['keys']:,} keys, {settings['partitions']} partitions, one broker; "
        f"{settings.get('repeat', '?')} interleaved rounds (the order rotates between rounds); "
        f"machine: {result['machine']['cpus']} CPUs, Python {result['machine']['python']}; "
        + ", ".join(f"{k} {v}" for k, v in versions.items())
        + (
            f". 1-minute load average during the runs: {min(loads):.1f}-{max(loads):.1f}"
            if loads
            else ""
        )
        + (
            f"; {result['wall_seconds'] / 60:.0f} minutes in all."
            if "wall_seconds" in result
            else "."
        ),
        "",
        "| system | guarantee | records/s (median) | range | CPU µs/record ¹ | runs correct |",
        "|---|---|---:|---:|---:|---:|",
    ]
    keys = list(dict.fromkeys(r["key"] for r in runs))
    medians = summary["median_records_per_s"]
    cpu = summary["median_cpu_us_per_record"]
    for key in keys:
        mine = [r for r in runs if r["key"] == key]
        ok = [r for r in mine if "error" not in r and r["correct"]]
        rates = [r["records_per_s"] for r in ok]
        label = mine[0]["system"]
        partial = any(not r.get("finished", True) for r in mine if "error" not in r)
        median = _num(medians.get(key))
        if key not in medians:  # no correct run: show what it did, marked
            done = [r["records_per_s"] for r in mine if "error" not in r]
            median = f"({_num(statistics.median(done))}, wrong)" if done else "failed"
        out.append(
            f"| {label}{' ²' if partial else ''} | {mine[0]['guarantee']} | {median} | "
            f"{f'{_num(min(rates))}-{_num(max(rates))}' if rates else '-'} | "
            f"{_num(cpu.get(key), 1)} | {len(ok)}/{len(mine)} |"
        )
    out += [
        "",
        "¹ CPU seconds of the system's processes and of the broker over the timed window, per "
        "record (the figure the machine's load moves least).",
    ]
    if any(not r.get("finished", True) for r in runs if "error" not in r):
        out.append("² Stopped at its time limit: the rate of what its group had committed by then.")
    out += ["", "| ratio | of medians | median of per-round ratios |", "|---|---:|---:|"]
    for name, value in summary["ratios"].items():
        paired = summary["paired_ratios"].get(name)
        out.append(f"| {RATIO_NAMES.get(name, name)} | {_num(value, 2)} | {_num(paired, 2)} |")
    commits = [
        r["child_commit_seconds"] / r["seconds"]
        for r in runs
        if r["key"] == "eos" and r.get("child_commit_seconds") and r.get("seconds")
    ]
    eos_version = next((r.get("child_transaction_version") for r in runs if r["key"] == "eos"), "?")
    if commits:
        out += [
            "",
            f"streams_app EOS spent {statistics.median(commits):.0%} of its timed window "
            "inside commits (median over rounds), transaction protocol version "
            f"{eos_version}.",
        ]
    latency = result.get("latency") or {}
    if "error" in latency:
        out += ["", f"The latency mode failed: {latency['error']}"]
    elif latency:
        out += [
            "",
            "| latency (produce → visible, read_committed) | rate | p50 | p90 | p99 | max | "
            "commit interval |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for key, lat in latency.items():
            out.append(
                f"| streams_app {key} | {_num(lat['rate_achieved'])}/s | {lat['p50_ms']} ms | "
                f"{lat['p90_ms']} ms | {lat['p99_ms']} ms | {lat['max_ms']} ms | "
                f"{lat['commit_interval_s'] * 1000:.0f} ms |"
            )
    wrong = summary.get("incorrect_runs") or []
    if wrong:
        out += ["", "Runs that failed the output check (left out of medians and ratios):", ""]
        out += [f"- {w}" for w in wrong]
    return "\n".join(out) + "\n"


def write(document: Path, block: str) -> None:
    text = document.read_text()
    head, sep, rest = text.partition(BEGIN)
    if not sep or END not in rest:
        raise SystemExit(f"{document} has no {BEGIN} ... {END} block")
    _, _, tail = rest.partition(END)
    document.write_text(f"{head}{BEGIN}\n{block}{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default="bench-results.json", type=Path)
    parser.add_argument("--write", type=Path, help="replace the results block of this file")
    args = parser.parse_args()
    block = render(json.loads(args.results.read_text()))
    if args.write:
        write(args.write, block)
        print(f"updated {args.write}")
    else:
        print(block, end="")


if __name__ == "__main__":
    main()
