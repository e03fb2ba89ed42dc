"""Zombies and rebalances with real worker processes on the real broker.

Zombie: a worker frozen (SIGSTOP) with a transaction open, past the session timeout. A second
worker takes its partitions and processes them. The first is resumed and tries to commit: the
group coordinator rejects its offsets (KIP-447, stale generation) or the transaction coordinator
has already aborted it, and nothing it produced after being fenced is ever visible.

Rebalance: workers join and leave (1 -> 3 -> 1) while records flow.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from streams_app.testing.workers import ASSIGNED, WorkerProcess
from tests.runtime.eos_checks import check_keyed_sum
from tests.runtime.helpers import KafkaObserver, produce_keyed, wait_until

SESSION = "3"


def make_worker(bootstrap: str, suffix: str, tmp: Path, name: str, **env: str) -> WorkerProcess:
    return WorkerProcess(
        "tests.runtime.apps.keyed_sum",
        state_dir=tmp / name,
        log_path=tmp / f"{name}.log",
        name=name,
        env={
            "STREAMS_APP_BROKER": bootstrap,
            "STREAMS_APP_SESSION_TIMEOUT": SESSION,
            "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
            "TEST_SUFFIX": suffix,
            **env,
        },
    )


async def open_transaction_on(observer: KafkaObserver, topic: str) -> bool:
    """Is a transaction open on ``topic`` (high watermark above the last stable offset)?"""
    from aiokafka import AIOKafkaConsumer

    committed = AIOKafkaConsumer(
        bootstrap_servers=observer.bootstrap, isolation_level="read_committed"
    )
    await committed.start()
    try:
        tps = await observer.partitions(topic)
        lso = await committed.end_offsets(tps)
        hw = await observer.consumer.end_offsets(tps)
        return any(hw[tp] > lso[tp] for tp in tps)
    finally:
        await committed.stop()


@pytest.mark.slow
async def test_zombie_is_fenced_and_outputs_stay_exactly_once(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    # A long commit interval keeps a transaction open most of the time, so the freeze lands
    # inside one; the transaction timeout stays above the freeze so KIP-447 does the fencing.
    env = {"STREAMS_APP_COMMIT_INTERVAL": "2", "STREAMS_APP_TRANSACTION_TIMEOUT": "30"}
    zombie = make_worker(bootstrap_servers, unique, tmp_path, "zombie", **env)
    successor = make_worker(bootstrap_servers, unique, tmp_path, "successor", **env)
    async with KafkaObserver(bootstrap_servers) as observer:
        zombie.start()
        try:
            await asyncio.to_thread(zombie.wait_assigned)
            await produce_keyed(bootstrap_servers, f"ks-in-{unique}", 3000, seed=1)
            await wait_until(lambda: open_transaction_on(observer, f"ks-echo-{unique}"), timeout=60)
            zombie.pause()
            successor.start()
            await asyncio.to_thread(successor.wait_assigned)  # after the zombie's session expired
            await produce_keyed(bootstrap_servers, f"ks-in-{unique}", 3000, seed=2)
            group = f"ks-{unique}"
            await wait_until(
                lambda: observer.committed_equals_end(group, f"ks-in-{unique}"), timeout=120
            )
            zombie.resume()
            # The zombie notices it was fenced: its commit is rejected and it rejoins.
            await asyncio.to_thread(zombie.wait_for_log, "tasks migrated", 60)
            await asyncio.to_thread(zombie.wait_assigned, 60, 2)
            await produce_keyed(bootstrap_servers, f"ks-in-{unique}", 2000, seed=3)
            await wait_until(
                lambda: observer.committed_equals_end(group, f"ks-in-{unique}"), timeout=120
            )
            assert successor.terminate() == 0, successor.tail()
            assert zombie.terminate() == 0, zombie.tail()
        finally:
            for w in (zombie, successor):
                if w.running:
                    w.kill()
    log = zombie.log_since_start()
    assert "CommitFailedError" in log or "ProducerFencedError" in log, zombie.tail()
    outcome = await check_keyed_sum(bootstrap_servers, unique, exactly_once=True)
    assert outcome.inputs == 8000
    assert (outcome.duplicates, outcome.missing, outcome.wrong, outcome.extra) == (0, 0, 0, 0), (
        outcome.problems
    )


@pytest.mark.slow
async def test_workers_join_and_leave_one_three_one(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    workers = [make_worker(bootstrap_servers, unique, tmp_path, f"w{i}") for i in range(3)]
    topic = f"ks-in-{unique}"
    async with KafkaObserver(bootstrap_servers) as observer:
        first = workers[0]
        first.start()
        try:
            await asyncio.to_thread(first.wait_assigned)
            producing = asyncio.create_task(produce_in_waves(bootstrap_servers, topic))
            for w in workers[1:]:
                w.start()
                await asyncio.to_thread(w.wait_assigned)
            for w in workers[1:]:
                assert w.terminate() == 0, w.tail()  # graceful leave: commit, then go
            await producing
            await wait_until(
                lambda: observer.committed_equals_end(f"ks-{unique}", topic), timeout=120
            )
            assert first.terminate() == 0, first.tail()
        finally:
            for w in workers:
                if w.running:
                    w.kill()
    assert first.log_count(ASSIGNED) >= 3  # 1 -> 2 -> 3 -> 2 -> 1 members, eagerly
    outcome = await check_keyed_sum(bootstrap_servers, unique, exactly_once=True)
    assert outcome.inputs == 10 * 1500
    assert (outcome.duplicates, outcome.missing, outcome.wrong, outcome.extra) == (0, 0, 0, 0), (
        outcome.problems
    )


async def produce_in_waves(bootstrap: str, topic: str) -> None:
    for wave in range(10):
        await produce_keyed(bootstrap, topic, 1500, seed=100 + wave)
        await asyncio.sleep(0.3)  # spread the input over the membership changes
