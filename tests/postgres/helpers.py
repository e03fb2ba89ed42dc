"""Shared pieces of the database-edge tests: running sinks and relays in-process, reading back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from streams_app.app.postgres import PostgresSink
from streams_app.postgres.relay import OutboxRelay, RelayConfig
from streams_app.postgres.sink import SinkRunner
from streams_app.transport.kafka import KafkaTransport


@contextlib.asynccontextmanager
async def running(runner: Any, timeout: float = 60.0) -> AsyncIterator[Any]:
    """Run a SinkRunner or OutboxRelay as a task until the block ends (then stop it)."""
    task = asyncio.create_task(runner.run())
    started = asyncio.create_task(runner.started.wait())
    done, _ = await asyncio.wait(
        {task, started}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
    )
    if task in done:
        started.cancel()
        task.result()
    if started not in done:
        task.cancel()
        raise TimeoutError("did not start in time")
    try:
        yield runner
    finally:
        runner.request_stop()
        await asyncio.wait_for(task, 60)


def sink_runner(sink: PostgresSink, dsn: str) -> SinkRunner:
    return SinkRunner(sink, dsn=dsn)


def relay(dsn: str, bootstrap: str, **config: Any) -> OutboxRelay:
    return OutboxRelay(RelayConfig(dsn=dsn, **config), KafkaTransport(bootstrap))


async def query(dsn: str, sql: str, params: Any = None) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute(sql, params)
        return list(await cur.fetchall()) if cur.description else []


#: The advisory lock a held commit waits for (see :func:`hold_commits_that_ask`).
HOLD_LOCK = 4242


async def hold_commits_that_ask(conn: psycopg.AsyncConnection[Any]) -> None:
    """A deferred trigger on the outbox that fires at COMMIT after the one numbering the
    transaction (deferred triggers fire in name order) and, in a transaction that ran
    :data:`ASK_HOLD`, waits for advisory lock :data:`HOLD_LOCK`. Hold the lock and such a
    commit has taken its number but is not visible until the lock is released."""
    await conn.execute(
        "CREATE FUNCTION hold_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF current_setting('test.hold_commit', true) = 'on' THEN "
        f"PERFORM pg_advisory_xact_lock({HOLD_LOCK}); END IF; RETURN NULL; END $$"
    )
    await conn.execute(
        "CREATE CONSTRAINT TRIGGER zz_hold AFTER INSERT ON outbox DEFERRABLE INITIALLY "
        "DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_commit()"
    )


#: Run in a transaction to have its commit held (:func:`hold_commits_that_ask`).
ASK_HOLD = "SELECT set_config('test.hold_commit', 'on', true)"


async def commit_is_held(
    conn: psycopg.AsyncConnection[Any], writer: psycopg.AsyncConnection[Any]
) -> bool:
    """Is ``writer``'s commit waiting at the hold?"""
    cur = await conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND objid = %s AND pid = %s",
        (HOLD_LOCK, writer.info.backend_pid),
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def close_after_hold(
    holder: psycopg.AsyncConnection[Any],
    committing: asyncio.Task[None] | None,
    *others: psycopg.AsyncConnection[Any],
) -> None:
    """End a held-commit test whatever happened: close ``holder`` (which releases the hold, a
    session lock, should a check have failed), let the held commit finish, close the rest."""
    await holder.close()
    if committing is not None:
        with contextlib.suppress(Exception):
            await committing
    for conn in others:
        await conn.close()
