"""The PostgreSQL sink as real processes under faults (issue 13, "Done when" 1 and 2).

1. >= 20,000 records in committed (and aborted) Kafka transactions while the sink process is
   SIGKILLed 3 times (twice from outside at random moments, once by a crash point between its
   database writes and COMMIT) and restarted: ``landed`` holds every committed record exactly
   once, the offsets table points exactly past the last landed record of each partition, and
   nothing of an aborted or still-open transaction ever lands.
2. A sink frozen (SIGSTOP) inside its database transaction past its session timeout; a second
   sink takes over and commits; the first resumes: its commit is refused by the generation
   check, it rolls back and rejoins; no duplicate row.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from aiokafka import AIOKafkaProducer

from streams_app.testing.workers import WorkerProcess
from tests.postgres.helpers import query
from tests.runtime.helpers import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.postgres, pytest.mark.slow]

RECORDS = 20_000
APP = "tests.postgres.apps.sink_app"


def sink_process(
    bootstrap: str, dsn: str, suffix: str, tmp: Path, name: str = "sink", **env: str
) -> WorkerProcess:
    return WorkerProcess(
        APP,
        state_dir=tmp / name,
        log_path=tmp / f"{name}.log",
        name=name,
        argv=[
            sys.executable,
            "-m",
            "streams_app",
            "-A",
            APP,
            "sink",
            "-l",
            "info",
        ],
        env={
            "STREAMS_APP_BROKER": bootstrap,
            "STREAMS_APP_POSTGRES_DSN": dsn,
            "STREAMS_APP_SESSION_TIMEOUT": "3",
            "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
            "TEST_SUFFIX": suffix,
            **env,
        },
    )


class TxnFeeder:
    """Writes values in Kafka transactions and remembers where the committed ones landed."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str) -> None:
        self.topic = topic
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=txn_id, linger_ms=5
        )
        self.committed: list[tuple[int, int, str]] = []  # (partition, offset, value)
        self.aborted: list[str] = []

    async def __aenter__(self) -> TxnFeeder:
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()

    async def transaction(self, values: list[tuple[str, str]], *, commit: bool) -> None:
        async with self.producer.transaction() if commit else _aborting(self.producer):
            futures = [
                await self.producer.send(self.topic, key=k.encode(), value=v.encode())
                for k, v in values
            ]
        if commit:
            for (_, v), fut in zip(values, futures, strict=True):
                md = fut.result()
                self.committed.append((md.partition, md.offset, v))
        else:
            self.aborted.extend(v for _, v in values)


class _aborting:
    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> None:
        await self.producer.begin_transaction()

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.flush()
        await self.producer.abort_transaction()


async def landed_count(dsn: str) -> int:
    try:
        return int((await query(dsn, "SELECT count(*) FROM landed"))[0][0])
    except psycopg.errors.UndefinedTable:
        return 0


def check_exactly_once(rows: list[Any], committed: list[tuple[int, int, str]]) -> None:
    counts = Counter((p, o, v) for p, o, v in rows)
    duplicates = {k: n for k, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} records landed more than once"
    assert set(counts) == set(committed), (
        f"missing {len(set(committed) - set(counts))}, extra {len(set(counts) - set(committed))}"
    )


async def check_offsets(dsn: str, group: str, rows: list[Any]) -> None:
    last: dict[int, int] = {}
    for p, o, _ in rows:
        last[p] = max(last.get(p, -1), o)
    stored = await query(
        dsn,
        "SELECT partition, next_offset FROM streams_app_offsets WHERE group_id = %s",
        (group,),
    )
    assert {p: n for p, n in stored if n is not None} == {p: o + 1 for p, o in last.items()}


