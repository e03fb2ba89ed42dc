"""``streams-app -A module worker``: run a worker until SIGTERM or Ctrl-C.

``--processes N`` (or ``auto``: one per CPU) runs N workers of the app under one supervisor
(:mod:`streams_app.cli.supervisor`); each child is this same command with ``--process-index``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from streams_app.cli.loader import load_app
from streams_app.cli.supervisor import (
    ChildSpec,
    Supervisor,
    child_command_line,
    parse_processes,
    plan_children,
)
from streams_app.errors import StreamsAppError
from streams_app.settings import ENV_PREFIX

log = logging.getLogger("streams_app.worker")


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser("worker", parents=parents, help="run a worker for the app (-A)")
    parser.add_argument("--state-dir", type=Path, help="state directory (overrides state_dir)")
    # Faust's worker options, so `faust -A app worker ...` command lines keep working.
    parser.add_argument("-D", "--datadir", type=Path, help="Faust's name for --state-dir")
    parser.add_argument("-W", "--workdir", type=Path, help="change to this directory first")
    parser.add_argument("-f", "--logfile", type=Path, help="write the log to this file")
    parser.add_argument(
        "-p", "--web-port", type=int, help="port of the worker's web server (web_port; 0: any)"
    )
    parser.add_argument("-b", "--web-bind", help="address the web server listens on (web_bind)")
    parser.add_argument(
        "--web-host", help="host name other workers and clients reach this one at (web_host)"
    )
    parser.add_argument("--with-web", dest="web", action="store_true", default=None)
    parser.add_argument(
        "--without-web", dest="web", action="store_false", help="no web server (web_enabled=False)"
    )
    parser.add_argument(
        "--processes",
        metavar="N",
        help="run N worker processes of the app (auto: one per CPU) under one supervisor, "
        "each with its own state dir (<state_dir>/process-<i>) and web port (web_port + 1 + i; "
        "the supervisor serves web_port for all of them); see docs/operations.md",
    )
    # Set by the supervisor on each child's command line: logged with every line.
    parser.add_argument("--process-index", type=int, help=argparse.SUPPRESS)
    for ignored in ("--web-transport", "--blocking-timeout", "--console-port", "--loop", "-L"):
        parser.add_argument(ignored, help=argparse.SUPPRESS)
    for flag in ("--debug", "--no-debug", "-q", "--quiet", "--no-quiet", "--json"):
        parser.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    target = getattr(args, "streams_app_target", None)
    if args.workdir is not None:
        os.chdir(args.workdir)
    app = target if target is not None else load_app(args.app)
    if args.logfile is not None:
        handler = logging.FileHandler(args.logfile)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(handler)
    overrides: dict[str, Any] = {}
    state_dir = args.state_dir or args.datadir
    if state_dir is not None:
        overrides["state_dir"] = state_dir
    if args.web_port is not None:
        overrides["web_port"] = args.web_port
    if args.web_bind is not None:
        overrides["web_bind"] = args.web_bind
    if args.web_host is not None:
        overrides["web_host"] = args.web_host
    if args.web is not None:
        overrides["web_enabled"] = args.web
    if args.processes is not None and args.process_index is None:
        # Even --processes 1: one child, kept running by the supervisor (restarted if it dies).
        processes = parse_processes(args.processes)
        argv = getattr(args, "command_line", None)
        return asyncio.run(supervise(app, overrides, processes, argv, target))
    if args.process_index is not None:
        _label_log_lines(args.process_index)
    return asyncio.run(_run(app, overrides))


#: Seconds beyond two ``shutdown_timeout`` after which a stop that has not ended (an agent
#: blocking the event loop itself) ends the process anyway.
HARD_STOP_GRACE_S = 10.0
#: The exit status of that forced exit (sysexits' EX_SOFTWARE).
HARD_STOP_STATUS = 70


def _hard_stop(seconds: float) -> None:
    """Runs on a thread: the event loop may be the thing that is stuck."""
    sys.stderr.write(
        f"streams-app: the worker did not stop within {seconds:g}s of the signal (an agent "
        "blocking the event loop?); exiting now: its open transaction was not committed, and "
        "read_committed readers never see it\n"
    )
    sys.stderr.flush()
    os._exit(HARD_STOP_STATUS)


def _label_log_lines(index: int) -> None:
    """A child of the supervisor: its log lines say which process wrote them."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s [process {index}] %(name)s: %(message)s")
        )


async def supervise(
    app: object,
    overrides: dict[str, Any],
    processes: int,
    argv: list[str] | None,
    target: object,
) -> int:
    """``--processes N``: the supervisor, with its web server when the workers have one."""
    from streams_app.app.app import App
    from streams_app.cli.supervisor_web import SupervisorWeb
    from streams_app.runtime.web.server import advertised_host

    assert isinstance(app, App)
    if argv is None:
        raise StreamsAppError("worker --processes needs the command line it was started with")
    # The settings every child will run with (a wrong one stops here, before any child starts).
    conf = app.conf.replace(**overrides) if overrides else app.conf
    specs = plan_children(
        processes,
        state_dir=conf.state_dir,
        web_enabled=conf.web_enabled,
        web_port=conf.web_port,
        group_instance_id=conf.group_instance_id,
    )

    def environment(spec: ChildSpec) -> dict[str, str]:
        if spec.group_instance_id is None:
            return {}
        return {ENV_PREFIX + "GROUP_INSTANCE_ID": spec.group_instance_id}

    supervisor = Supervisor(
        specs,
        lambda spec, port: child_command_line(
            argv, module_cli=target is None, spec=spec, port=port
        ),
        environment,
        web_bind=conf.web_bind,
    )
    web = None
    if conf.web_enabled:
        web = SupervisorWeb(
            supervisor,
            app_id=conf.id,
            bind=conf.web_bind,
            port=conf.web_port,
            host=advertised_host(conf.web_bind, conf.web_host),
        )
        await web.start()
    try:
        return await supervisor.run()
    finally:
        if web is not None:
            await web.stop()


async def _run(app: object, overrides: dict[str, Any]) -> int:
    from streams_app.app.app import App

    assert isinstance(app, App)
    worker = app.worker(**overrides)
    loop = asyncio.get_running_loop()
    interrupts = 0
    # The worker stops within two shutdown_timeout (runtime/stopping.py); this bounds even an
    # agent that blocks the event loop, so a second signal is never needed.
    bound = 2 * worker.conf.shutdown_timeout + HARD_STOP_GRACE_S
    hard_stop = threading.Timer(bound, _hard_stop, (bound,))
    hard_stop.daemon = True

    def stop(signame: str) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            log.warning("second %s: exiting without a final commit", signame)
            raise SystemExit(130)
        log.info("%s: finishing the batch, committing, closing", signame)
        hard_stop.start()
        worker.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig.name)
    try:
        await worker.run()
    finally:
        hard_stop.cancel()
    log.info(
        "worker stopped: %d records processed, %d transactions committed",
        worker.records_processed,
        worker.transactions_committed,
    )
    return 0
