"""``streams-app outbox init|relay|status``: the outbox relay, PostgreSQL -> Kafka.

``init`` creates the outbox tables (idempotent); ``relay`` publishes the outbox to Kafka until
SIGTERM (exactly once by default; ``--guarantee at_least_once`` is the seed's relay, for
comparison); ``status`` prints, as JSON, what waits in the outbox and who holds the oldest
transaction. The database comes from ``--dsn``, else ``STREAMS_APP_POSTGRES_DSN``, else the
``postgres_dsn`` of the app named with ``-A``; the broker from ``--broker``, else the app's,
else ``STREAMS_APP_BROKER`` (security settings from ``STREAMS_APP_*`` as for workers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
from typing import Any

from streams_app.errors import ConfigError
from streams_app.settings import ENV_PREFIX, Settings

log = logging.getLogger("streams_app.outbox")

DSN_ENV = ENV_PREFIX + "POSTGRES_DSN"


def add_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = sub.add_parser(
        "outbox", parents=parents, help="the outbox relay: PostgreSQL -> Kafka, exactly once"
    )
    actions = parser.add_subparsers(dest="outbox_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dsn", help=f"the database (default ${DSN_ENV}, else the app's)")
        p.add_argument("--table", default="outbox", help="the outbox table (default outbox)")

    init = actions.add_parser("init", parents=parents, help="create the outbox tables")
    common(init)
    init.set_defaults(func=run_init)

    relay = actions.add_parser("relay", parents=parents, help="publish the outbox to Kafka")
    common(relay)
    relay.add_argument("--broker", help="Kafka bootstrap servers (default: the app's, else env)")
    relay.add_argument(
        "--guarantee",
        default="exactly_once",
        choices=("exactly_once", "exactly_once_v2", "at_least_once"),
        help="exactly_once (default) or at_least_once (the seed's send().get() relay)",
    )
    relay.add_argument("--batch-size", type=int, default=5000, help="events per transaction")
    relay.add_argument("--poll-interval", type=float, default=0.05, help="seconds, when idle")
    relay.add_argument("--progress-topic", help="default streams-app-outbox-progress-<relay id>")
    relay.add_argument("--replication-factor", type=int, help="of the progress topic")
    relay.add_argument("--transaction-timeout", type=float, default=30.0, help="seconds")
    relay.add_argument(
        "--hold-warning",
        type=float,
        default=30.0,
        help="warn when an open transaction holds the relay back this long (seconds)",
    )
    relay.set_defaults(func=run_relay)

    status = actions.add_parser("status", parents=parents, help="what waits in the outbox")
    common(status)
    status.set_defaults(func=run_status)


def _app_settings(args: argparse.Namespace) -> Settings | None:
    spec = getattr(args, "app", None)
    if not spec:
        return None
    from streams_app.cli.loader import load_app

    return load_app(spec).conf


def resolve_dsn(args: argparse.Namespace) -> str:
    conf = _app_settings(args)
    dsn = args.dsn or os.environ.get(DSN_ENV) or (conf.postgres_dsn if conf else None)
    if not dsn:
        raise ConfigError(
            "postgres_dsn", "no database given", f"pass --dsn, set {DSN_ENV}, or use -A app"
        )
    return dsn


def run_init(args: argparse.Namespace) -> int:
    return asyncio.run(_init(resolve_dsn(args), args.table))


async def _init(dsn: str, table: str) -> int:
    from streams_app.postgres import schema
    from streams_app.postgres.connection import connect, describe

    conn = await connect(dsn, what="outbox init", attempts=1)
    try:
        relay_id = await schema.init_outbox(conn, table)
    finally:
        await conn.close()
    print(f"outbox {table} ready at {describe(dsn)} (relay id {relay_id})")
    return 0


def run_relay(args: argparse.Namespace) -> int:
    from streams_app.postgres.relay import EXACTLY_ONCE, OutboxRelay, RelayConfig
    from streams_app.transport.kafka import KafkaTransport

    conf = _app_settings(args)
    if conf is None or args.broker:
        overrides = {"broker": args.broker} if args.broker else {}
        conf = Settings.build("streams-app-outbox-relay", overrides)
    guarantee = EXACTLY_ONCE if args.guarantee.startswith("exactly_once") else args.guarantee
    config = RelayConfig(
        dsn=resolve_dsn(args),
        table=args.table,
        guarantee=guarantee,
        batch_size=args.batch_size,
        poll_interval=args.poll_interval,
        progress_topic=args.progress_topic,
        replication_factor=args.replication_factor or conf.topic_replication_factor,
        transaction_timeout=args.transaction_timeout,
        hold_warning=args.hold_warning,
    )
    relay = OutboxRelay(config, KafkaTransport(conf.bootstrap_servers, security=conf.security()))
    return asyncio.run(_run_relay(relay))


async def _run_relay(relay: Any) -> int:
    loop = asyncio.get_running_loop()

    def stop(signame: str) -> None:
        log.info("%s: finishing the transaction in flight, closing", signame)
        relay.request_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig.name)
    await relay.run()
    return 0


def run_status(args: argparse.Namespace) -> int:
    print(json.dumps(asyncio.run(outbox_status(resolve_dsn(args), args.table)), indent=2))
    return 0


async def outbox_status(dsn: str, table: str) -> dict[str, Any]:
    """What waits in the outbox, and who holds the oldest transaction in the cluster."""
    from streams_app.postgres.connection import connect, describe
    from streams_app.postgres.horizon import oldest_xid_holder
    from streams_app.postgres.schema import OutboxNames, literal, outbox_relay_id

    names = OutboxNames(table)
    conn = await connect(dsn, what="outbox status", autocommit=True, attempts=1)
    try:
        relay_id = await outbox_relay_id(conn, table)
        cur = await conn.execute(
            f"""SELECT count(*), extract(epoch FROM now() - min(created_at))::float8,
                       coalesce(pg_sequence_last_value({literal(names.sequence)}), 0)
                FROM {names.table} WHERE published_at IS NULL"""
        )
        row = await cur.fetchone()
        assert row is not None
        holder = await oldest_xid_holder(conn)
    finally:
        await conn.close()
    return {
        "outbox": table,
        "database": describe(dsn),
        "relay_id": relay_id,
        "events_waiting": row[0],
        "oldest_waiting_seconds": None if row[1] is None else round(row[1], 1),
        "latest_commit_number": row[2],
        "oldest_xid_holder": holder.describe() if holder else None,
    }
