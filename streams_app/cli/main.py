"""Entry point of ``streams-app``, ``python -m streams_app`` and an app's ``app.main()``."""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from streams_app.app import faust_settings
from streams_app.cli import (
    app_commands,
    broker,
    changelog,
    demo,
    outbox,
    pipeline,
    postgres,
    reset,
    send,
    sink,
    status,
    tables,
    topology,
    txn,
    worker,
)
from streams_app.errors import StreamsAppError

if TYPE_CHECKING:
    from streams_app.app.app import App


#: What ``-l`` takes (Faust's names too, ``warn`` and ``crit``; any case).
LOG_LEVELS = ("debug", "info", "warning", "warn", "error", "critical", "crit")


def log_level(text: str) -> str:
    """``-l``: a level name, refused otherwise (``-l bogus`` used to be taken as warning)."""
    if text.lower() in LOG_LEVELS:
        return {"warn": "warning", "crit": "critical"}.get(text.lower(), text.lower())
    close = difflib.get_close_matches(text.lower(), LOG_LEVELS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise argparse.ArgumentTypeError(
        f"invalid log level {text!r}: {hint}use one of {', '.join(LOG_LEVELS)}"
    )


def common_options() -> argparse.ArgumentParser:
    """-A and -l are accepted before or after the subcommand (``worker -l info`` as in Faust)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-A", "--app", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    parent.add_argument(
        "-l", "--loglevel", type=log_level, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    return parent


def build_parser(app: App | None = None, prog: str = "streams-app") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Exactly-once stream processing: run workers, send records, manage the "
        "embedded broker.",
    )
    parser.add_argument(
        "-A",
        "--app",
        help="the topology module, e.g. topologies.orders (worker, send, topology, status, tables, "
        "agents, reset; txn: only the app's transactions)",
    )
    parser.add_argument(
        "-l",
        "--loglevel",
        type=log_level,
        default="warning",
        help=f"log level: {', '.join(LOG_LEVELS)} (default warning)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    parents = [common_options()]
    worker.add_parser(sub, parents)
    send.add_parser(sub, parents)
    topology.add_parser(sub, parents)
    if app is None:
        broker.add_parser(sub, parents)
        demo.add_parser(sub, parents)
        pipeline.add_parser(sub, parents)
        txn.add_parser(sub, parents)
        status.add_parser(sub, parents)
        tables.add_parser(sub, parents)
        reset.add_parser(sub, parents)
        changelog.add_parser(sub, parents)
        sink.add_parser(sub, parents)
        outbox.add_parser(sub, parents)
        postgres.add_parser(sub, parents)
    else:
        for command in app.commands.values():
            app_commands.add_command(sub, command, parents)
        parser.set_defaults(streams_app_target=app)
    return parser


def _app_option(argv: Sequence[str]) -> str | None:
    for index, arg in enumerate(argv):
        if arg in ("-A", "--app") and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--app="):
            return arg.split("=", 1)[1]
        if arg.startswith("-A") and len(arg) > 2:
            return arg[2:]
    return None


def _builtin_commands() -> set[str]:
    """streams-app's own subcommands (an app's ``@app.command`` ones are looked up otherwise)."""
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    app = None
    spec = _app_option(args_in)
    if spec and not _builtin_commands() & set(args_in):
        # `streams-app -A module <app command> ...`: the app's own commands.
        from streams_app.cli.loader import load_app

        try:
            app = load_app(spec)
        except StreamsAppError as exc:
            print(f"streams-app: error: {exc}", file=sys.stderr)
            return 2
    return _main(build_parser(app), args_in)


def main_for_app(app: App, argv: Sequence[str] | None = None) -> int:
    """``app.main()``: the same commands, for this app, plus its ``@app.command`` ones."""
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "app"
    return _main(build_parser(app, prog=prog), list(sys.argv[1:] if argv is None else argv))


def _main(parser: argparse.ArgumentParser, argv: Sequence[str]) -> int:
    args, extras = parser.parse_known_args(argv)
    # argparse gives an optional positional (``send TOPIC [VALUE]``) nothing when an option
    # comes between the two (``send orders --key k VALUE``, bpo-15112): hand it over here.
    late = getattr(args, "late_positional", None)
    if late and extras and len(extras) == 1 and getattr(args, late) is None:
        setattr(args, late, extras.pop())
    if extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    # What ``worker --processes N`` starts each of its worker processes with.
    args.command_line = list(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.loglevel).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    faust_settings.release_warnings()  # what the app's module warned about before this
    try:
        return int(args.func(args))
    except StreamsAppError as exc:
        print(f"streams-app: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_status", 2))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
