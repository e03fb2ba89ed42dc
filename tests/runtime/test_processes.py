"""``worker --processes 2``: one supervisor, two worker processes in the app's group.

One child is SIGKILLed in the middle of a steady load. The supervisor starts it again on its
own state directory, the other child goes on processing meanwhile, and a read_committed read
shows every input echoed once and summed once (the exactly-once checks of the crash tests).
The supervisor's /metrics labels every child's series with its process index.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import sys
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from streams_app.testing.workers import WorkerProcess
from tests.runtime.eos_checks import check_keyed_sum
from tests.runtime.helpers import KafkaObserver, wait_until

RECORDS = 24_000
#: Records per second the load is written at: the run lasts long enough for a kill, a restart
#: and a rebalance to happen while records keep arriving for both children.
RATE = 2_000
_SUPERVISOR_URL = re.compile(r"supervisor serving (http://\S+) ")
_CHILD_PID = re.compile(r"worker process (\d) (?:started|restarted) \(pid (\d+)")


async def produce_paced(bootstrap: str, topic: str, count: int, *, seed: int) -> None:
    """``count`` keyed integers (as ``produce_keyed``), ``RATE`` per second."""
    from aiokafka import AIOKafkaProducer

    rng = random.Random(seed)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5
    )
    await producer.start()
    try:
        chunk = RATE // 10
        loop = asyncio.get_running_loop()
        start = loop.time()
        for sent in range(0, count, chunk):
            for _ in range(min(chunk, count - sent)):
                key, value = f"k{rng.randrange(200)}", rng.randrange(10_000)
                await producer.send(topic, key=key.encode(), value=b"%d" % value)
            # On schedule, not a fixed pause: the load's rate does not depend on the machine.
            await asyncio.sleep(max(0.0, start + (sent + chunk) / RATE - loop.time()))
        await producer.flush()
    finally:
        await producer.stop()


def child_pids(supervisor: WorkerProcess) -> dict[int, list[int]]:
    """Every pid each child had, in start order, from the supervisor's log."""
    pids: dict[int, list[int]] = {}
    for index, pid in _CHILD_PID.findall(supervisor.log_since_start()):
        pids.setdefault(int(index), []).append(int(pid))
    return pids


async def records_processed(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """``streams_app_records_processed_total`` by ``process`` label, from the supervisor."""
    async with session.get(f"{url}/metrics") as answer:
        assert answer.status == 200
        text = await answer.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "streams_app_records_processed":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[sample.labels["process"]] = sample.value
    return out


async def tasks_by_process(session: aiohttp.ClientSession, url: str) -> dict[str, int]:
    async with session.get(f"{url}/assignment") as answer:
        body = await answer.json()
    return {index: len(about["tasks"]) for index, about in body.items() if about}


async def test_a_sigkilled_child_is_restarted_and_output_stays_exactly_once(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    supervisor = WorkerProcess(
        "tests.runtime.apps.keyed_sum",
        state_dir=state_dir,
        log_path=tmp_path / "supervisor.log",
        env={
            "STREAMS_APP_BROKER": bootstrap_servers,
            "STREAMS_APP_PROCESSING_GUARANTEE": "exactly_once_v2",
            "STREAMS_APP_SESSION_TIMEOUT": "3",
            "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
            "TEST_SUFFIX": unique,
        },
        argv=[
            sys.executable,
            "-m",
            "streams_app",
            "-A",
            "tests.runtime.apps.keyed_sum",
            "worker",
            "-l",
            "info",
            "--state-dir",
            str(state_dir),
            "--processes",
            "2",
        ],
    )
    supervisor.start()
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()
    try:
        await asyncio.to_thread(supervisor.wait_for_log, "supervisor serving ")
        found = _SUPERVISOR_URL.search(supervisor.log_since_start())
        assert found is not None, supervisor.tail()
        url = found.group(1)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:

            async def both_have_tasks() -> bool:
                tasks = await tasks_by_process(session, url)
                return len(tasks) == 2 and all(n > 0 for n in tasks.values())

            await wait_until(both_have_tasks, timeout=90, interval=0.2)
            assert {p.parent.name for p in state_dir.glob("process-*/*")} == {
                "process-0",
                "process-1",
            }
            producing = asyncio.create_task(
                produce_paced(bootstrap_servers, f"ks-in-{unique}", RECORDS, seed=7)
            )

            # Under load: a third of the input echoed (uncommitted writes included).
            async def a_third_echoed() -> bool:
                return await observer.end_total(f"ks-echo-{unique}") >= RECORDS // 3

            await wait_until(a_third_echoed, timeout=60, interval=0.05)
            before = await records_processed(session, url)
            victim, survivor = child_pids(supervisor)[0][0], child_pids(supervisor)[1][0]
            os.kill(victim, signal.SIGKILL)
            await asyncio.to_thread(supervisor.wait_for_log, "worker process 0 restarted", 30.0)
            during = await records_processed(session, url)
            # The other child went on while process 0 was dead and waiting to be restarted.
            assert during["1"] > before["1"], (before, during)

            await producing
            await wait_until(
                lambda: observer.committed_equals_end(f"ks-{unique}", f"ks-in-{unique}"),
                timeout=180,
                interval=0.2,
            )
            after = await records_processed(session, url)
            assert after["1"] > during["1"], after

            async def both_members_again() -> bool:
                async with session.get(f"{url}/assignment") as answer:
                    body = await answer.json()
                generations = {(body.get(i) or {}).get("generation") for i in ("0", "1")}
                return len(generations) == 1 and None not in generations

            # The restarted child is a member of the group again (whether the assignor gives
            # it tasks back now or at its next probing rebalance is the assignor's choice).
            await wait_until(both_members_again, timeout=60, interval=0.2)
        status = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "streams_app",
            "-A",
            "tests.runtime.apps.keyed_sum",
            "status",
            env=supervisor.env,
            stdout=asyncio.subprocess.PIPE,
        )
        shown, _ = await status.communicate()
        # `status` shows both children, each a member with its own web address.
        assert f"group ks-{unique} is Stable with 2 member(s)" in shown.decode(), shown.decode()
        pids = child_pids(supervisor)
        assert len(pids[0]) == 2 and pids[0][0] == victim, pids
        assert pids[1] == [survivor], pids  # never restarted
        assert supervisor.terminate() == 0, supervisor.tail()
    finally:
        await observer.__aexit__()
        if supervisor.running:
            supervisor.kill()
    log = supervisor.log_since_start()
    assert "killed by SIGKILL" in log
    assert "exiting without a final commit" not in log
    outcome = await check_keyed_sum(bootstrap_servers, unique, exactly_once=True)
    assert outcome.inputs == RECORDS
    assert (outcome.duplicates, outcome.missing, outcome.wrong, outcome.extra) == (0, 0, 0, 0), (
        outcome.problems
    )
