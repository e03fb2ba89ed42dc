"""``streams-app postgres start|stop|status``: a local PostgreSQL for development (no Docker)."""

from __future__ import annotations

import argparse
import time


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "postgres", parents=parents, help="a local PostgreSQL for development (sinks, outbox)"
    )
    actions = parser.add_subparsers(dest="postgres_command", required=True)
    start = actions.add_parser("start", help="start it (keeps running, keeps its data)")
    start.add_argument("--port", type=int, default=5432, help="listen port (default 5432)")
    start.add_argument("--fresh", action="store_true", help="discard the previous data")
    actions.add_parser("stop", help="stop it")
    actions.add_parser("status", help="is it running?")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from streams_app.postgres import devserver

    if args.postgres_command == "start":
        t0 = time.monotonic()
        state = devserver.start(port=args.port, fresh=args.fresh)
        print(
            f"PostgreSQL running at {state.dsn} (pid {state.pid}, ready in "
            f"{time.monotonic() - t0:.1f}s); data in {state.root}"
        )
        return 0
    if args.postgres_command == "stop":
        print("PostgreSQL stopped" if devserver.stop() else "no PostgreSQL was running")
        return 0
    running = devserver.status()
    if running is not None:
        print(f"running at {running.dsn} (pid {running.pid})")
        return 0
    print("not running")
    return 1
