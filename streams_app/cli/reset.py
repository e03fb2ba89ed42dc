"""``streams-app -A module reset [--dry-run] [--yes] [--state-dir DIR]``: Kafka Streams'
application reset tool for an app (see :mod:`streams_app.ops.reset`)."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from streams_app.cli.connect import add_bootstrap_option, client_kwargs, settings_for
from streams_app.cli.loader import load_app
from streams_app.cli.txn import confirm
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.ops.app_report import format_reset
from streams_app.ops.reset import check_refusals, execute_reset, plan_reset


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "reset",
        parents=parents,
        help="start the app over: offsets to earliest, internal topics and local state gone (-A)",
    )
    parser.add_argument("--state-dir", type=Path, help="the workers' state directory root")
    parser.add_argument("--dry-run", action="store_true", help="print what would be done")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    add_bootstrap_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    conf = settings_for(args)
    async with OpsAdmin(conf.bootstrap_servers, **client_kwargs(conf)) as admin:
        plan = await plan_reset(admin, app, args.state_dir)
        print(format_reset(plan))
        check_refusals(plan)
        if args.dry_run:
            print("dry run: nothing changed")
            return 0
        if not args.yes and not confirm(f"Reset app {app.id}? This cannot be undone. [y/N] "):
            print("nothing changed")
            return 1
        await execute_reset(admin, app, plan)
    print(f"app {app.id} reset: the next worker reprocesses its inputs from the beginning")
    return 0
