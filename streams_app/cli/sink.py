"""``streams-app -A module sink [NAME ...]``: run the app's PostgreSQL sinks until SIGTERM.

Every named sink (default: all of the app's) runs in this process with its own consumer and
group (``<app id>-sink-<name>``); see :mod:`streams_app.postgres.sink` for why sinks run apart
from the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from streams_app.app.postgres import PostgresSink
from streams_app.cli.loader import load_app
from streams_app.errors import StreamsAppError

log = logging.getLogger("streams_app.sink")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "sink",
        parents=parents,
        help="run the app's PostgreSQL sinks (-A): Kafka -> PostgreSQL, exactly once",
    )
    parser.add_argument("names", nargs="*", help="sinks to run (default: every sink of the app)")
    parser.add_argument("--dsn", help="database (default: the sink's, else postgres_dsn)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    if not app.sinks:
        raise StreamsAppError(f"app {app.id!r} declares no sink (app.postgres_sink)")
    unknown = [n for n in args.names if n not in app.sinks]
    if unknown:
        raise StreamsAppError(
            f"app {app.id!r} has no sink named {', '.join(unknown)}; its sinks: "
            f"{', '.join(sorted(app.sinks))}"
        )
    names = args.names or sorted(app.sinks)
    return asyncio.run(_run([app.sinks[n] for n in names], args.dsn))


async def _run(sinks: list[PostgresSink], dsn: str | None) -> int:
    from streams_app.postgres.sink import SinkRunner

    runners = [SinkRunner(sink, dsn=dsn) for sink in sinks]
    loop = asyncio.get_running_loop()
    interrupts = 0

    def stop(signame: str) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            log.warning("second %s: exiting at once", signame)
            raise SystemExit(130)
        log.info("%s: finishing the batch being landed, closing", signame)
        for runner in runners:
            runner.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig.name)
    tasks = [asyncio.create_task(runner.run()) for runner in runners]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    for runner in runners:
        runner.request_stop()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()  # raises the first error (printed by main)
    return 0
