"""Agents that never finish a record, or take longer than the transaction may last
(issue 35, items 2 and 3): the processing timeout fails the record, the error policy decides,
every other record is committed exactly once, /ready says why meanwhile, and a stop is bounded.

On the code before the processing timeout each of these hung: the worker waited for the agent
forever (no commit, ``/ready`` true, SIGTERM ignored), or, for an agent slower than the
transaction timeout, the coordinator aborted every transaction and the same records were
processed again and again ("tasks migrated (ProducerFencedError)").
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streams_app import App, WorkerStopped
from streams_app.readback import read_topics, wait_committed
from streams_app.runtime.commit import MIGRATED
from streams_app.runtime.errors_policy import H_ATTEMPTS, H_ERROR_TYPE
from streams_app.runtime.producer import StreamsProducer
from streams_app.testing.workers import WorkerProcess
from streams_app.transport.base import GroupMetadata, ProducerConfig, TopicPartition, TopicSpec
from streams_app.transport.errors import (
    AbortedByCoordinatorError,
    CommitOutcomeUnknownError,
    TransactionTimedOutError,
)
from streams_app.transport.kafka import KafkaTransport
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import running_worker, wait_until

#: Records per test; the one at HANG_AT hangs (or is slow).
RECORDS = 40
HANG_AT = 7


def hanging_app(unique: str, bootstrap: str, *, slow: float | None = None, **settings: Any) -> App:
    """Echo every value; ``hang`` awaits forever (or ``slow`` seconds)."""
    app = App(f"hung-{unique}", broker=bootstrap, topic_partitions=3, **settings)
    source = app.topic(f"in-{unique}", key_type=str, value_type=str)
    echo = app.topic(f"echo-{unique}", key_type=str, value_type=str)

    @app.agent(source)
    async def process(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            if value == "hang":
                if slow is None:
                    await asyncio.Event().wait()
                else:
                    await asyncio.sleep(slow)
            await echo.send(key=key, value=value)

    return app


def values() -> list[tuple[str, str]]:
    return [(f"k{i}", "hang" if i == HANG_AT else f"v{i}") for i in range(RECORDS)]


async def feed(app: App, topic: str) -> None:
    async with app.producer() as producer:
        for key, value in values():
            await producer.send(topic, key=key, value=value)


async def get(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


async def check_exactly_once(bootstrap: str, unique: str, app: App) -> list[Any]:
    """Every record but the hanging one echoed exactly once; returns the dead letters."""
    await wait_committed(bootstrap, app.conf.id, [f"in-{unique}"], outputs=[f"echo-{unique}"])
    data = await read_topics(bootstrap, [f"echo-{unique}", f"in-{unique}.dlq"])
    echoed = Counter(json.loads(r.value) for r in data[f"echo-{unique}"])
    expected = Counter(v for _, v in values() if v != "hang")
    assert echoed == expected
    return data[f"in-{unique}.dlq"]


async def test_a_hung_agent_fails_its_record_and_every_other_record_commits(
    bootstrap_servers: str, unique: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    # Processing times out after 4 s; a commit point missed for 0.5 s (5 intervals) is a stall.
    app = hanging_app(
        unique,
        bootstrap_servers,
        processing_timeout=4.0,
        stall_intervals=5,
        max_retries=1,
        retry_backoff=0.1,
        web_port=0,
    )
    async with running_worker(app, tmp_path / "s") as worker:
        await feed(app, f"in-{unique}")
        # While the agent hangs, longer than the stall bound: not ready, and why.
        await wait_until(lambda: any(s >= 0.6 for _, s in worker.watchdog.busy()), timeout=60)
        assert worker.web_url is not None
        status, body = await get(f"{worker.web_url}/ready")
        assert status == 503, body
        assert body["reason"] == "agent busy"
        hung = body["agents"][0]
        assert hung["agent"] == "process[0]"
        assert hung["record"].startswith(f"in-{unique}[")
        metrics = await get_text(f"{worker.web_url}/metrics")
        assert "streams_app_stuck_agents{" in metrics
        assert 'streams_app_stuck_agents{app="' + app.conf.id + '"} 1.0' in metrics
        dead = await check_exactly_once(bootstrap_servers, unique, app)
        # Back to ready once the record is dead-lettered and the rest committed.
        await wait_until(lambda: get_status(f"{worker.web_url}/ready"), timeout=30)
        assert worker.watchdog.timeouts == 2  # the first attempt and its one retry
    assert len(dead) == 1
    assert dead[0].key == f"k{HANG_AT}".encode()
    assert dead[0].header(H_ERROR_TYPE) == b"ProcessingTimeout"
    assert dead[0].header(H_ATTEMPTS) == b"2"
    timeouts = [
        r.getMessage() for r in caplog.records if "processing_timeout (4s) is up" in r.getMessage()
    ]
    assert len(timeouts) == 2, timeouts


async def get_text(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


async def get_status(url: str) -> bool:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status == 200


async def test_a_hung_agent_under_the_stop_policy_stops_the_worker_naming_the_record(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = hanging_app(
        unique, bootstrap_servers, processing_timeout=2.0, max_retries=0, error_policy="stop"
    )
    with pytest.raises(WorkerStopped) as info:
        async with running_worker(app, tmp_path / "s") as worker:
            await feed(app, f"in-{unique}")
            await asyncio.wait_for(worker.stopped.wait(), 60)
    assert f"in-{unique}[" in str(info.value)
    assert "ProcessingTimeout" in str(info.value)
    # Nothing of the hanging record's transaction is visible; what came before it may be.
    data = await read_topics(bootstrap_servers, [f"echo-{unique}"])
    assert "hang" not in {json.loads(r.value) for r in data[f"echo-{unique}"]}


async def test_an_agent_slower_than_the_transaction_timeout_does_not_livelock(
    bootstrap_servers: str, unique: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    # 6 s on one record, with transactions that time out after 3 s: the processing timeout
    # (derived: 2.34 s) fails the record before the coordinator would abort its transaction.
    app = hanging_app(unique, bootstrap_servers, slow=6.0, transaction_timeout=3.0, max_retries=1)
    assert app.conf.effective_processing_timeout < 3.0
    async with running_worker(app, tmp_path / "s") as worker:
        await feed(app, f"in-{unique}")
        dead = await check_exactly_once(bootstrap_servers, unique, app)
        assert worker.producer.transactions_committed > 0
    assert [r.key for r in dead] == [f"k{HANG_AT}".encode()]
    assert dead[0].header(H_ERROR_TYPE) == b"ProcessingTimeout"
    messages = [r.getMessage() for r in caplog.records]
    named = [m for m in messages if "transaction_timeout (3s)" in m]
    assert len(named) == 2, messages  # each attempt says why it fails before the transaction
    assert not [m for m in messages if "tasks migrated" in m], messages


@pytest.mark.parametrize("fenced_on", ["offsets", "end_txn"])
async def test_a_transaction_the_coordinator_timed_out_is_named_not_taken_for_a_zombie(
    bootstrap_servers: str, unique: str, fenced_on: str
) -> None:
    """What an agent that blocks the event loop (which no timeout can interrupt) leads to: the
    coordinator aborts the transaction at its timeout, and the commit says so. Fenced before
    the EndTxn went out (on the offsets), it is a known abort (``TransactionTimedOutError``:
    rewind and retry, the tasks kept). On the EndTxn itself it is one too: under transaction
    version 2 the coordinator answers a commit on the transaction it aborted INVALID_TXN_STATE
    (``AbortedByCoordinatorError``), which no committed transaction is answered (a fencing
    there, under version 1, would be ``CommitTimedOutError``: an unknown outcome, the committed
    offsets read again)."""
    topic = f"txn-timeout-{unique}"
    await create_topics(bootstrap_servers, TopicSpec(topic, 1, 1))
    transport = KafkaTransport(bootstrap_servers)
    producer = StreamsProducer(
        transport,
        ProducerConfig(
            client_id=f"t-{unique}",
            transactional_id=f"t-{unique}",
            acks="all",
            enable_idempotence=True,
            transaction_timeout_ms=1000,
        ),
    )
    await producer.start()
    try:
        await producer.maybe_begin()
        await producer.send(topic, key=b"k", value=b"v")
        await producer.flush_and_check()
        began = time.monotonic()
        # The embedded broker sweeps timed-out transactions every second: past 1 s + 1 s it
        # has aborted this one (its next epoch fences us).
        await asyncio.sleep(2.5 - (time.monotonic() - began))
        with pytest.raises(TransactionTimedOutError, match="transaction timed out") as raised:
            if fenced_on == "offsets":
                group = GroupMetadata(f"g-{unique}", 1, f"m-{unique}")
                await producer.commit({TopicPartition(topic, 0): 1}, group)
            else:
                await producer.commit({}, None)
        assert not isinstance(raised.value, CommitOutcomeUnknownError), repr(raised.value)
        assert not isinstance(raised.value, MIGRATED), repr(raised.value)
        answered = isinstance(raised.value.__cause__, AbortedByCoordinatorError)
        assert answered == (fenced_on == "end_txn"), repr(raised.value.__cause__)
        # A known abort: the new producer checks what it wrote (its leader wrote the marker).
        await producer.recreate()
        assert (producer.left_open_checks, producer.left_open_aborted) == (1, 0)
    finally:
        await producer.stop()


def test_sigterm_while_an_agent_hangs_exits_within_the_documented_bound(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    shutdown_timeout = 2.0
    env = {
        "STREAMS_APP_BROKER": bootstrap_servers,
        "TEST_SUFFIX": unique,
        # The hang outlasts the stop: the stop must not wait for the processing timeout.
        "STREAMS_APP_TRANSACTION_TIMEOUT": "120",
        "STREAMS_APP_PROCESSING_TIMEOUT": "100",
        "STREAMS_APP_SHUTDOWN_TIMEOUT": str(shutdown_timeout),
    }
    worker = WorkerProcess(
        "tests.runtime.apps.hanging",
        state_dir=tmp_path / "s",
        log_path=tmp_path / "worker.log",
        env=env,
    ).start()
    try:
        worker.wait_started()
        worker.wait_assigned()
        asyncio.run(_send_one(bootstrap_servers, f"hang-in-{unique}", "hang"))
        worker.wait_for_log("the test agent hangs on key")
        asked = time.monotonic()
        code = worker.terminate(timeout=60)
        took = time.monotonic() - asked
    finally:
        worker.kill()
    log = worker.log_since_start()
    # docs/operations.md: within two shutdown_timeout normally; the CLI's hard bound adds 10 s.
    assert took < 2 * shutdown_timeout + 10, (took, worker.tail())
    assert code == 0, worker.tail()  # the graceful path, not the hard bound's forced exit
    assert "did not finish within shutdown_timeout (2s)" in log
    assert "Traceback" not in log


async def _send_one(bootstrap: str, topic: str, value: str) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, key=b"k", value=json.dumps(value).encode())
    finally:
        await producer.stop()
