"""``streams-app pipeline [jars|audit|query]``: the Spark data pipeline of the orders topology.

``streams-app pipeline`` runs the pipeline (:mod:`streams_app.spark.pipeline`) locally on
``local[2]`` until Ctrl-C (``--once``: what the topic holds now, then exit), with an embedded
PostgreSQL unless ``--postgres-dsn`` names one. It logs one line per micro-batch and sink, holds
HOME's lock (a second pipeline on the same HOME stops at once), and says where its PostgreSQL
lives and how to query it. If the Spark driver dies under it, it ends with one line saying to
rerun on the same HOME (the checkpoints make the rerun resume), not with Py4J tracebacks.
``streams_app/spark/submit.py`` runs the same command line under ``spark-submit`` on a cluster.
``jars`` prints the Kafka connector jars for ``spark-submit --jars``; ``audit`` runs the audit
job on two topics; ``query`` runs SQL on the pipeline's PostgreSQL (starting the embedded one
on HOME's data directory when no pipeline runs).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: Environment defaults for the options below.
HOME_ENV = "STREAMS_APP_PIPELINE_HOME"
POSTGRES_ENV = "STREAMS_APP_PIPELINE_POSTGRES"
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: What ``pipeline query`` runs when given no SQL.
DEFAULT_QUERY = (
    "SELECT item, hour, reserved_qty, orders FROM reserved_per_item_hour ORDER BY hour, item"
)


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser] | None = None,
) -> None:
    parser = sub.add_parser(
        "pipeline",
        parents=parents or [],
        help="the Spark pipeline of the orders topology (run, jars, audit)",
        description="Run the orders pipeline: committed `inventory` records to Parquet and "
        "to PostgreSQL (reserved quantity per item per hour), exactly once.",
    )
    _add_common(parser, None)
    parser.add_argument("--topic", default="inventory", help="input topic (default inventory)")
    parser.add_argument(
        "--home",
        help=f"checkpoints and Parquet output, a path or URI (default ${HOME_ENV}, else "
        "~/.cache/streams_app/pipeline; /var/lib/streams_app/pipeline as root). On a cluster: "
        "storage the driver and every executor share",
    )
    parser.add_argument(
        "--postgres-dsn",
        help=f"PostgreSQL to write to (default ${POSTGRES_ENV}, else an embedded server "
        "in HOME/postgres)",
    )
    parser.add_argument("--no-postgres", action="store_true", help="write the files only")
    parser.add_argument(
        "--once", action="store_true", help="process what the topic holds now, then exit"
    )
    parser.add_argument(
        "--interval", default="10 seconds", help="micro-batch interval (default '10 seconds')"
    )
    parser.add_argument(
        "--max-offsets-per-trigger", type=int, help="bound on records per micro-batch"
    )
    actions = parser.add_subparsers(dest="pipeline_command")
    jars = actions.add_parser(
        "jars", help="print the Kafka connector jars (resolved once from Maven Central)"
    )
    jars.add_argument("--sep", default=",", help="separator (default ',' as --jars wants)")
    audit = actions.add_parser(
        "audit", help="per input partition: duplicates, missing and aborted records"
    )
    # SUPPRESS: `pipeline --bootstrap X audit` keeps X instead of resetting it to None.
    _add_common(audit, argparse.SUPPRESS)
    audit.add_argument("--input", required=True, help="the topology's input topic")
    audit.add_argument("--output", required=True, help="the output topic to check")
    audit.add_argument("--json", action="store_true", help="print the report as JSON lines")
    query = actions.add_parser(
        "query",
        help="run SQL on the pipeline's PostgreSQL (the embedded one is started on HOME's data "
        "when no pipeline runs)",
    )
    query.add_argument("sql", nargs="?", default=DEFAULT_QUERY, help="default: the totals")
    query.add_argument("--home", default=argparse.SUPPRESS, help="the pipeline's HOME")
    query.add_argument("--postgres-dsn", default=argparse.SUPPRESS, help="a PostgreSQL to query")
    parser.set_defaults(func=run)


def _add_common(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument(
        "--bootstrap",
        default=default,
        help="Kafka bootstrap servers (default $STREAMS_APP_BROKER, else the broker of "
        "`streams-app broker start`, else 127.0.0.1:9092)",
    )
    parser.add_argument(
        "--master",
        default=default,
        help="Spark master (default $STREAMS_APP_SPARK_MASTER, else local[2])",
    )


def run(args: argparse.Namespace) -> int:
    command = getattr(args, "pipeline_command", None)
    if command == "jars":
        from streams_app.spark.jars import connector_jars

        print(args.sep.join(str(jar) for jar in connector_jars()))
        return 0
    if command == "audit":
        return _audit(args)
    if command == "query":
        return _query(args)
    return _run_pipeline(args)


def default_bootstrap() -> str:
    explicit = os.environ.get("STREAMS_APP_BROKER")
    if explicit:
        return explicit.removeprefix("kafka://")
    from streams_app.broker import devserver

    state, answering = devserver.status()
    if state is not None and answering:
        return state.bootstrap
    return "127.0.0.1:9092"


def default_home() -> str:
    explicit = os.environ.get(HOME_ENV)
    if explicit:
        return explicit
    if os.geteuid() == 0:
        # The embedded PostgreSQL runs as the postgres user, which cannot enter /root.
        return "/var/lib/streams_app/pipeline"
    from streams_app.jvm import cache_dir

    return str(cache_dir() / "pipeline")


def _show_progress(args: argparse.Namespace) -> None:
    """Per-batch lines at the default level; Py4J's own error logging off (see _driver_died)."""
    if str(getattr(args, "loglevel", "warning")).lower() in ("warning", "info", "debug"):
        logging.getLogger("streams_app.spark.progress").setLevel(logging.INFO)
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    # Py4J also logs "Exception while sending command." with a traceback through the *root*
    # logger (logging.exception in java_gateway), which its own logger's level does not cover.
    logging.getLogger().addFilter(_NotFromPy4J())


