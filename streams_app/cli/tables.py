"""``streams-app -A module tables [NAME [KEY [START]]] [--json]`` and ``streams-app -A module
agents`` (Faust's commands): the app's tables, a table's committed contents (read from its
changelog, read_committed), one key's committed value (from the worker that owns it when the
app runs, else from the changelog partition holding it; a windowed table: the key's windows, or
the one starting at ``START``; a versioned table: its latest value, and with ``--json`` its
versions as the owner's ``/tables`` lists them), and the app's agents with their topics.
``--json`` prints what docs/operations.md describes, for scripts."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from streams_app.app.app import App
from streams_app.app.table import Table
from streams_app.cli.connect import add_bootstrap_option, client_kwargs, settings_for
from streams_app.cli.loader import load_app
from streams_app.codecs import Codec, DecodeError
from streams_app.errors import StreamsAppError
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.ops.app_report import (
    contents_json,
    format_agents,
    format_contents,
    format_tables,
    format_versioned_contents,
    lookup_json,
    tables_json,
    to_json,
    versioned_contents_json,
)
from streams_app.ops.table_lookup import Lookup, lookup_key
from streams_app.readback import read_table, read_table_versions


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    tables = sub.add_parser(
        "tables",
        parents=parents,
        help="list the app's tables, or read one's committed contents (-A)",
    )
    tables.add_argument("name", nargs="?", help="a table: print its committed keys and values")
    tables.add_argument(
        "key",
        nargs="?",
        help="one key (as the table's key codec reads it; a plain word is a string); of a "
        "windowed table: the key (all its windows), or a window as `tables NAME` lists it, "
        '["key", start, end]',
    )
    tables.add_argument(
        "start",
        nargs="?",
        type=int,
        help="windowed tables: the window of KEY starting at START (epoch milliseconds)",
    )
    tables.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the changelog"
    )
    tables.add_argument("--json", action="store_true", help="print JSON (docs/operations.md)")
    add_bootstrap_option(tables)
    tables.set_defaults(func=run_tables)
    agents = sub.add_parser("agents", parents=parents, help="list the app's agents (-A)")
    agents.set_defaults(func=run_agents)


def run_agents(args: argparse.Namespace) -> int:
    print(format_agents(load_app(args.app)))
    return 0


def run_tables(args: argparse.Namespace) -> int:
    return asyncio.run(_tables(load_app(args.app), args))


def _print_json(data: Any) -> None:
    print(json.dumps(data, sort_keys=True))


async def _tables(app: App, args: argparse.Namespace) -> int:
    conf = settings_for(args)
    if args.name is None:
        async with OpsAdmin(conf.bootstrap_servers, **client_kwargs(conf)) as admin:
            existing = set(await admin.list_topics())
            counts = {
                t.changelog_topic_name: len(await admin.partitions(t.changelog_topic_name))
                for t in app.tables.values()
                if t.changelog_topic_name in existing
            }
        if args.json:
            _print_json(tables_json(app, counts))
        else:
            print(format_tables(app, counts))
        return 0
    found = app.tables.get(args.name)
    if found is None:
        raise StreamsAppError(
            f"app {app.id!r} has no table {args.name!r}; its tables: "
            f"{', '.join(sorted(app.tables)) or 'none'}"
        )
    if args.key is None and found.versioned_ms is not None:
        versions = await read_table_versions(
            app, found, timeout=args.timeout, bootstrap=conf.bootstrap_servers
        )
        if args.json:
            _print_json({"table": found.name, "entries": versioned_contents_json(versions)})
        else:
            print(format_versioned_contents(versions))
        return 0
    if args.key is None:
        contents = await read_table(
            app, found, timeout=args.timeout, bootstrap=conf.bootstrap_servers
        )
        if args.json:
            _print_json({"table": found.name, "entries": contents_json(found, contents)})
        else:
            print(format_contents(found, contents))
        return 0
    key, start, end = _parse_key(found, args.key)
    if args.start is not None:
        if found.versioned_ms is not None:
            raise StreamsAppError(
                f"table {found.name!r} is versioned, not windowed: START picks a window. "
                f"`tables {found.name} KEY --json` lists the key's versions (valid_from, value, "
                "oldest first); its value as of a time is the last one valid from then or before"
            )
        if found.window is None:
            raise StreamsAppError(f"table {found.name!r} is not windowed: START has no meaning")
        start = args.start
    async with OpsAdmin(conf.bootstrap_servers, **client_kwargs(conf)) as admin:
        lookup = await lookup_key(
            admin, app, found, key, bootstrap=conf.bootstrap_servers, timeout=args.timeout
        )
    if start is not None:
        lookup = _one_window(lookup, start, end)
    print(_source(found, lookup), file=sys.stderr)
    if args.json:
        _print_json(lookup_json(found, lookup))
        return 0 if lookup.found else 1
    if not lookup.found:
        what = "window" if found.window is not None else "value"
        print(f"{to_json(key)}: no committed {what} in table {found.name}")
        return 1
    if found.window is None or start is not None:
        print(to_json(lookup.value if found.window is None else lookup.value[0][2]))
    else:
        print(format_contents(found, _as_contents(found, key, lookup)))
    return 0


def _source(table: Table, lookup: Lookup) -> str:
    if lookup.worker is not None:
        return f"(from worker {lookup.worker}, partition {lookup.partition})"
    if lookup.partition < 0:
        return f"(changelog {table.changelog_topic_name} does not exist yet)"
    return (
        f"(from changelog {table.changelog_topic_name} partition {lookup.partition}: "
        f"{lookup.records_read} record(s) read)"
    )


def _one_window(lookup: Lookup, start: int, end: int | None) -> Lookup:
    windows = [w for w in lookup.value if w[0] == start and (end is None or w[1] == end)]
    return Lookup(
        lookup.table,
        lookup.key,
        lookup.partition,
        windows,
        bool(windows),
        lookup.worker,
        lookup.records_read,
    )


def _as_contents(table: Table, key: Any, lookup: Lookup) -> dict[Any, Any]:
    from streams_app.state.windowed import SlidingValue, WindowKey

    sliding = table.window is not None and table.window.kind == "sliding"
    return {
        WindowKey(key, start, end): SlidingValue(value, end) if sliding else value
        for start, end, value in lookup.value
    }


def _decode(codec: Codec, text: str) -> Any:
    try:
        return codec.loads(text.encode())
    except DecodeError:
        # A plain word for a table of JSON strings (Faust's str keys): the string itself.
        return codec.loads(json.dumps(text).encode())


def _parse_key(table: Table, text: str) -> tuple[Any, int | None, int | None]:
    """KEY as the table's key codec reads it; for a windowed table also ``[key, start, end]``
    (or ``[key, start]``) as ``tables NAME`` lists windows: the key and that window."""
    codec = table.user_key_codec
    if table.window is not None:
        try:
            listed = json.loads(text)
        except ValueError:
            listed = None
        if (
            isinstance(listed, list)
            and len(listed) in (2, 3)
            and all(isinstance(n, int) for n in listed[1:])
        ):
            element = listed[0]
            texts = [json.dumps(element)] + ([element] if isinstance(element, str) else [])
            for candidate in texts:
                try:
                    key = _decode(codec, candidate)
                except DecodeError:
                    continue
                if to_json(key) == to_json(element):
                    return key, listed[1], listed[2] if len(listed) == 3 else None
    try:
        return _decode(codec, text), None, None
    except DecodeError as exc:
        raise StreamsAppError(f"KEY {text!r} does not decode as the table's keys: {exc}") from None
