"""Regression tests for runtime bugs the chaos suite found (each named after what it caught)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from streams_app import App
from streams_app.broker import EmbeddedKafka
from tests.runtime.helpers import produce_keyed, running_worker, wait_until


def echo_app(bootstrap: str, unique: str) -> tuple[App, list[int]]:
    app = App(f"reg-{unique}", broker=bootstrap, topic_partitions=2, topic_replication_factor=3)
    source = app.topic(f"reg-in-{unique}", key_type=str, value_type=int)
    sink = app.topic(f"reg-out-{unique}", key_type=str, value_type=int)
    seen: list[int] = []

    @app.agent(source)
    async def echo(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            await sink.send(key=key, value=value)
            seen.append(value)

    return app, seen


@pytest.mark.cluster
async def test_regression_worker_starts_while_a_broker_is_down(
    kafka_cluster: EmbeddedKafka, unique: str, tmp_path: Path
) -> None:
    """A worker (re)started while one broker of three was dead exited at once: the start-up
    check of the brokers' API versions asked every broker in the metadata, the dead one too
    (NodeNotReadyError). Found by the chaos suite: a SIGTERM'd worker restarted during a
    group-coordinator kill."""
    bootstrap = kafka_cluster.bootstrap_servers
    app, seen = echo_app(bootstrap, unique)
    async with running_worker(app, tmp_path / "state"):
        pass  # creates the topics while every broker is up
    victim = 3
    await asyncio.to_thread(kafka_cluster.kill_node, victim)
    try:
        async with running_worker(app, tmp_path / "state"):
            await produce_keyed(bootstrap, f"reg-in-{unique}", 20, seed=1)
            await wait_until(lambda: len(seen) >= 20, timeout=60)
    finally:
        await asyncio.to_thread(kafka_cluster.start_node, victim)
