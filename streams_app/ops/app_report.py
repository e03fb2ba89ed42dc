"""Text of ``status``, ``tables``, ``agents`` and ``reset``."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from streams_app.app.app import App
from streams_app.app.table import Table
from streams_app.app.windows import SessionWindows, SlidingWindows, TimeWindows
from streams_app.ops.render import duration, partitions, table
from streams_app.ops.reset import ResetPlan
from streams_app.ops.status import AppStatus
from streams_app.ops.table_lookup import Lookup
from streams_app.state.versioned import VersionedRecord, latest_value


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
    name = str(getattr(codec, "name", type(codec).__name__))
    return name.removesuffix(":None")  # a serializer without a declared type


def window_json(t: Table) -> dict[str, Any] | None:
    """A table's kind of window and its sizes in ms (None: not windowed)."""
    window = t.window
    if window is None:
        return None
    out: dict[str, Any] = {"kind": window.kind}
    if isinstance(window, TimeWindows):
        out["kind"] = "tumbling" if window.tumbling else "hopping"
        out["size_ms"] = window.size_ms
        if not window.tumbling:
            out["step_ms"] = window.step_ms
    elif isinstance(window, SlidingWindows):
        out["size_ms"] = window.size_ms
    elif isinstance(window, SessionWindows):
        out["gap_ms"] = window.gap_ms
    out["grace_ms"] = window.grace_ms
    out["retention_ms"] = window.retention_ms
    return out


def _window_text(t: Table) -> str:
    described = window_json(t)
    if described is None:
        return "-"
    sizes = ", ".join(
        f"{name.removesuffix('_ms')} {duration(value)}"
        for name, value in described.items()
        if name.endswith("_ms") and name != "retention_ms"
    )
    return f"{described['kind']} ({sizes})"


def tables_json(app: App, partition_counts: Mapping[str, int]) -> list[dict[str, Any]]:
    """``tables --json``: one object per table (docs/operations.md has the schema)."""
    return [
        {
            "table": t.name,
            "changelog": t.changelog_topic_name,
            "partitions": partition_counts.get(t.changelog_topic_name),
            "keys": _codec_name(t.user_key_codec),
            "values": _codec_name(t.user_value_codec),
            "window": window_json(t),
            "versioned": None if t.versioned_ms is None else {"history_ms": t.versioned_ms},
        }
        for t in app.tables.values()
    ]


def format_tables(app: App, partition_counts: Mapping[str, int]) -> str:
    if not app.tables:
        return f"app {app.id} defines no tables"
    versioned = any(t.versioned_ms is not None for t in app.tables.values())
    rows: list[tuple[object, ...]] = []
    for row, t in zip(tables_json(app, partition_counts), app.tables.values(), strict=True):
        cells: tuple[object, ...] = (
            row["table"],
            row["changelog"],
            "-" if row["partitions"] is None else row["partitions"],
            row["keys"],
            row["values"],
            _window_text(t),
        )
        # A HISTORY column only beside a versioned table (not a column of dashes).
        rows.append((*cells, duration(t.versioned_ms)) if versioned else cells)
    header: tuple[str, ...] = ("TABLE", "CHANGELOG", "PARTITIONS", "KEYS", "VALUES", "WINDOW")
    header += ("HISTORY",) if versioned else ()
    return table(header, rows)


def to_json(value: Any) -> str:
    """A table key or value as JSON (Records as their fields)."""
    return json.dumps(jsonable(value), sort_keys=True)


def jsonable(value: Any) -> Any:
    """A decoded key or value as plain JSON data (Records as their fields, sets sorted)."""

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

    return json.loads(json.dumps(value, default=default, sort_keys=True))


def contents_json(t: Table, contents: Mapping[Any, Any]) -> list[dict[str, Any]]:
    """``tables NAME --json``: ``[{"key", "value"}]``, windowed ``[{"key", "start", "end",
    "value"}]`` (the window's aggregate), sorted."""
    window = t.window
    if window is None:
        rows = [{"key": jsonable(k), "value": jsonable(v)} for k, v in contents.items()]
    else:
        rows = [
            {
                "key": jsonable(k.key),
                "start": k.start,
                "end": k.end,
                "value": jsonable(window.aggregate(v)),
            }
            for k, v in contents.items()
        ]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def versions_json(versions: Iterable[tuple[int, Any]]) -> list[dict[str, Any]]:
    """A versioned table's versions of a key as the owner's ``/tables/NAME/KEY`` lists them:
    ``[{"valid_from", "value"}]``, oldest first, a tombstone's value null."""
    return [{"valid_from": t, "value": jsonable(value)} for t, value in versions]


def versioned_contents_json(
    versions: Mapping[Any, Sequence[VersionedRecord]],
) -> list[dict[str, Any]]:
    """``tables NAME --json`` of a versioned table: ``[{"key", "value", "valid_from",
    "versions"}]``, the latest value and when it became valid, sorted by key; a key whose
    latest version is a tombstone is not there (it has no value, as a plain table's deleted
    key)."""
    rows = []
    for key, kept in versions.items():
        last = latest_value(kept)
        if last is not None:
            rows.append(
                {
                    "key": jsonable(key),
                    "value": jsonable(last.value),
                    "valid_from": last.timestamp,
                    "versions": versions_json((v.timestamp, v.value) for v in kept),
                }
            )
    return sorted(rows, key=lambda row: json.dumps(row["key"], sort_keys=True))


def format_versioned_contents(versions: Mapping[Any, Sequence[VersionedRecord]]) -> str:
    rows = versioned_contents_json(versions)
    lines = []
    if rows:
        header = ("KEY", "VALUE", "VALID_FROM", "VERSIONS")
        cells = [
            (to_json(r["key"]), to_json(r["value"]), r["valid_from"], len(r["versions"]))
            for r in rows
        ]
        lines.append(table(header, cells))
    lines.append(f"{len(rows)} key(s)")
    return "\n".join(lines)


def format_contents(t: Table, contents: Mapping[Any, Any]) -> str:
    rows = contents_json(t, contents)
    if t.window is None:
        lines = [table(("KEY", "VALUE"), [(to_json(r["key"]), to_json(r["value"])) for r in rows])]
    else:
        lines = [
            table(
                ("KEY", "START", "END", "VALUE"),
                [(to_json(r["key"]), r["start"], r["end"], to_json(r["value"])) for r in rows],
            )
        ]
    if not rows:
        lines = []
    keys = len({to_json(r["key"]) for r in rows})
    lines.append(f"{keys} key(s)" if t.window is None else f"{len(rows)} window(s), {keys} key(s)")
    return "\n".join(lines)


def lookup_json(t: Table, found: Lookup) -> dict[str, Any]:
    """``tables NAME KEY --json`` (docs/operations.md has the schema)."""
    out: dict[str, Any] = {
        "table": t.name,
        "key": jsonable(found.key),
        "partition": found.partition,
        "found": found.found,
        "source": (
            {"worker": found.worker}
            if found.worker is not None
            else {"changelog": t.changelog_topic_name, "records_read": found.records_read}
        ),
    }
    if t.window is None:
        out["value"] = jsonable(found.value)
        if found.versions is not None:
            out["versions"] = versions_json(found.versions)
    else:
        out["windows"] = [
            {"start": start, "end": end, "value": jsonable(value)}
            for start, end, value in found.value
        ]
    return out


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
