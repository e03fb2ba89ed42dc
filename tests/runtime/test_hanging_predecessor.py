"""A lone exactly-once worker SIGKILLed *before its first commit*, replaced on an empty state dir.

Its first Produce opened a transaction (transaction protocol 2: partitions join with the
Produce itself) that holds the last stable offset of every echo, sum and changelog partition it
wrote, until ``transaction_timeout``. No member of the group ever knew its transactional id, and
it committed no offset whose metadata could name it (compare test_unknown_predecessor.py). The
new owner finds it with KIP-664's ListTransactions (an open transaction under one of the app's
ids, from no member of this generation) and fences it
(``streams_app.runtime.fencing.fence_predecessors``). Here, on the real broker:

- the replacement names the dead worker's transactional id and fences it;
- every output becomes visible to ``read_committed`` readers (last stable offset == high
  watermark) well within the 60 s transaction timeout: without the fence the dead
  transaction would hold them back until then;
- the outputs stay exactly-once (the dead worker's records are aborted, never counted).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka import AIOKafkaConsumer

from streams_app.state.directory import PROCESS_ID_FILE
from tests.runtime.eos_checks import assert_predecessor_fenced
from tests.runtime.helpers import KafkaObserver, keyed_sum_workers, produce_keyed, wait_until
from tests.runtime.test_crash import worker_env

RECORDS = 2_000
TRANSACTION_TIMEOUT = 60.0
#: How long the outputs may stay hidden after the replacement committed all input: far below
#: what is left of the dead transaction's timeout at that point.
VISIBLE_WITHIN = 25.0


async def test_a_replacement_fences_a_dead_worker_that_never_committed(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    env = worker_env(bootstrap_servers, unique, "exactly_once_v2")
    env["STREAMS_APP_TRANSACTION_TIMEOUT"] = str(TRANSACTION_TIMEOUT)
    # The first worker processes and sends, but is killed before any commit is due.
    never_commits = {
        **env,
        "STREAMS_APP_COMMIT_INTERVAL": str(TRANSACTION_TIMEOUT - 10),
        "STREAMS_APP_COMMIT_EVERY": "1000000",
    }
    (first,) = keyed_sum_workers(tmp_path, never_commits, "first")
    (replacement,) = keyed_sum_workers(tmp_path, env, "replacement")
    app_id = f"ks-{unique}"
    echo = f"ks-echo-{unique}"
    observer = KafkaObserver(bootstrap_servers)
    stable = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, isolation_level="read_committed")
    await observer.__aenter__()
    await stable.start()
    try:
        first.start()
        await asyncio.to_thread(first.wait_assigned)
        process_id = (tmp_path / "first" / app_id / PROCESS_ID_FILE).read_text().strip()
        dead_id = f"{app_id}-{process_id}"
        await produce_keyed(bootstrap_servers, f"ks-in-{unique}", RECORDS, seed=11)

        async def sent_uncommitted() -> bool:
            return await observer.end_total(echo) >= RECORDS // 2

        await wait_until(sent_uncommitted, timeout=60, interval=0.02)
        first.kill()
        assert await observer.committed_total(app_id, f"ks-in-{unique}") == 0

        replacement.start()
        await asyncio.to_thread(replacement.wait_assigned)
        await wait_until(
            lambda: observer.committed_equals_end(app_id, f"ks-in-{unique}"),
            timeout=120,
            interval=0.2,
        )

        async def outputs_visible() -> bool:
            # read_committed ListOffsets answers the last stable offset.
            tps = await observer.partitions(echo)
            ends = await observer.consumer.end_offsets(tps)
            return await stable.end_offsets(tps) == ends

        await wait_until(outputs_visible, timeout=VISIBLE_WITHIN, interval=0.2)
        assert replacement.terminate() == 0, replacement.tail()
    finally:
        await stable.stop()
        await observer.__aexit__()
        for worker in (first, replacement):
            if worker.running:
                worker.kill()
    await assert_predecessor_fenced(
        replacement,
        f"{dead_id} hold an open transaction and are not in the group",
        bootstrap_servers,
        unique,
        RECORDS,
    )
