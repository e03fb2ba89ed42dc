"""``streams-app -A module tables [NAME [KEY]]`` and ``streams-app -A module agents`` (Faust's
commands): the app's tables, a table's committed contents (read from its changelog,
read_committed), one key's committed value, and the app's agents with their topics."""

from __future__ import annotations

import argparse
import asyncio

from streams_app.app.app import App
from streams_app.cli.connect import add_bootstrap_option, client_kwargs, settings_for
from streams_app.cli.loader import load_app
from streams_app.codecs import DecodeError
from streams_app.errors import StreamsAppError
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.ops.app_report import format_agents, format_contents, format_tables, to_json
from streams_app.readback import read_table


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
    tables.add_argument("key", nargs="?", help="one key (as the table's key codec reads it)")
    tables.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the changelog"
    )
    add_bootstrap_option(tables)
    tables.set_defaults(func=run_tables)
    agents = sub.add_parser("agents", parents=parents, help="list the app's agents (-A)")
    agents.set_defaults(func=run_agents)


def run_agents(args: argparse.Namespace) -> int:
    print(format_agents(load_app(args.app)))
    return 0


def run_tables(args: argparse.Namespace) -> int:
    return asyncio.run(_tables(load_app(args.app), args))


async def _tables(app: App, args: argparse.Namespace) -> int:
    conf = settings_for(args)
    if args.name is None:
        async with OpsAdmin(conf.bootstrap_servers, **client_kwargs(conf)) as admin:
            existing = set(await admin.list_topics())
            counts = {
                t.changelog_topic: len(await admin.partitions(t.changelog_topic))
                for t in app.tables.values()
                if t.changelog_topic in existing
            }
        print(format_tables(app, counts))
        return 0
    found = app.tables.get(args.name)
    if found is None:
        raise StreamsAppError(
            f"app {app.id!r} has no table {args.name!r}; its tables: "
            f"{', '.join(sorted(app.tables)) or 'none'}"
        )
    contents = await read_table(app, found, timeout=args.timeout, bootstrap=conf.bootstrap_servers)
    if args.key is None:
        print(format_contents(contents))
        return 0
    try:
        key = found.key_codec.loads(args.key.encode())
    except DecodeError as exc:
        raise StreamsAppError(
            f"KEY {args.key!r} does not decode as the table's keys: {exc}"
        ) from None
    if key not in contents:
        print(f"{to_json(key)}: no committed value in table {found.name}")
        return 1
    print(to_json(contents[key]))
    return 0
