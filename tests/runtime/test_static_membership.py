"""Static membership (``group_instance_id``, KIP-345) on the real broker.

A worker with a group instance id is SIGKILLed in the middle of the load (inside open
transactions) and restarted at once on its intact state directory with the same id. The broker
must hand it its tasks back *in the same generation* (a static member that rejoins a stable
group replaces its old member id, no rebalance), which the generation of its JoinGroup answer
shows; a dynamic member would have started a new generation, after waiting for the dead
member's session to expire. Exactly-once must hold across it: the restarted member commits its
offsets under the same generation with a new member id (the dead incarnation's id is fenced,
FENCED_INSTANCE_ID), and its producer's InitProducerId aborts the transaction the kill left
open.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.testing.workers import WorkerProcess
from tests.runtime.eos_checks import check_keyed_sum
from tests.runtime.helpers import KafkaObserver, produce_keyed, wait_until
from tests.runtime.test_crash import worker_env

BEFORE, DURING = 2_000, 2_000
_JOINED = re.compile(r"Joined group '[^']+' \(generation (\d+)\) with member_id (\S+)")


def joined(worker: WorkerProcess) -> tuple[int, str]:
    """The generation and member id of the worker's last JoinGroup answer (this start)."""
    found = _JOINED.findall(worker.log_since_start())
    assert found, f"{worker.name} never joined:\n{worker.tail()}"
    generation, member_id = found[-1]
    return int(generation), member_id


@pytest.mark.slow
async def test_a_static_member_restarted_after_sigkill_takes_its_tasks_back_in_the_same_generation(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    env = worker_env(bootstrap_servers, unique, "exactly_once_v2")
    # Long enough that the restart (process start, imports, opening the stores) lands inside
    # the dead member's session on a loaded machine: the broker then still holds its slot.
    env["STREAMS_APP_SESSION_TIMEOUT"] = "30"
    env["STREAMS_APP_HEARTBEAT_INTERVAL"] = "3"
    env["STREAMS_APP_GROUP_INSTANCE_ID"] = f"w0-{unique}"
    worker = WorkerProcess(
        "tests.runtime.apps.keyed_sum",
        state_dir=tmp_path / "state",
        log_path=tmp_path / "worker.log",
        env=env,
    )
    group, source = f"ks-{unique}", f"ks-in-{unique}"
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()
    ops = OpsAdmin(bootstrap_servers)
    await ops.start()
    try:
        worker.start()
        await asyncio.to_thread(worker.wait_assigned)
        await produce_keyed(bootstrap_servers, source, BEFORE, seed=1)
        await wait_until(
            lambda: observer.committed_equals_end(group, source), timeout=180, interval=0.2
        )
        generation, dead_member = joined(worker)

        producing = asyncio.create_task(produce_keyed(bootstrap_servers, source, DURING, seed=2))

        async def mid_load() -> bool:
            return await observer.end_total(f"ks-echo-{unique}") >= BEFORE + DURING // 4

        await wait_until(mid_load, timeout=120, interval=0.01)
        worker.kill()
        worker.start()
        await asyncio.to_thread(worker.wait_assigned)
        await producing
        await wait_until(
            lambda: observer.committed_equals_end(group, source), timeout=180, interval=0.2
        )

        # The broker's answers: the same generation, a new member id in place of the old one.
        again, member = joined(worker)
        assert again == generation, (
            f"the restart rejoined in generation {again}, not {generation}: it rebalanced"
        )
        assert member != dead_member
        described = await ops.describe_group(group)
        assert described.state == "Stable"
        assert [m.member_id for m in described.members] == [member]
        assert {p for _, p in described.members[0].assignment} == {0, 1, 2, 3}
        assert worker.terminate() == 0, worker.tail()
    finally:
        await ops.close()
        await observer.__aexit__()
        if worker.running:
            worker.kill()

    outcome = await check_keyed_sum(bootstrap_servers, unique, exactly_once=True)
    assert outcome.inputs == BEFORE + DURING
    assert (outcome.duplicates, outcome.missing, outcome.wrong, outcome.extra) == (0, 0, 0, 0), (
        outcome.problems
    )
