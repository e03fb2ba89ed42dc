"""A lone exactly-once worker SIGKILLed and replaced by one on an *empty* state directory.

The replacement has a new process id, so a new transactional id, and no member of the group
ever knew the dead one's (the assignor's departed-member fencing has nothing to go on). Its
open transaction would hold the committed offsets (``require_stable``) and the changelog
tails until ``transaction_timeout``. The dead worker's id is in the metadata of the offsets it
committed, and the new owner fences it before it reads stable offsets
(``streams_app.runtime.fencing.fence_predecessors``). Here, on the real broker:

- the replacement names the dead worker's transactional id and fences it;
- the outputs stay exactly-once through the kill and the full restore.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from streams_app.state.directory import PROCESS_ID_FILE
from tests.runtime.eos_checks import assert_predecessor_fenced
from tests.runtime.helpers import KafkaObserver, keyed_sum_workers, produce_keyed, wait_until
from tests.runtime.test_crash import worker_env

RECORDS = 6_000


async def test_a_replacement_on_an_empty_state_dir_fences_the_dead_workers_transaction(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    env = worker_env(bootstrap_servers, unique, "exactly_once_v2")
    # Long enough that the run would stall on the dead worker's transaction without the fence.
    env["STREAMS_APP_TRANSACTION_TIMEOUT"] = "60"
    first, replacement = keyed_sum_workers(tmp_path, env, "first", "replacement")
    app_id = f"ks-{unique}"
    observer = KafkaObserver(bootstrap_servers)
    await observer.__aenter__()
    producing: asyncio.Task[object] | None = None
    try:
        first.start()
        await asyncio.to_thread(first.wait_assigned)
        process_id = (tmp_path / "first" / app_id / PROCESS_ID_FILE).read_text().strip()
        dead_id = f"{app_id}-{process_id}"
        producing = asyncio.create_task(
            produce_keyed(bootstrap_servers, f"ks-in-{unique}", RECORDS, seed=7)
        )

        async def committed_some() -> bool:
            # Its offsets carry its transactional id only once it has committed them.
            return await observer.committed_total(app_id, f"ks-in-{unique}") >= RECORDS // 3

        await wait_until(committed_some, timeout=120, interval=0.02)
        first.kill()
        replacement.start()
        await asyncio.to_thread(replacement.wait_assigned)
        await producing
        await wait_until(
            lambda: observer.committed_equals_end(app_id, f"ks-in-{unique}"),
            timeout=180,
            interval=0.2,
        )
        assert replacement.terminate() == 0, replacement.tail()
    finally:
        if producing is not None and not producing.done():
            producing.cancel()
        await observer.__aexit__()
        for worker in (first, replacement):
            if worker.running:
                worker.kill()
    await assert_predecessor_fenced(
        replacement,
        f"{dead_id} last committed partitions taken over here",
        bootstrap_servers,
        unique,
        RECORDS,
    )
