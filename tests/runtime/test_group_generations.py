"""A group under the streams_app assignor settles: one JoinGroup round per rebalance, then one
generation for as long as nobody joins or leaves, on the real broker.

Three workers of the keyed_sum topology with ``table_standby_replicas=1`` (so the runtime
offers its own ``streams_app`` protocol first and ``range`` second). aiokafka 0.14 sent one
JoinGroup per offered protocol at every join; each completed a round of its own, and once two
members' requests fell out of step the group alternated generations every few hundred
milliseconds without end (``streams_app.kafka.consumer._SingleJoinRebalance``). Here:

- every generation the broker forms is one each member that stayed in the group took part
  in: the generations of one member's JoinGroup answers follow each other (1, 2, 3, ...; with
  two JoinGroups per join they went 2, 4, 6, ...);
- once all three are in, the group keeps that generation (broker: Stable, the same three
  member ids; no worker joins again) while the workers process a load to its end.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.testing.workers import WorkerProcess
from tests.runtime.helpers import KafkaObserver, keyed_sum_workers, produce_keyed, wait_until
from tests.runtime.test_crash import worker_env

_JOINED = re.compile(r"Joined group '[^']+' \(generation (\d+)\) with member_id (\S+)")
#: The worker's own line once its assignment is set up (``wait_assigned`` also matches
#: aiokafka's "Revoking previously assigned partitions", logged before the first join).
_ASSIGNED = re.compile(r"assigned \d+ partitions \(")
RECORDS = 3_000
#: How long the settled group is watched at least (while it processes the load).
HOLD = 10.0


def joins(worker: WorkerProcess) -> list[tuple[int, str]]:
    """(generation, member id) of every JoinGroup answer the worker got, in order."""
    return [(int(g), m) for g, m in _JOINED.findall(worker.log_since_start())]


def assigned(worker: WorkerProcess) -> bool:
    if not worker.running:
        raise RuntimeError(f"{worker.name} exited:\n{worker.tail()}")
    return _ASSIGNED.search(worker.log_since_start()) is not None


async def test_a_group_with_standbys_rebalances_once_per_join_and_then_keeps_its_generation(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    env = worker_env(bootstrap_servers, unique, "exactly_once_v2")
    env["STREAMS_APP_TABLE_STANDBY_REPLICAS"] = "1"
    # Nobody fails here: a worker held up on a loaded machine must not look dead to the group.
    env["STREAMS_APP_SESSION_TIMEOUT"] = "10"
    workers = keyed_sum_workers(tmp_path, env, "w0", "w1", "w2")
    group, source = f"ks-{unique}", f"ks-in-{unique}"
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()
    ops = OpsAdmin(bootstrap_servers)
    await ops.start()
    producing: asyncio.Task[object] | None = None
    try:
        first = workers[0]
        first.start()
        await wait_until(lambda: assigned(first), timeout=60, interval=0.1)
        # The group is new: its first round, generation 1, had w0 alone.
        for worker in workers[1:]:
            worker.start()

        async def settled() -> bool:
            """Stable at the broker with three members, each worker's last JoinGroup answer
            one of them, all of one generation, each worker assigned."""
            described = await ops.describe_group(group)
            if described.state != "Stable" or len(described.members) != 3:
                return False
            if not all(joins(w) and assigned(w) for w in workers):
                return False
            last = [joins(w)[-1] for w in workers]
            return len({g for g, _ in last}) == 1 and {m for _, m in last} == {
                m.member_id for m in described.members
            }

        await wait_until(settled, timeout=120, interval=0.2)
        described = await ops.describe_group(group)
        assert described.protocol == "streams_app"
        members = {m.member_id for m in described.members}
        generation = joins(first)[-1][0]
        # Every generation formed since the group was created is one w0 took part in (w0
        # never left), and one that w1 and w2 took part in from their first one on.
        for worker in workers:
            seen = [g for g, _ in joins(worker)]
            start = 1 if worker is first else seen[0]
            assert seen == list(range(start, start + len(seen))), (
                f"{worker.name} joined generations {seen}: rounds it had no part in"
            )

        # Settled: the same generation and members while a load is processed to its end.
        load = produce_keyed(bootstrap_servers, source, RECORDS, seed=1)
        producing = asyncio.create_task(load)
        loop = asyncio.get_running_loop()
        hold_until = loop.time() + HOLD

        def load_done() -> bool:
            return producing is not None and producing.done()

        async def kept_and_done() -> bool:
            described = await ops.describe_group(group)
            assert described.state == "Stable", f"the group left Stable: {described.state}"
            assert {m.member_id for m in described.members} == members
            for worker in workers:
                assert joins(worker)[-1][0] == generation, (
                    f"{worker.name} joined generation {joins(worker)[-1][0]} after {generation}"
                )
            return (
                loop.time() >= hold_until
                and load_done()
                and await observer.committed_equals_end(group, source)
            )

        started = time.monotonic()
        await wait_until(kept_and_done, timeout=180, interval=0.2)
        await producing
        print(
            f"group settled at generation {generation} and kept it "
            f"{time.monotonic() - started:.1f} s while processing {RECORDS} records"
        )
        for worker in workers:
            assert worker.terminate() == 0, worker.tail()
    finally:
        if producing is not None and not producing.done():
            producing.cancel()
        await ops.close()
        await observer.__aexit__()
        for worker in workers:
            if worker.running:
                worker.kill()
