"""The results: one summary table (invariants down, systems across) and ``chaos-results.json``.

The JSON is shaped ``{"systems": {"<system>": {"records": N, "faults": {"<kind>": n},
"violations": {"<invariant>": n}, "max_resume_seconds": s, ...}}}``; the extra keys hold the
fault log, examples of each violation, the generator's and the client check's figures.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from streams_app.chaos import invariants as inv
from streams_app.chaos.config import ChaosConfig
from streams_app.chaos.run import SystemResult
from streams_app.chaos.schedule import KINDS


def results_json(results: Mapping[str, SystemResult], config: ChaosConfig) -> dict[str, Any]:
    return {
        "systems": {name: r.asdict() for name, r in results.items()},
        "config": {
            "records": config.records,
            "duration": config.duration,
            "faults": config.faults,
            "seed": config.seed,
            "mix": config.mix,
            "workers": config.workers,
            "partitions": config.partitions,
            "keys": config.keys,
            "values": config.values,
            "session_timeout": config.session_timeout,
            "transaction_timeout": config.transaction_timeout,
            "commit_interval": config.commit_interval,
            "faust_records": config.faust_records,
            "client_records": config.client_records,
            "network": config.network,
            "standby_replicas": config.standby_replicas,
            "static_membership": config.static_membership,
        },
        "invariants": inv.CHECKS,
    }


def write_results(
    path: Path, results: Mapping[str, SystemResult], config: ChaosConfig
) -> dict[str, Any]:
    """Write (merging into an existing file's other systems) and return the document."""
    document = results_json(results, config)
    try:
        previous = json.loads(path.read_text())
        for name, entry in previous.get("systems", {}).items():
            document["systems"].setdefault(name, entry)
    except (OSError, ValueError):
        pass
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return document


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def summary_table(results: Mapping[str, SystemResult]) -> str:
    names = list(results)
    rows: list[tuple[str, list[str]]] = []
    rows.append(("records in", [_fmt(results[n].records) for n in names]))
    rows.append(("inputs processed (committed)", [_fmt(results[n].processed) for n in names]))
    rows.append(("faults injected", [_fmt(sum(results[n].faults.values())) for n in names]))
    for kind in KINDS:
        if any(results[n].faults.get(kind) for n in names):
            rows.append((f"  {kind}", [_fmt(results[n].faults.get(kind, 0)) for n in names]))
    for key in inv.CHECKS:
        if key in inv.PARTITION_CHECKS and all(
            results[n].violations.get(key) is None for n in names
        ):
            continue  # not checked (loopback: no network fault to heal)
        rows.append((inv.label(key), [_fmt(results[n].violations.get(key)) for n in names]))
    rows.append(("total violations", [_fmt(results[n].total_violations) for n in names]))
    rows.append(("max resume seconds", [_fmt(results[n].max_resume_seconds) for n in names]))
    rows.append(
        ("liveness bound seconds", [_fmt(results[n].liveness_bound_seconds) for n in names])
    )
    return _table("invariant / figure", names, rows)


def _table(heading: str, names: list[str], rows: list[tuple[str, list[str]]]) -> str:
    width = max(len(heading), *(len(label) for label, _ in rows))
    cols = [max(len(n), *(len(cells[i]) for _, cells in rows)) for i, n in enumerate(names)]
    line = "+-" + "-" * width + "-+" + "+".join("-" * (c + 2) for c in cols) + "+"
    out = [line, "| " + heading.ljust(width) + " |"]
    out[-1] += "|".join(f" {n.rjust(c)} " for n, c in zip(names, cols, strict=True)) + "|"
    out.append(line)
    for label, cells in rows:
        body = "|".join(f" {cell.rjust(c)} " for cell, c in zip(cells, cols, strict=True))
        out.append("| " + label.ljust(width) + " |" + body + "|")
    out.append(line)
    return "\n".join(out)


def liveness_table(results: Mapping[str, SystemResult]) -> str:
    """Per fault kind and system: faults, the longest resume from the strike, and for network
    kinds the longest from the heal; ``*`` marks the figure liveness judges, ``never`` a
    fault after which processing did not resume within the wait."""
    names = list(results)
    rows: list[tuple[str, list[str]]] = []
    for kind in KINDS:
        entries = [results[n].resume_by_kind.get(kind) for n in names]
        if not any(entries):
            continue
        cells = []
        for entry in entries:
            if not entry:
                cells.append("-")
                continue
            judged = entry["judged"]
            cell = f"{entry['faults']}: {_seconds(entry['max_from_strike'])}"
            cell += "*" if judged == "strike" else ""
            if entry.get("max_from_heal") is not None or judged == "heal":
                cell += f" / {_seconds(entry['max_from_heal'])}" + ("*" if judged == "heal" else "")
            cells.append(cell)
        rows.append((kind, cells))
    if not rows:
        return ""
    return _table("max resume s: faults: strike / heal", names, rows)


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}"


def examples_text(results: Mapping[str, SystemResult]) -> str:
    lines: list[str] = []
    for name, result in results.items():
        if result.notes:
            lines.append(f"{name} notes:")
            lines.extend(f"  - {note}" for note in result.notes)
        for key, examples in result.examples.items():
            if examples:
                lines.append(f"{name} {inv.short(key)}: {result.violations.get(key, 0)}, e.g.")
                lines.extend(f"  - {e}" for e in examples)
    return "\n".join(lines)


def fault_timeline(result: SystemResult) -> str:
    """One line per fault: when it was due and struck, what it hit, when it healed, and how
    long processing took to resume."""
    lines = []
    for entry in result.fault_log:
        resume = entry.get("resume_seconds")
        line = (
            f"#{entry['index']} {entry['kind']} due {entry['at']:.1f}s, struck "
            f"{entry['struck_at']:.1f}s ({entry.get('struck_wall', '')}): {entry['target']}"
        )
        if entry.get("skipped"):
            lines.append(line + ": skipped")
            continue
        if entry.get("healed_after") is not None:
            after = entry.get("resume_after_heal")
            line += f"; healed after {entry['healed_after']:.1f}s"
            line += (
                f"; resumed {_seconds(resume)}s after the strike, {_seconds(after)}s after the heal"
            )
        else:
            line += f"; resumed {_seconds(resume)}s after the strike"
        for note in entry.get("notes", []):
            line += f" [{note}]"
        lines.append(line)
    return "\n".join(lines)
