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
