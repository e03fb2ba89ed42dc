"""Agent RPC and on_leader timers while the leader worker is SIGKILLed, on the real broker.

Two worker processes run ``apps/rpc_leader``: an agent answers every request by asking another
agent (``ask``, ``join``, ``map``, through Kafka and reply topics), and an ``on_leader`` timer
numbers ticks from a leader table. The worker that holds the leader partition is killed three
times (and restarted). Read ``read_committed``:

- every request has exactly one answer, and it is right (the caller's outputs are exactly-once;
  a replayed record asks again with the same correlation id);
- the ticks are 1..N, each once, none missing: the leader's table write, its tick and the
  leader partition's offset commit in one transaction, so a killed leader's open tick is
  aborted and its successor continues from the committed number.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from streams_app.readback import read_topics
from streams_app.testing.workers import WorkerProcess
from tests.runtime.helpers import KafkaObserver, wait_until

REQUESTS = 240
LEADER = "this worker is the leader"

pytestmark = pytest.mark.kafka


def _worker(bootstrap: str, suffix: str, tmp: Path, name: str) -> WorkerProcess:
    return WorkerProcess(
        "tests.faust_compat.apps.rpc_leader",
        state_dir=tmp / name,
        log_path=tmp / f"{name}.log",
        name=name,
        env={
            "STREAMS_APP_BROKER": bootstrap,
            "STREAMS_APP_SESSION_TIMEOUT": "3",
            "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
            "TEST_SUFFIX": suffix,
        },
    )


def _leader(workers: list[WorkerProcess]) -> WorkerProcess | None:
    """The running worker whose latest assignment made it the leader (it logs so right after
    logging the assignment)."""
    for worker in workers:
        text = worker.log_since_start()
        if worker.running and text.rfind(LEADER) > text.rfind("assigned "):
            return worker
    return None


async def test_rpc_and_leader_timer_survive_leader_kills(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    from aiokafka import AIOKafkaProducer

    workers = [_worker(bootstrap_servers, unique, tmp_path, f"w{i}") for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        await asyncio.to_thread(worker.wait_started)
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, enable_idempotence=True)
    await producer.start()
    kills = 0
    try:
        for i in range(REQUESTS):
            await producer.send(f"rl-in-{unique}", key=f"k{i}".encode(), value=b"%d" % i)
        await producer.flush()
        for _ in range(3):
            await wait_until(lambda: _leader(workers) is not None, timeout=60)
            leader = _leader(workers)
            assert leader is not None
            # Let it tick and answer for a moment, then kill it mid-transaction.
            before = await _committed(bootstrap_servers, f"rl-ticks-{unique}")
            await wait_until(
                lambda b=before: _more(bootstrap_servers, f"rl-ticks-{unique}", b, 3), timeout=60
            )
            leader.kill()
            kills += 1
            leader.start()
            # Started (its SIGTERM handler installed) before anything else happens to it.
            await asyncio.to_thread(leader.wait_started)
        await wait_until(
            lambda: observer.committed_equals_end(f"rl-{unique}", f"rl-in-{unique}"),
            timeout=240,
            interval=0.5,
        )
    finally:
        await producer.stop()
        await observer.__aexit__()
        codes = [w.terminate() for w in workers]
    assert kills == 3
    assert codes == [0, 0], [w.tail() for w in workers]

    out = await read_topics(bootstrap_servers, [f"rl-out-{unique}", f"rl-ticks-{unique}"])
    answers = [json.loads(r.value) for r in out[f"rl-out-{unique}"]]
    by_value: dict[int, list[object]] = {}
    for answer in answers:
        by_value.setdefault(answer[0], []).append(answer)
    assert sorted(by_value) == list(range(REQUESTS))  # every request answered
    duplicated = {v: a for v, a in by_value.items() if len(a) > 1}
    assert not duplicated, f"answered more than once: {list(duplicated.items())[:3]}"
    for value, (answer,) in by_value.items():
        assert answer == [value, value**2, [value**2, (value + 1) ** 2], [(value + 2) ** 2]]
    ticks = sorted(json.loads(r.value) for r in out[f"rl-ticks-{unique}"])
    assert ticks == list(range(1, len(ticks) + 1)), "ticks lost or repeated"
    assert len(ticks) >= 9


async def _committed(bootstrap: str, topic: str) -> int:
    """Committed ticks (end offsets also count transaction markers and aborted records)."""
    return len((await read_topics(bootstrap, [topic]))[topic])


async def _more(bootstrap: str, topic: str, before: int, count: int) -> bool:
    return await _committed(bootstrap, topic) >= before + count