class _NotFromPy4J(logging.Filter):
    """Drops records that Py4J logs through the root logger (the driver's death is one line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def _run_pipeline(args: argparse.Namespace) -> int:
    from streams_app.postgres.server import PostgresServer
    from streams_app.spark.home import PipelineHome, is_local

    bootstrap = args.bootstrap or default_bootstrap()
    home = args.home or default_home()
    dsn = None if args.no_postgres else (args.postgres_dsn or os.environ.get(POSTGRES_ENV))
    if not args.no_postgres and not dsn and not is_local(home):
        print(
            "streams-app: error: --home is a URI; pass --postgres-dsn (or --no-postgres)",
            file=sys.stderr,
        )
        return 2
    _show_progress(args)
    with PipelineHome(home) as lock:  # "another pipeline is using HOME" before anything starts
        server = None
        try:
            if not args.no_postgres and not dsn:
                server = PostgresServer(Path(home) / "postgres").start()
                dsn = server.dsn
                print(
                    f"PostgreSQL (embedded) at {dsn}, data in {server.data_dir} "
                    "(it runs while the pipeline runs)"
                )
            lock.record(dsn)
            code = _run_spark(args, bootstrap, home, dsn)
        finally:
            if server is not None:
                server.stop()
        if dsn and code == 0:
            where = f"in {Path(home) / 'postgres' / 'data'}" if server is not None else f"at {dsn}"
            print(
                f"results: PostgreSQL {where}; query them: "
                f"streams-app pipeline query --home {home}"
                + ("" if server is not None else f" --postgres-dsn {dsn}")
            )
        return code


def _run_spark(args: argparse.Namespace, bootstrap: str, home: str, dsn: str | None) -> int:
    from streams_app.spark.pipeline import OrdersPipeline
    from streams_app.spark.session import driver_alive, spark_session
    from streams_app.spark.sinks import Trigger

    started = time.monotonic()
    spark = spark_session("streams_app-orders-pipeline", args.master)
    print(
        f"Spark {spark.version} ({spark.sparkContext.master}) ready in "
        f"{time.monotonic() - started:.1f}s; reading {args.topic} at {bootstrap}"
    )
    pipeline = OrdersPipeline(
        spark,
        bootstrap,
        home,
        postgres_dsn=dsn,
        topic=args.topic,
        trigger=Trigger(available_now=args.once, interval=args.interval),
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        kafka_options=_security_options(),
    )
    print(f"files: {pipeline.files_path}; checkpoints: {pipeline.checkpoint('')[:-1]}")
    if not args.once:
        print("running until Ctrl-C (or SIGTERM)")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _STOP_SIGNALS}
    try:
        pipeline.run(stop)
        if stop.is_set():
            print("stopped")
        print(f"{pipeline.file_rows().count()} reservations in {pipeline.files_path}")
    except Exception as exc:
        if driver_alive(spark):
            raise
        return _driver_died(spark, home, exc)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if dsn:
        sink = pipeline.postgres_sink()
        with sink.connect() as conn:
            row = conn.execute(
                "SELECT count(*), coalesce(sum(reserved_qty), 0) FROM reserved_per_item_hour"
            ).fetchone()
        if row is not None:
            print(f"{row[0]} item-hours, {row[1]} reserved in reserved_per_item_hour")
    return 0


def _driver_died(spark: Any, home: str, exc: BaseException) -> int:
    """The driver JVM is gone (killed, out of memory): one line, no Py4J tracebacks.

    Nothing is lost: a batch in flight was neither in the checkpoint's commit log nor (files)
    listed in ``_spark_metadata`` nor (PostgreSQL) in the batch table, so a rerun redoes it.
    """
    from streams_app.spark.session import driver_process

    proc = driver_process(spark)
    detail = f"pid {proc.pid}, exit status {proc.returncode}" if proc is not None else "gone"
    print(
        f"streams-app: the Spark driver died ({detail}; {type(exc).__name__}); the checkpoints "
        f"in {home} are intact: rerun with the same --home to resume",
        file=sys.stderr,
    )
    return 1


def _query(args: argparse.Namespace) -> int:
    import psycopg

    from streams_app.ops.render import table
    from streams_app.spark.home import PipelineHome, PipelineHomeBusy, running_pipeline
    from streams_app.spark.postgres_server import PostgresServer

    home = getattr(args, "home", None) or default_home()
    dsn = getattr(args, "postgres_dsn", None) or os.environ.get(POSTGRES_ENV)
    server = None
    lock = PipelineHome(home)
    if not dsn:
        try:
            lock.acquire()
        except PipelineHomeBusy:
            dsn = (running_pipeline(home) or {}).get("postgres_dsn")
            if not dsn:
                raise
        else:
            data = Path(home) / "postgres"
            if not (data / "data" / "PG_VERSION").exists():
                lock.release()
                print(
                    f"streams-app: error: no embedded PostgreSQL in {data}: run the pipeline "
                    "with this --home first (or pass --postgres-dsn)",
                    file=sys.stderr,
                )
                return 2
            server = PostgresServer(data).start()
            dsn = server.dsn
    try:
        with psycopg.connect(dsn, options="-c timezone=UTC") as conn:
            cursor = conn.execute(args.sql)
            if cursor.description is None:
                print(cursor.statusmessage or "done")
                return 0
            headers = [column.name for column in cursor.description]
            rows = cursor.fetchall()
        print(table(headers, rows) if rows else " ".join(headers))
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
        return 0
    finally:
        if server is not None:
            server.stop()
        lock.release()


def _audit(args: argparse.Namespace) -> int:
    from streams_app.spark.audit import audit, format_report
    from streams_app.spark.session import spark_session

    spark = spark_session("streams_app-audit", args.master)
    rows = audit(spark, args.bootstrap or default_bootstrap(), args.input, args.output)
    if args.json:
        for row in rows:
            print(json.dumps(row.as_dict()))
    else:
        print(format_report(rows))
    clean = all(row.exactly_once for row in rows)
    print("exactly once" if clean else "NOT exactly once", file=sys.stderr)
    return 0 if clean else 1


def _security_options() -> dict[str, str]:
    """Kafka security from the same STREAMS_APP_SECURITY_PROTOCOL / SSL_* / SASL_* variables
    the workers read."""
    from streams_app.settings import Settings
    from streams_app.spark.security import kafka_security_options

    return kafka_security_options(Settings.build("streams-app-pipeline", {}))