async def test_sink_exactly_once_through_three_sigkills(
    bootstrap_servers: str, postgres_dsn: str, unique: str, tmp_path: Path
) -> None:
    seed = random.randrange(1_000_000)
    rng = random.Random(seed)
    topic = f"pgs-in-{unique}"
    sink = sink_process(bootstrap_servers, postgres_dsn, unique, tmp_path)
    sink.start()
    try:
        await asyncio.to_thread(sink.wait_assigned)  # the sink created the topic
        async with TxnFeeder(bootstrap_servers, topic, f"feeder-{unique}") as feeder:

            async def feed() -> None:
                n = 0
                while n < RECORDS:
                    size = min(rng.randrange(50, 400), RECORDS - n)
                    values = [(f"k{rng.randrange(100)}", f"c-{n + i}") for i in range(size)]
                    await feeder.transaction(values, commit=True)
                    n += size
                    if rng.random() < 0.2:
                        junk = [(f"k{rng.randrange(100)}", f"a-{n}-{i}") for i in range(50)]
                        await feeder.transaction(junk, commit=False)
                    await asyncio.sleep(0.02)  # pacing: spread the input over the kills

            feeding = asyncio.create_task(feed())
            thresholds = sorted(rng.uniform(0.1, 0.7) for _ in range(2))
            # kill 1: SIGKILL from outside at a random point
            await wait_until(
                lambda: _landed_at_least(postgres_dsn, int(RECORDS * thresholds[0])), timeout=120
            )
            sink.kill()
            # kill 2: the sink kills itself after its writes and the offsets update, before COMMIT
            sink.env["STREAMS_APP_TEST_CRASH_AT"] = f"sink.before_commit:{rng.randrange(2, 6)}"
            sink.start()
            await asyncio.to_thread(sink.wait_assigned)
            assert await asyncio.to_thread(_wait_exit, sink) == -9, sink.tail()
            del sink.env["STREAMS_APP_TEST_CRASH_AT"]
            sink.start()
            await asyncio.to_thread(sink.wait_assigned)
            # kill 3: SIGKILL from outside again
            await wait_until(
                lambda: _landed_at_least(postgres_dsn, int(RECORDS * thresholds[1])), timeout=120
            )
            sink.kill()
            sink.start()
            await asyncio.to_thread(sink.wait_assigned)
            await feeding
            # A transaction left open at the end: the sink must not land it (read_committed).
            async with TxnFeeder(bootstrap_servers, topic, f"open-{unique}") as hanging:
                await hanging.producer.begin_transaction()
                for i in range(200):
                    await hanging.producer.send(
                        topic, key=f"k{i}".encode(), value=f"o-{i}".encode()
                    )
                await hanging.producer.flush()
                await wait_until(lambda: _landed_at_least(postgres_dsn, RECORDS), timeout=180)
                await hanging.producer.abort_transaction()
            # One more committed transaction after the aborted one: it lands, the rest does not.
            await feeder.transaction([("k0", "c-last")], commit=True)
            await wait_until(lambda: _landed_at_least(postgres_dsn, RECORDS + 1), timeout=120)
        assert sink.terminate() == 0, sink.tail()
    finally:
        if sink.running:
            sink.kill()
    assert sink.starts == 4  # the first start and one after each of the 3 SIGKILLs
    rows = await query(postgres_dsn, "SELECT partition, kafka_offset, v FROM landed")
    assert len(rows) == RECORDS + 1, f"seed {seed}"
    assert not [v for _, _, v in rows if not v.startswith("c-")], "aborted or open records landed"
    check_exactly_once(rows, feeder.committed)
    await check_offsets(postgres_dsn, f"pgs-{unique}-sink-landed", rows)


def _wait_exit(process: WorkerProcess, timeout: float = 120.0) -> int | None:
    assert process.process is not None
    return process.process.wait(timeout)


async def _landed_at_least(dsn: str, n: int) -> bool:
    return await landed_count(dsn) >= n


async def test_sink_zombie_commit_is_refused(
    bootstrap_servers: str, postgres_dsn: str, unique: str, tmp_path: Path
) -> None:
    lock = random.randrange(1, 1_000_000)
    topic = f"pgs-in-{unique}"
    zombie = sink_process(
        bootstrap_servers, postgres_dsn, unique, tmp_path, "zombie", TEST_HOLD_LOCK=str(lock)
    )
    successor = sink_process(bootstrap_servers, postgres_dsn, unique, tmp_path, "successor")
    holder = await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True)
    await holder.execute("SELECT pg_advisory_lock(%s)", (lock,))
    try:
        zombie.start()
        await asyncio.to_thread(zombie.wait_assigned)
        async with TxnFeeder(bootstrap_servers, topic, f"feeder-{unique}") as feeder:
            await feeder.transaction([(f"k{i}", f"c-{i}") for i in range(1000)], commit=True)
            await wait_until(lambda: _landed_at_least(postgres_dsn, 1000), timeout=60)
            await feeder.transaction([("hold", "HOLD")], commit=True)
            # The zombie's handler inserted its batch and now waits for our lock, inside its
            # transaction: freeze it there, then let the lock go (it gets it while frozen).
            await wait_until(lambda: _waiting_for_advisory_lock(holder, lock), timeout=60)
            zombie.pause()
            await holder.execute("SELECT pg_advisory_unlock(%s)", (lock,))
            successor.start()
            await asyncio.to_thread(successor.wait_assigned, 60)  # after the session timeout
            await feeder.transaction([(f"k{i}", f"c-{1000 + i}") for i in range(500)], commit=True)
            await wait_until(lambda: _landed_at_least(postgres_dsn, 1501), timeout=60)
            zombie.resume()
            await asyncio.to_thread(zombie.wait_for_log, "commit refused", 60)
            await asyncio.to_thread(zombie.wait_assigned, 60, 2)  # rejoined the group
            await feeder.transaction([(f"k{i}", f"c-{1500 + i}") for i in range(500)], commit=True)
            await wait_until(lambda: _landed_at_least(postgres_dsn, 2001), timeout=60)
        assert successor.terminate() == 0, successor.tail()
        assert zombie.terminate() == 0, zombie.tail()
    finally:
        await holder.close()
        for process in (zombie, successor):
            if process.running:
                process.kill()
    log = zombie.log_since_start()
    assert "is owned by generation" in log, zombie.tail()
    rows = await query(postgres_dsn, "SELECT partition, kafka_offset, v FROM landed")
    check_exactly_once(rows, feeder.committed)
    await check_offsets(postgres_dsn, f"pgs-{unique}-sink-landed", rows)


async def _waiting_for_advisory_lock(conn: psycopg.AsyncConnection[Any], lock: int) -> bool:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND ((classid::bigint << 32) | objid::bigint) = %s",
        (lock,),
    )
    row = await cur.fetchone()
    return bool(row and row[0])
