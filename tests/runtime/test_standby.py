"""Standby replicas on the real broker: the failover of a SIGKILLed worker, and warm-ups.

Two workers of the keyed_sum topology with ``table_standby_replicas=1``: each holds a standby
of the other's tasks. One is SIGKILLed in the middle of the load (inside open transactions);
the survivor must take its tasks over restoring only the changelog tail its standby had not
applied yet (never the whole changelog), and the output must stay exactly once: a standby that
had applied a write of the killed worker's open (then aborted) transaction would give wrong
running sums after the failover, which ``check_keyed_sum`` compares with the input.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from streams_app.testing.workers import WorkerProcess
from tests.runtime.eos_checks import check_keyed_sum
from tests.runtime.helpers import KafkaObserver, keyed_sum_workers, produce_keyed, wait_until
from tests.runtime.test_crash import worker_env

BEFORE = 6_000  # the table the standbys copy before the crash
DURING = 3_000  # the load the crash happens in
KEYS = 100_000  # mostly distinct keys: one changelog record per input (no per-commit coalescing)

_ASSIGNED = re.compile(r"Setting newly assigned partitions (.*) for group")
_PARTITION = re.compile(r"partition=(\d+)")


def last_assignment(worker: WorkerProcess) -> set[int]:
    found = _ASSIGNED.findall(worker.log_since_start())
    assert found, f"{worker.name} logged no assignment:\n{worker.tail()}"
    return {int(p) for p in _PARTITION.findall(found[-1])}


async def assignment(worker: WorkerProcess) -> dict[str, Any]:
    """The worker's ``/assignment``: its tasks, and how each task's table partition was last
    restored (``restored``: the offset its store held, the range read)."""
    url = await asyncio.to_thread(worker.wait_web_url)
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        session.get(f"{url}/assignment") as response,
    ):
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        return body


async def restores(worker: WorkerProcess, name: str = "sums") -> dict[int, dict[str, Any] | None]:
    """Partition of the table ``name`` -> its last restore on ``worker``, for each active
    task."""
    return {
        table["partition"]: table["restored"]
        for task in (await assignment(worker))["tasks"]
        for table in task["tables"]
        if table["table"] == name
    }


async def start_with_standbys(first: WorkerProcess, second: WorkerProcess) -> None:
    """Start ``first``, then ``second``; return once both hold standbys of the other's tasks."""
    first.start()
    await asyncio.to_thread(first.wait_assigned)
    second.start()
    await asyncio.to_thread(second.wait_for_log, "standby tasks: ", 60)
    await asyncio.to_thread(first.wait_for_log, "standby tasks: ", 60)


def assert_resumed(p: int, restore: dict[str, Any] | None) -> None:
    """Restored from the offset the store held (its standby's), not from the beginning."""
    assert restore is not None, f"changelog[{p}]: no restore recorded for its task"
    assert not restore["wiped"] and restore["stored_offset"] == restore["from_offset"] > 0, (
        f"changelog[{p}] was restored from the beginning: {restore}"
    )


