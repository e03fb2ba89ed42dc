"""``streams-app -A module worker``: run a worker until SIGTERM or Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

from streams_app.cli.loader import load_app

log = logging.getLogger("streams_app.worker")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser("worker", parents=parents, help="run a worker for the app (-A)")
    parser.add_argument("--state-dir", type=Path, help="state directory (overrides state_dir)")
    parser.add_argument(
        "--web-port", type=int, help="port of the worker's web server (web_port; 0: any free port)"
    )
    parser.add_argument("--web-bind", help="address the web server listens on (web_bind)")
    parser.add_argument(
        "--web-host", help="host name other workers and clients reach this one at (web_host)"
    )
    parser.add_argument(
        "--without-web", action="store_true", help="no web server (web_enabled=False)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    overrides: dict[str, Any] = {}
    if args.state_dir is not None:
        overrides["state_dir"] = args.state_dir
    for name in ("web_port", "web_bind", "web_host"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.without_web:
        overrides["web_enabled"] = False
    return asyncio.run(_run(app, overrides))


async def _run(app: object, overrides: dict[str, Any]) -> int:
    from streams_app.app.app import App

    assert isinstance(app, App)
    worker = app.worker(**overrides)
    loop = asyncio.get_running_loop()
    interrupts = 0

    def stop(signame: str) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            log.warning("second %s: exiting without a final commit", signame)
            raise SystemExit(130)
        log.info("%s: finishing the batch, committing, closing", signame)
        worker.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig.name)
    await worker.run()
    log.info(
        "worker stopped: %d records processed, %d transactions committed",
        worker.records_processed,
        worker.producer.transactions_committed if worker._producer else 0,
    )
    return 0
