"""Entry point of ``streams-app`` and ``python -m streams_app``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from streams_app.cli import broker
from streams_app.errors import StreamsAppError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streams-app",
        description="Exactly-once stream processing: run workers, send records, manage the "
        "embedded broker.",
    )
    parser.add_argument(
        "-A", "--app", help="the topology module, e.g. topologies.orders (for worker and send)"
    )
    parser.add_argument("-l", "--loglevel", default="warning", help="log level (default warning)")
    sub = parser.add_subparsers(dest="command", required=True)
    broker.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
