"""A stream-stream join's buffers restored from their input topics (``changelog="input"``) on
the real broker: a worker joins orders, commits them into its buffers, and stops; its state
directory is deleted; payments for those orders come while it is away. Started again, it
restores the orders' buffer from the orders topic itself (no changelog topic of the buffers
exists) and pairs every payment with its order, each pair once, with the later time."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable
from pathlib import Path

import pytest

from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.readback import group_lag, read_topics, wait_committed
from streams_app.testing.workers import WorkerProcess
from tests.joins import input_changelog_app
from tests.joins.data import Rec
from tests.joins.test_vs_kafka_streams import produce
from tests.runtime.helpers import wait_until
from tests.windows.data import BASE
from tests.windows.test_vs_kafka_streams import create_topics

pytestmark = pytest.mark.kafka

ORDERS = 40
#: Recent times: a broker deletes records older than a topic's retention.ms (tests/windows/data.py).
T = BASE


def rec(topic: str, n: int, value: str, ts: int) -> Rec:
    """Record ``n`` of ``topic`` (orders or payments): key ``k<n>``, in the same partition in
    both topics."""
    return Rec(topic, n % 2, f"k{n}", value, ts)


async def send_inputs(bootstrap: str, prefix: str, records: list[Rec]) -> None:
    """``records`` to the app's input topics under ``prefix``, encoded as the app declares them
    (str keys and values)."""
    codecs = input_changelog_app.orders
    await produce(
        bootstrap, prefix, records, key=codecs.key_codec.dumps, value=codecs.value_codec.dumps
    )


async def test_the_buffers_come_back_from_the_inputs_after_the_state_is_lost(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app_id, prefix = f"ic-{unique}", f"icin-{unique}-"
    inputs = [prefix + "orders", prefix + "payments"]
    await create_topics(bootstrap_servers, inputs, 2)
    worker = WorkerProcess(
        "tests.joins.input_changelog_app",
        state_dir=tmp_path / "state",
        log_path=tmp_path / "worker.log",
        env={
            "STREAMS_APP_BROKER": bootstrap_servers,
            "STREAMS_APP_SESSION_TIMEOUT": "3",
            "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
            "JOIN_TEST_APP": app_id,
            "JOIN_TEST_INPUTS": prefix,
        },
    )

    async def drained() -> bool:
        return not await group_lag(bootstrap_servers, app_id, inputs)

    def send(records: list[Rec]) -> Awaitable[None]:
        return send_inputs(bootstrap_servers, prefix, records)

    try:
        # Orders first, each a second apart; one payment that finds its order at once.
        await send([rec("orders", n, f"o{n}", T + n * 1_000) for n in range(ORDERS)])
        await send([rec("payments", 0, "p0", T + 100_000)])
        worker.start()
        await asyncio.to_thread(worker.wait_assigned)
        await wait_until(drained, timeout=60, interval=0.2)
        assert worker.terminate() == 0, worker.tail()
        shutil.rmtree(tmp_path / "state")  # the buffers are gone with it
        # The other payments, while the worker is away: their orders are only in the topic.
        await send([rec("payments", n, f"p{n}", T + 100_000 + n) for n in range(1, ORDERS)])
        worker.start()
        await asyncio.to_thread(worker.wait_assigned)
        await wait_until(drained, timeout=60, interval=0.2)
        assert worker.terminate() == 0, worker.tail()
    finally:
        if worker.running:
            worker.kill()
    log = worker.log_path.read_text()
    await wait_committed(bootstrap_servers, app_id, inputs, outputs=[prefix + "paid"])
    out = (await read_topics(bootstrap_servers, [prefix + "paid"]))[prefix + "paid"]
    paid = input_changelog_app.paid
    got = sorted(
        (paid.key_codec.loads(r.key or b""), paid.value_codec.loads(r.value or b""), r.timestamp)
        for r in out
    )
    assert got == sorted((f"k{n}", f"o{n}+p{n}", T + 100_000 + n) for n in range(ORDERS)), log[
        -3000:
    ]
    async with OpsAdmin(bootstrap_servers) as admin:
        topics = set(await admin.list_topics())
    assert not [t for t in topics if t.startswith(app_id) and t.endswith("-changelog")], topics
