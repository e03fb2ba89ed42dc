"""``streams-app -A module status [--wait-committed [--timeout 60s]]``.

The group's members, each task's owner, committed offset, end offset and lag, and the open
transactions of the app's workers. ``--wait-committed`` waits until the group has committed
everything written to its inputs so far and exits 0, or exits 1 after ``--timeout`` (what
scripts and tests need instead of polling raw offsets).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from streams_app.cli.connect import add_bootstrap_option, client_kwargs, settings_for
from streams_app.cli.loader import load_app
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.ops.app_report import format_status
from streams_app.ops.render import parse_duration
from streams_app.ops.status import app_status
from streams_app.ops.txn_json import status_json
from streams_app.readback import wait_committed


def _seconds(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "status", parents=parents, help="the app's group, tasks, lag and open transactions (-A)"
    )
    parser.add_argument(
        "--wait-committed",
        action="store_true",
        help="wait until the group has committed everything written to its inputs so far, "
        "and its outputs hold no open transaction",
    )
    parser.add_argument(
        "--timeout", type=_seconds, default=60.0, help="with --wait-committed (default 60s)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print JSON (docs/operations.md lists the fields)"
    )
    add_bootstrap_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    conf = settings_for(args)
    code = 0
    if args.wait_committed:
        async with OpsAdmin(conf.bootstrap_servers, **client_kwargs(conf)) as admin:
            status = await app_status(admin, app)
        topics = sorted({t.progress.topic for t in status.tasks})
        outputs = (set(app.topics) | {t.changelog_topic_name for t in app.tables.values()}) - set(
            topics
        )
        try:
            await wait_committed(
                conf.bootstrap_servers,
                conf.id,
                topics or None,
                timeout=args.timeout,
                security=client_kwargs(conf),
                outputs=sorted(outputs),
            )
        except TimeoutError as exc:
            print(f"streams-app: {exc}", file=sys.stderr)
            code = 1
    async with OpsAdmin(conf.bootstrap_servers, **client_kwargs(conf)) as admin:
        status = await app_status(admin, app)
    if args.json:
        print(json.dumps(status_json(status), sort_keys=True))
    else:
        print(format_status(status))
    return code