@pytest.mark.slow
async def test_failover_to_a_standby_restores_only_the_tail_and_stays_exactly_once(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    env = worker_env(bootstrap_servers, unique, "exactly_once_v2")
    env["STREAMS_APP_TABLE_STANDBY_REPLICAS"] = "1"
    workers = keyed_sum_workers(tmp_path, env, "w0", "w1")
    victim, survivor = workers
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()
    group, source, changelog = f"ks-{unique}", f"ks-in-{unique}", f"ks-{unique}-sums-changelog"
    try:
        # The two-member generation: each worker owns two tasks and stands by for the others.
        await start_with_standbys(victim, survivor)
        await produce_keyed(bootstrap_servers, source, BEFORE, seed=1, keys=KEYS)
        await wait_until(
            lambda: observer.committed_equals_end(group, source), timeout=180, interval=0.2
        )
        moved = last_assignment(victim)
        assert moved and moved.isdisjoint(last_assignment(survivor)), "tasks not split"

        # The kill lands while the first third of the load is being processed (likely inside
        # an open transaction); the rest is written after it, so the moved tasks have input
        # only the survivor can process.
        first = DURING // 3
        producing = asyncio.create_task(
            produce_keyed(bootstrap_servers, source, first, seed=2, keys=KEYS)
        )

        async def mid_load() -> bool:
            return await observer.end_total(f"ks-echo-{unique}") >= BEFORE + first // 2

        await wait_until(mid_load, timeout=120, interval=0.01)
        victim.kill()
        tps = await observer.partitions(changelog)
        ends_at_kill = await observer.consumer.end_offsets(tps)
        await producing
        await produce_keyed(bootstrap_servers, source, DURING - first, seed=3, keys=KEYS)
        await wait_until(
            lambda: observer.committed_equals_end(group, source), timeout=180, interval=0.2
        )
        assert moved <= last_assignment(survivor), "the survivor did not take the tasks over"
        restored = await restores(survivor)
        assert survivor.terminate() == 0, survivor.tail()
    finally:
        await observer.__aexit__()
        for worker in workers:
            if worker.running:
                worker.kill()

    # Tail only: the survivor's restore of each moved changelog partition (as its /assignment
    # reports it, for every task it took over, an empty range included) starts where its
    # standby had got to, not at the beginning (a fresh store starts at 0), reads up to at
    # least what the partition held when the victim died (so it is the failover's restore),
    # and reads a small part of it.
    ends = {tp.partition: end for tp, end in ends_at_kill.items()}
    for p in moved:
        assert_resumed(p, restored.get(p))
        assert restored[p]["to_offset"] >= ends[p], f"changelog[{p}]: {restored[p]}"
    held = sum(ends[p] for p in moved)
    tail = sum(restored[p]["to_offset"] - restored[p]["from_offset"] for p in moved)
    assert held > BEFORE // 4, "the moved tasks' changelogs are unexpectedly short"
    assert tail < held // 2, f"restored {tail} of {held} changelog offsets: not a tail"
    print(f"standby failover: restored {tail} of {held} changelog offsets of tasks {moved}")

    outcome = await check_keyed_sum(bootstrap_servers, unique, exactly_once=True)
    assert outcome.inputs == BEFORE + DURING
    assert (outcome.duplicates, outcome.missing, outcome.wrong, outcome.extra) == (0, 0, 0, 0), (
        outcome.problems
    )


@pytest.mark.slow
async def test_a_worker_behind_warms_up_first_and_takes_tasks_only_once_caught_up(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    """KIP-441's warm-up: a worker joining with no state is not given tasks whose changelogs
    it would have to restore while their owner is caught up; it gets warm-up standbys, and a
    probing rebalance moves the tasks once those caught up, so it restores only a tail."""
    env = worker_env(bootstrap_servers, unique, "exactly_once_v2")
    env.update(
        {
            "STREAMS_APP_TABLE_STANDBY_REPLICAS": "1",
            # 0: only a worker with every committed record counts as caught up (the running
            # owner always does, though its store stops before its last commit marker).
            "STREAMS_APP_ACCEPTABLE_RECOVERY_LAG": "0",
            "STREAMS_APP_PROBING_REBALANCE_INTERVAL": "2",
        }
    )
    owner, newcomer = keyed_sum_workers(tmp_path, env, "owner", "newcomer")
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()
    group, source = f"ks-{unique}", f"ks-in-{unique}"
    try:
        owner.start()
        await asyncio.to_thread(owner.wait_assigned)
        await produce_keyed(bootstrap_servers, source, BEFORE, seed=1, keys=KEYS)
        await wait_until(
            lambda: observer.committed_equals_end(group, source), timeout=180, interval=0.2
        )
        newcomer.start()
        await asyncio.to_thread(newcomer.wait_for_log, "(warm-up)", 60)
        # Its first generation: warm-ups only; the owner, caught up, keeps every task.
        assert last_assignment(newcomer) == set(), newcomer.tail()
        assert last_assignment(owner) == {0, 1, 2, 3}, owner.tail()
        first = await assignment(newcomer)
        assert first["tasks"] == [], first  # nothing active, so nothing restored
        assert {s["task"] for s in first["standbys"]} == {"0_0", "0_1", "0_2", "0_3"}, first

        # The probing rebalance moves tasks to the newcomer. The two workers log that
        # generation's assignment each in its own time (the owner may still be finishing a
        # commit when the newcomer logs its share): wait until their logs agree on a split of
        # the four tasks. An overlap that persisted would time this out; a task processed by
        # both shows in the exactly-once check at the end.
        async def moved() -> bool:
            mine, theirs = last_assignment(newcomer), last_assignment(owner)
            return bool(mine) and mine.isdisjoint(theirs) and mine | theirs == {0, 1, 2, 3}

        await asyncio.to_thread(newcomer.wait_for_log, "probing rebalance", 60)
        await wait_until(moved, timeout=180, interval=0.1)
        taken = last_assignment(newcomer)

        await produce_keyed(bootstrap_servers, source, DURING, seed=2, keys=KEYS)
        await wait_until(
            lambda: observer.committed_equals_end(group, source), timeout=180, interval=0.2
        )
        restored = await restores(newcomer)
        assert newcomer.terminate() == 0, newcomer.tail()
        assert owner.terminate() == 0, owner.tail()
    finally:
        await observer.__aexit__()
        for worker in (owner, newcomer):
            if worker.running:
                worker.kill()

    # The moved tasks were restored from the warm-up's offsets, never from the beginning.
    for p in taken:
        assert_resumed(p, restored.get(p))
    outcome = await check_keyed_sum(bootstrap_servers, unique, exactly_once=True)
    assert outcome.inputs == BEFORE + DURING
    assert (outcome.duplicates, outcome.missing, outcome.wrong, outcome.extra) == (0, 0, 0, 0), (
        outcome.problems
    )
