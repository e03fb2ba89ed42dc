"""BENCHMARKS.md's result tables, regenerated from a ``bench-results.json``.

    python -m benchmarks.report [bench-results.json] [--write BENCHMARKS.md]

Prints the tables as Markdown; with ``--write`` replaces the part of the file between the
``<!-- bench-results:begin -->`` and ``<!-- bench-results:end -->`` markers, so that the
document's figures are always those of one whole ``make bench`` run. The recovery figures
(``make bench BENCH_ARGS=--recovery``, kept under ``recovery`` in the same file) go between
``<!-- bench-recovery:begin -->`` and ``<!-- bench-recovery:end -->``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.summary import summarise

BEGIN, END = "<!-- bench-results:begin -->", "<!-- bench-results:end -->"

RECOVERY_ROWS = {
    "standby": "SIGKILL, failover to a worker with a standby (table_standby_replicas=1)",
    "no-standby": "SIGKILL, failover to a worker without a standby",
    "restart": "SIGKILL, the same worker restarted on its intact state dir",
    "full-restore": "SIGKILL, the same worker restarted on an empty state dir",
    "static-restart": "SIGKILL, the same worker restarted on its intact state dir as a static "
    "member (group_instance_id) ⁴",
}

RATIO_NAMES = {
    "eos_over_kstreams_eos": "streams_app EOS / Kafka Streams EOS v2",
    "alos_over_kstreams_alos": "streams_app ALOS / Kafka Streams ALOS",
    "kstreams_eos_over_kstreams_alos": "Kafka Streams EOS v2 / its ALOS",
    "eos_over_quix_eos": "streams_app EOS / quixstreams EOS",
    "eos_over_faust": "streams_app EOS / faust-streaming EOS",
    "eos_over_alos": "streams_app EOS / streams_app ALOS",
    "eos_over_ceiling": "streams_app EOS / bare aiokafka loop",
    "eos_2w_over_eos": "two streams_app workers / one (EOS)",
    "windowed_over_eos": "streams_app windowed count / plain count (EOS)",
    "join_st_over_kstreams_join_st": "streams_app stream-table join / Kafka Streams' (EOS)",
    "join_ss_over_kstreams_join_ss": "streams_app stream-stream join / Kafka Streams' (EOS)",
    "join_st_over_eos": "streams_app stream-table join / plain count (EOS)",
    "join_ss_over_eos": "streams_app stream-stream join / plain count (EOS)",
}


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def render(result: dict[str, Any]) -> str:
    """The tables of one run: both machine modes and steady-state rates (issue 42's harness),
    or, for a ``bench-results.json`` from before it, the single-mode tables of its time."""
    if any("mode" in r for r in result["runs"]):
        return render_modes(result)
    return render_legacy(result)


def render_legacy(result: dict[str, Any]) -> str:
    runs = result["runs"]
    summary = result["summary"]
    settings = result["settings"]
    out = [
        f"{settings['records']:,} input records, {settings['value_bytes']}-byte values, "
        f"{settings['keys']:,} keys, {settings['partitions']} partitions, one broker; "
        f"{settings.get('repeat', '?')} interleaved rounds (the order rotates between rounds); "
        + _machine_and_load(result),
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
    out += _latency(result.get("latency") or {})
    wrong = summary.get("incorrect_runs") or []
    if wrong:
        out += ["", "Runs that failed the output check (left out of medians and ratios):", ""]
        out += [f"- {w}" for w in wrong]
    return "\n".join(out) + "\n"


MODE_TITLES = {
    "per-core": "Per core: each system pinned to one CPU, the broker and the harness on the other",
    "machine": "Whole machine: nothing pinned, a worker process (or stream thread) per CPU",
}


def render_modes(result: dict[str, Any]) -> str:
    runs = result["runs"]
    summary = summarise(runs)  # recomputed: the same tables from the same runs, always
    settings = result["settings"]
    modes = settings.get("modes", {})
    lo, hi = settings.get("steady_window", [0.1, 0.9])
    records = input_records(settings, modes)
    out = [
        f"{_input_counts(records)} ({settings['value_bytes']}-byte JSON values, "
        f"parsed by every system), {settings['keys']:,} keys, {settings['partitions']} "
        f"partitions, one broker; {settings.get('repeat', '?')} interleaved rounds (the order of "
        f"the systems rotates between rounds, the mode that goes first alternates); "
        + _machine_and_load(result),
        "",
        f"Steady state: the records committed between {lo:.0%} and {hi:.0%} of the input, over "
        "the time that took (committed offsets sampled every "
        f"{settings.get('poll_interval_s', 0.1) * 1000:.0f} ms); every ratio is one of "
        "steady-state rates. Whole run: from the first fetched record to the last commit.",
    ]
    command = (settings.get("command") or "").strip()
    if command:
        default = " (`make bench`)" if command == "python -m benchmarks.run" else ""
        out += ["", f"Command: `{command}`{default}."]
    out += _targets_table(summary["targets"])
    out += _short_windows(runs)
    for mode, mode_summary in summary["modes"].items():
        about = modes.get(mode, {})
        title = MODE_TITLES.get(mode, mode)
        extra = [f"{about['parallelism']} per system"] if about.get("parallelism") else []
        if mode in records:
            extra.append(f"{records[mode]:,} input records per run")
        if extra:
            title += f" ({', '.join(extra)})"
        out += ["", f"**{title}**", ""]
        out += _mode_table([r for r in runs if r.get("mode") == mode], mode_summary)
        out += _ratio_table(mode_summary)
    if summary["scaling"]:
        out += [
            "",
            "| whole machine / per core (steady state) | "
            + " | ".join(_label(runs, k) for k in summary["scaling"])
            + " |",
            "|---|" + "---:|" * len(summary["scaling"]),
            "| scaling | " + " | ".join(_num(v, 2) for v in summary["scaling"].values()) + " |",
        ]
    out += [
        "",
        "¹ CPU seconds of the system's own processes (a supervisor and its workers, a JVM with "
        "all its threads; the broker apart) over the steady-state window, per record.",
        "² CPUs the system kept busy over the window, on average.",
    ]
    if any(not r.get("finished", True) for r in runs if "error" not in r):
        out.append("† Stopped at its time limit: the rate of what its group had committed by then.")
    commits = [
        r["child_commit_seconds"] / r["seconds"]
        for r in runs
        if r["key"] == "eos"
        and r.get("mode") == "per-core"
        and r.get("child_commit_seconds")
        and r.get("seconds")
    ]
    if commits:
        out += [
            "",
            f"streams_app EOS per core spent {statistics.median(commits):.0%} of its run inside "
            "commits (median over rounds).",
        ]
    wrong = summary.get("incorrect_runs") or []
    if wrong:
        out += ["", "Runs that failed the output check (left out of medians and ratios):", ""]
        out += [f"- {w}" for w in wrong]
    out += _latency(result.get("latency") or {})
    return "\n".join(out) + "\n"


MODE_INPUTS = {"per-core": "per run per core", "machine": "per run on the whole machine"}
#: The option that sets each mode's input (``benchmarks.run``).
MODE_OPTIONS = {"per-core": "--records", "machine": "--machine-records"}


def input_records(settings: dict[str, Any], modes: Any = ()) -> dict[str, int]:
    """Input records per run of each mode: ``input_records`` of a run that gave each mode its
    own input, else ``records`` for every mode (one input for all, before the modes had their
    own)."""
    if settings.get("input_records"):
        return dict(settings["input_records"])
    return {mode: settings["records"] for mode in modes or ("per-core", "machine")}


def _input_counts(records: dict[str, int]) -> str:
    """``4,000,000 input records per run per core, 8,000,000 per run on the whole machine``."""
    counts = set(records.values())
    if len(counts) == 1:
        return f"{counts.pop():,} input records per run"
    order = list(MODE_INPUTS)
    first, *rest = sorted(records.items(), key=lambda m: order.index(m[0]) if m[0] in order else 9)
    return ", ".join(
        [f"{first[1]:,} input records {MODE_INPUTS.get(first[0], first[0])}"]
        + [f"{n:,} {MODE_INPUTS.get(mode, mode)}" for mode, n in rest]
    )


#: Issue 42: a run must process for at least this long before its steady window (10 %-90 % of
#: it) counts as steady state (a JVM is still compiling its hot path in the first seconds).
STEADY_SECONDS = 30.0


def _short_windows(runs: list[dict[str, Any]]) -> list[str]:
    """A warning under the targets when some run processed for less than
    :data:`STEADY_SECONDS`: its rate is the warm-up's as much as the steady state's (the whole
    machine at 3,000,000 records gave 1.41x Kafka Streams, at 6,000,000 1.06x: BENCHMARKS.md),
    with the input to rerun each mode's short runs with (their records, scaled to 30 s)."""
    short = sorted(
        (r["seconds"], r["key"], r.get("mode", ""), r.get("records", 0))
        for r in runs
        if "error" not in r
        and r.get("correct", True)  # left out of medians and ratios anyway
        and r.get("seconds")
        and r["seconds"] < STEADY_SECONDS
    )
    if not short:
        return []
    shortest = short[0][0]
    systems = sorted({f"{key} ({mode})" for _, key, mode, _ in short})
    enough: dict[str, int] = {}
    for seconds, _, mode, records in short:
        wanted = int(records * STEADY_SECONDS / max(seconds, 1.0) / 1_000_000 + 1) * 1_000_000
        option = MODE_OPTIONS.get(mode, "--records")
        enough[option] = max(enough.get(option, 0), wanted)
    rerun = " ".join(f"{option} {n}" for option, n in sorted(enough.items(), reverse=True))
    return [
        "",
        f"**Not steady enough:** {len(short)} run(s) processed for less than "
        f"{STEADY_SECONDS:.0f} s (shortest {shortest:.1f} s: {', '.join(systems)}); their "
        f"steady windows still carry the warm-up, and the ratios above with them. Rerun with "
        f"`{rerun}` or more.",
    ]


def _machine_and_load(result: dict[str, Any]) -> str:
    """The machine, the versions, the load during the runs (and around the whole benchmark,
    when recorded) and the wall time: the end of a report's first line."""
    runs = result["runs"]
    loads = [r[k] for r in runs if "error" not in r for k in ("load_before", "load_after")]
    around = result.get("load_average") or {}
    return (
        f"machine: {result['machine']['cpus']} CPUs, Python {result['machine']['python']}; "
        + ", ".join(f"{k} {v}" for k, v in result.get("versions", {}).items())
        + (
            f". 1-minute load average during the runs: {min(loads):.1f}-{max(loads):.1f}"
            if loads
            else ""
        )
        + (
            f" (1/5/15-minute: {_loads(around['start'])} before, {_loads(around['end'])} after)"
            if around
            else ""
        )
        + (
            f"; {result['wall_seconds'] / 60:.0f} minutes in all."
            if "wall_seconds" in result
            else "."
        )
    )


def _loads(values: list[float]) -> str:
    return "/".join(f"{v:.1f}" for v in values)


def _label(runs: list[dict[str, Any]], key: str) -> str:
    run = next(r for r in runs if r["key"] == key)
    guarantee = {"exactly_once_v2": "EOS", "at_least_once": "ALOS"}.get(
        run["guarantee"], run["guarantee"]
    )
    return f"{run['system']} {guarantee}"


def _targets_table(targets: list[dict[str, Any]]) -> list[str]:
    if not targets:
        return []
    out = [
        "",
        "| targets (issues 42, 37; steady state) | target | measured (medians) | paired by round "
        "| met |",
        "|---|---:|---:|---:|---|",
    ]
    for t in targets:
        digits = 1 if t["figure"].startswith("cpu:") else 2
        met = "-" if t["met"] is None else ("yes" if t["met"] else "**no**")
        out.append(
            f"| {t['what']} | {t['target']} | {_num(t['value'], digits)} | "
            f"{_num(t['paired'], digits)} | {met} |"
        )
    return out


def _mode_table(runs: list[dict[str, Any]], summary: dict[str, Any]) -> list[str]:
    out = [
        "| system | guarantee | steady records/s (median) | range | whole-run records/s | "
        "CPU µs/record ¹ | cores ² | broker CPU µs/record | steady window | runs correct |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key in dict.fromkeys(r["key"] for r in runs):
        mine = [r for r in runs if r["key"] == key]
        ok = [r for r in mine if "error" not in r and r["correct"]]
        label = mine[0]["system"]
        partial = any(not r.get("finished", True) for r in mine if "error" not in r)
        steady = summary["steady_records_per_s"].get(key)
        span = summary["steady_range"].get(key)
        if steady is None:
            done = [r["records_per_s"] for r in mine if "error" not in r]
            shown = f"({_num(statistics.median(done))} whole run, wrong)" if done else "failed"
        else:
            shown = _num(steady)
        window = summary["steady_seconds"].get(key)
        out.append(
            f"| {label}{' †' if partial else ''} | {mine[0]['guarantee']} | {shown} | "
            f"{f'{_num(span[0])}-{_num(span[1])}' if span else '-'} | "
            f"{_num(summary['records_per_s'].get(key))} | "
            f"{_num(summary['worker_cpu_us_per_record'].get(key), 1)} | "
            f"{_num(summary['worker_cores'].get(key), 2)} | "
            f"{_num(summary['broker_cpu_us_per_record'].get(key), 1)} | "
            f"{'-' if window is None else f'{window:.1f} s'} | {len(ok)}/{len(mine)} |"
        )
    return out


def _ratio_table(summary: dict[str, Any]) -> list[str]:
    if not summary["ratios"]:
        return []
    out = ["", "| ratio (steady state) | of medians | median of per-round ratios |"]
    out.append("|---|---:|---:|")
    for name, value in summary["ratios"].items():
        paired = summary["paired_ratios"].get(name)
        out.append(f"| {RATIO_NAMES.get(name, name)} | {_num(value, 2)} | {_num(paired, 2)} |")
    return out


def _latency(latency: dict[str, Any]) -> list[str]:
    """The latency mode's table (``--latency``), and the live capacity search's line."""
    out: list[str] = []
    if "error" in latency:
        return ["", f"The latency mode failed: {latency['error']}"]
    if latency:
        out += [
            "",
            "| latency (produce → visible, read_committed) | rate | p50 | p90 | p99 | max | "
            "commit interval | the worker's commits: took p50 / p99, began p50 / p99 apart | "
            "slowest 1%, p50: to the seal / seal to EndTxn / EndTxn to read ³ |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        rounds = {key: lat for key, lat in latency.items() if key != "live_capacity"}
        for key, lat in rounds.items():
            took = lat.get("worker_commit_ms") or {}
            gap = lat.get("worker_commit_gap_ms") or {}
            cycle = (
                f"{took['p50']} / {took['p99']} ms, {gap.get('p50')} / {gap.get('p99')} ms"
                if took
                else "-"
            )
            tail = (lat.get("breakdown_ms") or {}).get("slowest_1pct")
            parts = (
                " / ".join(f"{tail[p]['p50']}" for p in ("to_seal", "seal_to_end", "end_to_read"))
                + " ms"
                if tail
                else "-"
            )
            out.append(
                f"| streams_app {key} | {_num(lat['rate_achieved'])}/s | {lat['p50_ms']} ms | "
                f"{lat['p90_ms']} ms | {lat['p99_ms']} ms | {lat['max_ms']} ms | "
                f"{lat['commit_interval_s'] * 1000:.0f} ms | {cycle} | {parts} |"
            )
        out += [
            "",
            "³ Exactly-once: each output cut at the commit that made it visible (the last whose "
            "EndTxn was sent before the reader saw it): from its input's produce call to that "
            "commit's seal (the producer's linger, the worker's fetch and processing, the wait "
            "for the commit), the commit's round trips up to EndTxn, then EndTxn's round trip, "
            "the broker's markers and the reader's fetch; the medians of the slowest 1% of "
            "outputs, which make the p99.",
        ]
        out += _live_capacity(latency.get("live_capacity"))
    return out


def _live_capacity(capacity: dict[str, Any] | None) -> list[str]:
    """The ``--latency-capacity`` search: what it tried and the rate it found sustained."""
    if not capacity:
        return []
    steps = ", ".join(
        f"{_num(step['rate'])}/s {'kept up' if step['sustained'] else 'fell behind'}"
        for step in capacity["steps"]
    )
    found = capacity["records_per_s"]
    drain = capacity["drain_records_per_s"]
    verdict = (
        f"**{_num(found)} records/s**, {found / drain:.2f} of its drain rate ({_num(drain)}/s)"
        if found
        else "none of the rates tried"
    )
    bound = f"{capacity['sustained_p99_ms']:,} ms"
    prolonged = capacity.get("prolonged_seconds")  # not in runs before the seventeenth session
    criterion = (
        f"it was never behind (a second's p99 over {bound}) for {prolonged} seconds in a row, "
        "nor in the last second of the load"
        if prolonged
        else f"no second's p99 went over {bound}"
    )
    return [
        "",
        f"Live capacity (one exactly-once worker fed live, the highest rate tried at which "
        f"{criterion}; {capacity['seconds']:g} s steps after {capacity.get('warmup_s', 5):g} s "
        f"of warm-up): {verdict}. "
        f"Steps: {steps}.",
    ]


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def render_recovery(recovery: dict[str, Any]) -> str:
    """The recovery table: medians per scenario, and what the end-to-end figure includes."""
    settings = recovery["settings"]
    summary = recovery["summary"]
    runs = recovery["runs"]
    out = [
        f"A table of {settings['keys']:,} keys ({settings['partitions']} partitions, one "
        f"changelog record per key), {settings['rate']:,} input records/s during the failover; "
        f"session_timeout {settings['session_timeout']:g} s, heartbeat_interval "
        f"{settings['heartbeat_interval']:g} s; medians of {settings['repeat']} round(s) "
        f"(runs with a correct output only).",
        "",
        "| scenario | kill → assigned | assigned → first output ¹ | kill → first output ² | "
        "records restored | restore | worker CPU ³ | runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, label in RECOVERY_ROWS.items():
        row = summary.get(kind)
        if row is None:
            continue
        total = _seconds(row["kill_to_output"])
        if row.get("restart_to_output") is not None:
            total += f" (restart → output {_seconds(row['restart_to_output'])})"
        records = row["restore_records"]
        out.append(
            f"| {label} | {_seconds(row['kill_to_assigned'])} | "
            f"{_seconds(row['assigned_to_output'])} | {total} | "
            f"{_num(records)} | {_seconds(row['restore_seconds'])} | "
            f"{_num(row['survivor_cpu_s'], 2)} s | {row['runs']} |"
        )
    wrong = [r for r in runs if not r.get("correct")]
    out += [
        "",
        "¹ From the new owner's assignment (the rebalance that gives it the task) to the task's "
        "first new output visible to a read_committed reader: fencing the dead worker's "
        "transactional id, committed offsets, the changelog restore, the first transaction.",
        "² End to end: the group notices a SIGKILLed member only when its session times out "
        "(a worker that stops cleanly leaves at once), then rebalances; a restarted worker "
        "must also start its process.",
        "³ CPU seconds of the worker that took over, from the kill until its first output "
        "(for a restart: of the new process since it started).",
    ]
    if "static-restart" in summary:
        out.append(
            f"⁴ With group_instance_id set and session_timeout "
            f"{settings.get('static_session_timeout', 10.0):g} s (heartbeat_interval "
            f"{settings.get('static_heartbeat_interval', 3.0):g} s): the restart rejoins inside "
            "the dead member's session, and the broker gives the static member its tasks back "
            "in the same generation, with no rebalance."
        )
    steady = {k: v.get("steady_cpu_s_per_s") for k, v in summary.items()}
    sizes = {k: v.get("state_bytes") for k, v in summary.items()}
    if steady.get("standby") is not None and steady.get("no-standby") is not None:
        out += [
            "",
            f"What the standby costs while nothing fails (two workers, same load): "
            f"{steady['standby']:.2f} CPU seconds per second with a standby against "
            f"{steady['no-standby']:.2f} without; state directories "
            f"{_num((sizes.get('standby') or 0) / 1e6, 0)} MB against "
            f"{_num((sizes.get('no-standby') or 0) / 1e6, 0)} MB.",
        ]
    if wrong:
        out += ["", "Runs that failed (left out of the medians):", ""]
        out += [
            f"- {r['kind']} #{r['repeat']}: {'; '.join(r.get('problems') or [])}" for r in wrong
        ]
    return "\n".join(out) + "\n"


def write(document: Path, block: str, begin: str = BEGIN, end: str = END) -> None:
    text = document.read_text()
    head, sep, rest = text.partition(begin)
    if not sep or end not in rest:
        raise SystemExit(f"{document} has no {begin} ... {end} block")
    _, _, tail = rest.partition(end)
    document.write_text(f"{head}{begin}\n{block}{end}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default="bench-results.json", type=Path)
    parser.add_argument("--write", type=Path, help="replace the results block of this file")
    parser.add_argument(
        "--recovery-block",
        default="",
        help="write the recovery table between <!-- bench-recovery-NAME:begin/end --> instead "
        "(a second configuration, e.g. a short session timeout)",
    )
    args = parser.parse_args()
    result = json.loads(args.results.read_text())
    blocks = []
    if "runs" in result:
        blocks.append((render(result), BEGIN, END))
    if "recovery" in result:
        name = f"bench-recovery-{args.recovery_block}" if args.recovery_block else "bench-recovery"
        blocks.append(
            (render_recovery(result["recovery"]), f"<!-- {name}:begin -->", f"<!-- {name}:end -->")
        )
    for block, begin, end in blocks:
        if args.write:
            write(args.write, block, begin, end)
        else:
            print(block)
    if args.write:
        print(f"updated {args.write}")


if __name__ == "__main__":
    main()
