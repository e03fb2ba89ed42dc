"""``streams-app -A module changelog reseed|wipe TABLE [--state-dir DIR]``: a table whose
changelog was deleted (or deleted and recreated) under its local stores (see
:mod:`streams_app.ops.changelog`)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from streams_app.cli.loader import load_app
from streams_app.ops.changelog import repair


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "changelog",
        parents=parents,
        help="a table's changelog lost under its local stores: re-seed it, or wipe the stores (-A)",
    )
    actions = parser.add_subparsers(dest="changelog_action", required=True)
    reseed = actions.add_parser(
        "reseed",
        parents=parents,
        help="write the local stores' keys into the changelog (the stores hold the table)",
    )
    reseed.add_argument(
        "--force",
        action="store_true",
        help="re-seed even changelog partitions that already hold records",
    )
    wipe = actions.add_parser(
        "wipe",
        parents=parents,
        help="drop the local stores beyond the changelog (restored from the changelog as it is)",
    )
    for each in (reseed, wipe):
        each.add_argument("table", help="the table's name")
        each.add_argument("--state-dir", type=Path, help="the worker's state directory root")
        each.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    lines = asyncio.run(
        repair(
            app,
            args.table,
            args.changelog_action,
            state_dir=args.state_dir,
            force=getattr(args, "force", False),
        )
    )
    for line in lines:
        print(line)
    return 0
