"""``streams-app broker fetch|start|stop|status``."""

from __future__ import annotations

import argparse
import time

#: Where ``broker start`` listens by default, and what apps usually declare.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "broker", parents=parents, help="the embedded Kafka broker for local development"
    )
    actions = parser.add_subparsers(dest="broker_command", required=True)
    actions.add_parser("fetch", help="resolve the Kafka jars from Maven Central (cached)")
    start = actions.add_parser("start", help="start a local broker (keeps running)")
    start.add_argument("--port", type=int, default=9092, help="listener port (0: any free port)")
    start.add_argument("--fresh", action="store_true", help="discard the previous data")
    actions.add_parser("stop", help="stop the local broker")
    actions.add_parser("status", help="is the local broker running?")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: every CLI command (a worker restarting after a crash, say) would otherwise
    # pay for importing the embedded broker's package at start.
    from streams_app.broker import devserver
    from streams_app.broker.jars import broker_libs, kafka_version, tools_classpath

    command = args.broker_command
    if command == "fetch":
        t0 = time.monotonic()
        libs = broker_libs()
        jars = len(list(libs.glob("*.jar")))
        print(f"Kafka {kafka_version()}: {jars} jars in {libs} ({time.monotonic() - t0:.1f}s)")
        t0 = time.monotonic()
        tools = tools_classpath().split(":")[0]
        print(f"Kafka tools (DumpLogSegments, ...): {tools} ({time.monotonic() - t0:.1f}s)")
        return 0
    if command == "start":
        t0 = time.monotonic()
        state = devserver.start(port=args.port, fresh=args.fresh)
        print(
            f"Kafka {kafka_version()} broker running at {state.bootstrap} (pid {state.pid}, "
            f"ready in {time.monotonic() - t0:.1f}s); log: {devserver.log_path()}"
        )
        if state.bootstrap != DEFAULT_BOOTSTRAP:
            # An app run with -A keeps the broker it declares (localhost:9092, say) unless the
            # environment says otherwise (docs/operations.md).
            print(f"export STREAMS_APP_BROKER={state.bootstrap}  # for -A apps and commands")
        return 0
    if command == "stop":
        stopped, found = devserver.stop()
        print(f"broker {found}" if stopped else found)
        return 0
    current, answering = devserver.status()
    if current and answering:
        print(f"running at {current.bootstrap} (pid {current.pid})")
        return 0
    print("not running")
    return 1
