"""A partition paused when its task moves away is processed again when the task comes back.

Flow control (``runtime/worker/flow.py``) pauses a partition whose failed record backs off; its
one reset forgets that pause when the assignment ends (a revocation or a migration), because
the consumer's next assignment starts with every partition unpaused. Here the backoff is an
hour: if the pause outlived the move, the partition's records would wait for it, and the test
would time out. Real broker, two workers of one group.
"""

from __future__ import annotations

import json
from pathlib import Path

from streams_app import App
from streams_app.readback import read_topics
from streams_app.transport.base import TopicPartition
from tests.runtime.helpers import running_worker, wait_until

#: Far longer than the test: only the reset can end this pause in time.
BACKOFF = 3600.0


def echo_app(unique: str, bootstrap: str, attempts: list[int], fail_times: int) -> App:
    """Echoes each record; the value 13 fails its first ``fail_times`` attempts here."""
    app = App(
        f"flow-{unique}",
        broker=bootstrap,
        topic_partitions=2,
        error_policy="retry",
        retry_backoff=BACKOFF,
        retry_backoff_max=BACKOFF,
    )
    source = app.topic(f"flow-in-{unique}", key_type=str, value_type=int)
    echo = app.topic(f"flow-echo-{unique}", key_type=str, value_type=int)

    @app.agent(source)
    async def process(stream):  # type: ignore[no-untyped-def]
        async for event in stream.events():
            if event.value == 13:
                attempts.append(event.offset)
                if len(attempts) <= fail_times:
                    raise RuntimeError("refusing 13")
            await echo.send(key=event.key, value=event.value, partition=event.partition)

    return app


async def echoed(bootstrap: str, unique: str) -> list[tuple[int, int]]:
    """(input partition, value) of every committed echo (echoed to the same partition), in
    each partition's order."""
    topic = f"flow-echo-{unique}"
    records = (await read_topics(bootstrap, [topic]))[topic]
    return [(r.partition, json.loads(r.value)) for r in records]


async def test_a_backed_off_partition_is_processed_again_after_its_task_moves_away_and_back(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    here: list[int] = []  # this worker's attempts at 13: the first fails
    there: list[int] = []  # the other worker's: all fail (so it never takes the record over)
    app = echo_app(unique, bootstrap_servers, here, fail_times=1)
    other = echo_app(unique, bootstrap_servers, there, fail_times=1_000_000)
    paused = TopicPartition(f"flow-in-{unique}", 0)

    async with running_worker(app, tmp_path / "a", web_enabled=False) as worker:
        async with app.producer() as producer:
            for value in (1, 2, 13, 4):
                await producer.send(f"flow-in-{unique}", key="k", value=value, partition=0)
            for value in (5, 6):
                await producer.send(f"flow-in-{unique}", key="k", value=value, partition=1)

        # Partition 1 is committed; partition 0 backs off after 13 failed, paused for an hour.
        async def settled() -> bool:
            parts = worker.parts
            return (
                parts is not None
                and paused in parts.flow.backing_off
                and sorted(await echoed(bootstrap_servers, unique)) == [(1, 5), (1, 6)]
            )

        await wait_until(settled, timeout=60)
        assert here == [2]

        # A second worker joins (every partition is revoked and assigned again) and leaves
        # (every partition comes back here): the paused partition's task moves away and back.
        async with running_worker(other, tmp_path / "b", web_enabled=False) as newcomer:
            await wait_until(
                lambda: newcomer.parts is not None and newcomer.parts.committer.group is not None,
                timeout=60,
            )

        expected = [(0, 1), (0, 2), (0, 13), (0, 4), (1, 5), (1, 6)]

        async def all_echoed() -> bool:
            return sorted(await echoed(bootstrap_servers, unique)) == sorted(expected)

        await wait_until(all_echoed, timeout=60)
        out = await echoed(bootstrap_servers, unique)
        assert [v for p, v in out if p == 0] == [1, 2, 13, 4]  # in order, each once
        assert here[-1] == 2 and len(here) >= 2  # processed again here, and it went through
        assert worker.parts is not None and not worker.parts.flow.backing_off
