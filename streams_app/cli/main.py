"""Entry point of ``streams-app`` and ``python -m streams_app``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from streams_app.cli import (
    broker,
    demo,
    outbox,
    pipeline,
    postgres,
    reset,
    send,
    sink,
    status,
    tables,
    txn,
    worker,
)
from streams_app.errors import StreamsAppError


def common_options() -> argparse.ArgumentParser:
    """-A and -l are accepted before or after the subcommand (``worker -l info`` as in Faust)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-A", "--app", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    parent.add_argument("-l", "--loglevel", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streams-app",
        description="Exactly-once stream processing: run workers, send records, manage the "
        "embedded broker.",
    )
    parser.add_argument(
        "-A",
        "--app",
        help="the topology module, e.g. topologies.orders (worker, send, status, tables, agents, "
        "reset; txn: only the app's transactions)",
    )
    parser.add_argument("-l", "--loglevel", default="warning", help="log level (default warning)")
    sub = parser.add_subparsers(dest="command", required=True)
    parents = [common_options()]
    worker.add_parser(sub, parents)
    send.add_parser(sub, parents)
    broker.add_parser(sub, parents)
    demo.add_parser(sub, parents)
    pipeline.add_parser(sub, parents)
    txn.add_parser(sub, parents)
    status.add_parser(sub, parents)
    tables.add_parser(sub, parents)
    reset.add_parser(sub, parents)
    sink.add_parser(sub, parents)
    outbox.add_parser(sub, parents)
    postgres.add_parser(sub, parents)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    # argparse gives an optional positional (``send TOPIC [VALUE]``) nothing when an option
    # comes between the two (``send orders --key k VALUE``, bpo-15112): hand it over here.
    late = getattr(args, "late_positional", None)
    if late and extras and len(extras) == 1 and getattr(args, late) is None:
        setattr(args, late, extras.pop())
    if extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    logging.basicConfig(
        level=getattr(logging, str(args.loglevel).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except StreamsAppError as exc:
        print(f"streams-app: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
