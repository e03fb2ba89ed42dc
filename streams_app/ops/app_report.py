"""Text of ``status``, ``tables``, ``agents`` and ``reset``."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

from streams_app.app.app import App
from streams_app.ops.render import duration, partitions, table
from streams_app.ops.reset import ResetPlan
from streams_app.ops.status import AppStatus


def format_status(status: AppStatus) -> str:
    group = status.group
    lines = [
        f"app {status.app_id}: group {status.app_id} is {group.state} with "
        f"{len(group.members)} member(s)"
    ]
    if group.members:
        lines.append(
            table(
                ("MEMBER", "CLIENT", "HOST", "WEB", "PARTITIONS"),
                [
                    (
                        m.member_id,
                        m.client_id,
                        m.host.lstrip("/"),
                        m.web or "-",
                        partitions(m.assignment),
                    )
                    for m in group.members
                ],
            )
        )
    lines.append("")
    if status.tasks:
        lines.append(
            table(
                ("TASK", "PARTITION", "OWNER", "COMMITTED", "END", "LAG"),
                [
                    (
                        t.task,
                        f"{t.progress.topic}[{t.progress.partition}]",
                        t.owner.member_id if t.owner else "-",
                        "-" if t.progress.committed is None else t.progress.committed,
                        t.progress.end,
                        t.progress.lag,
                    )
                    for t in status.tasks
                ],
            )
        )
        state = "committed everything up to the end offsets" if status.caught_up else "behind"
        lines.append(f"total lag {status.lag} ({state})")
        for (topic, partition), (lso, end) in sorted(status.held.items()):
            lines.append(
                f"{topic}[{partition}]: last stable offset {lso} < end {end}: an open "
                "transaction holds read_committed readers (this app's workers) at offset "
                f"{lso}; see `streams-app txn dump {topic} {partition}` and `streams-app txn "
                "hanging`"
            )
    else:
        lines.append("no input partitions yet (the app's topics do not exist)")
    lines.append("")
    open_rows = [row for row in status.transactions if row.open]
    lines.append(
        f"{len(status.transactions)} transactional id(s) of the app's workers, "
        f"{len(open_rows)} with an open transaction"
    )
    if open_rows:
        lines.append(
            table(
                ("TRANSACTIONAL ID", "STATE", "PRODUCER", "EPOCH", "AGE", "PARTITIONS"),
                [
                    (
                        row.transactional_id,
                        row.state,
                        row.producer_id,
                        row.producer_epoch,
                        duration(row.age_ms(status.at_ms)),
                        partitions(row.partitions),
                    )
                    for row in open_rows
                ],
            )
        )
    return "\n".join(lines)


def _codec_name(codec: Any) -> str:
    return str(getattr(codec, "name", type(codec).__name__))


def format_tables(app: App, partition_counts: Mapping[str, int]) -> str:
    if not app.tables:
        return f"app {app.id} defines no tables"
    rows = []
    for t in app.tables.values():
        count = partition_counts.get(t.changelog_topic)
        rows.append(
            (
                t.name,
                t.changelog_topic,
                "-" if count is None else count,
                _codec_name(t.key_codec),
                _codec_name(t.value_codec),
            )
        )
    return table(("TABLE", "CHANGELOG", "PARTITIONS", "KEYS", "VALUES"), rows)


def to_json(value: Any) -> str:
    """A table key or value as JSON (Records as their fields)."""

    def default(obj: Any) -> Any:
        asdict = getattr(obj, "asdict", None)
        if callable(asdict):
            return asdict()
        if isinstance(obj, bytes):
            return obj.decode("utf-8", "replace")
        if isinstance(obj, (set, frozenset)):
            return sorted(obj)
        isoformat = getattr(obj, "isoformat", None)
        if callable(isoformat):
            return isoformat()
        return repr(obj)

    return json.dumps(value, default=default, sort_keys=True)


def format_contents(contents: Mapping[Any, Any]) -> str:
    rows = sorted(((to_json(k), to_json(v)) for k, v in contents.items()))
    lines = [table(("KEY", "VALUE"), rows)] if rows else []
    lines.append(f"{len(rows)} key(s)")
    return "\n".join(lines)


def format_agents(app: App) -> str:
    if not app.agents:
        return f"app {app.id} defines no agents"
    rows = []
    for agent in app.agents:
        doc = inspect.getdoc(agent.fun) or ""
        sinks = ", ".join(getattr(s, "name", repr(s)) for s in agent.sinks) or "-"
        rows.append(
            (
                agent.short_name,
                agent.channel.name,
                agent.concurrency,
                sinks,
                doc.splitlines()[0] if doc else "-",
            )
        )
    return table(("AGENT", "TOPIC", "CONCURRENCY", "SINKS", "HELP"), rows)


def format_reset(plan: ResetPlan) -> str:
    offsets = ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(plan.input_offsets.items()))
    lines = [
        f"reset of app {plan.app_id}:",
        f"  the group's committed offsets are deleted; inputs start again at their earliest "
        f"offsets: {offsets or '(no input topics exist)'}",
        "  internal topics deleted: " + (", ".join(plan.internal_topics) or "(none exist)"),
        "  kept (outputs, dead letters; reprocessing appends to them): "
        + (", ".join(plan.kept_topics) or "-"),
        "  local state wiped: "
        + (
            str(plan.state_path / "tables") if plan.state_path else f"(none under {plan.state_dir})"
        ),
    ]
    return "\n".join(lines)
