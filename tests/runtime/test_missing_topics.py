"""Topics deleted under a worker (issue 35, items 5 and 6).

- A table's changelog deleted while the worker runs: it stops naming the table (it used to
  abort every 30 s forever, ready all along); the local store still holds the table, and
  ``changelog reseed`` writes it back.
- A changelog deleted and recreated before a restart: the worker refuses to start, naming the
  table and both offsets (it used to wipe its correct store with a warning and restore the new,
  empty changelog: every key came back wrong); ``changelog reseed`` restores the right values.
- An input topic deleted: not ready, naming the topic (it used to sit idle and "ready" with no
  tasks), then a clear stop after ``missing_topic_timeout``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from streams_app import App
from streams_app.errors import MissingSourceTopic
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.readback import read_topics, wait_committed
from streams_app.testing.workers import WorkerProcess
from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import create_topics
from tests.runtime.helpers import produce_keyed, sums_of, table_from_changelog, wait_until

PARTITIONS = 4


async def last_sums(bootstrap: str, topic: str) -> dict[str, int]:
    out = {}
    for record in (await read_topics(bootstrap, [topic]))[topic]:
        out[record.key.decode()] = json.loads(record.value)
    return out


class KeyedSum:
    """tests.runtime.apps.keyed_sum as worker processes and CLI commands, for one test."""

    def __init__(self, bootstrap: str, unique: str, tmp_path: Path) -> None:
        self.bootstrap = bootstrap
        self.unique = unique
        self.app_id = f"ks-{unique}"
        self.source = f"ks-in-{unique}"
        self.sums = f"ks-sum-{unique}"
        self.changelog = f"ks-{unique}-sums-changelog"
        self.state_dir = tmp_path / "state"
        self.worker = WorkerProcess(
            "tests.runtime.apps.keyed_sum",
            state_dir=self.state_dir,
            log_path=tmp_path / "worker.log",
            env={
                "STREAMS_APP_BROKER": bootstrap,
                "TEST_SUFFIX": unique,
                "STREAMS_APP_MISSING_TOPIC_TIMEOUT": "2",
                "STREAMS_APP_SHUTDOWN_TIMEOUT": "3",
            },
        )

    def changelog_command(self, action: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "streams_app", "-A", "tests.runtime.apps.keyed_sum"]
        argv += ["changelog", action, "sums", "--state-dir", str(self.state_dir)]
        return subprocess.run(
            argv, env=self.worker.env, cwd=self.worker.cwd, capture_output=True, text=True
        )

    async def run_until_committed(self) -> None:
        self.worker.start()
        self.worker.wait_started()
        await wait_committed(self.bootstrap, self.app_id, [self.source], outputs=[self.sums])

    async def exited(self, timeout: float = 60) -> int:
        await wait_until(lambda: not self.worker.running, timeout=timeout)
        code = self.worker.returncode
        assert code is not None
        return code

    async def delete_changelog(self) -> None:
        async with OpsAdmin(self.bootstrap) as admin:
            await admin.delete_topics([self.changelog])

            async def gone() -> bool:
                return self.changelog not in await admin.list_topics()

            await wait_until(gone, timeout=60)


async def test_a_changelog_deleted_while_running_stops_the_worker_and_reseed_writes_it_back(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    ks = KeyedSum(bootstrap_servers, unique, tmp_path)
    await create_topics(bootstrap_servers, TopicSpec(ks.source, PARTITIONS, 1))
    sent = await produce_keyed(bootstrap_servers, ks.source, 600, seed=1, keys=20)
    try:
        await ks.run_until_committed()
        await ks.delete_changelog()
        code = await ks.exited()
        log = ks.worker.log_since_start()
        assert code == 2, ks.worker.tail()
        assert f"changelog topic {ks.changelog!r} of table 'sums' was deleted" in log
        assert "Traceback" not in log
        reseed = ks.changelog_command("reseed")
        assert reseed.returncode == 0, reseed.stderr
        assert "re-seeded" in reseed.stdout
        # The changelog holds the table again, as the store did.
        assert await table_from_changelog(bootstrap_servers, ks.changelog) == sums_of(sent)
        more = await produce_keyed(bootstrap_servers, ks.source, 300, seed=2, keys=20)
        await ks.run_until_committed()
    finally:
        ks.worker.terminate()
    expected = sums_of(sent + more)
    assert await table_from_changelog(bootstrap_servers, ks.changelog) == expected
    assert await last_sums(bootstrap_servers, ks.sums) == expected


async def test_a_changelog_deleted_and_recreated_is_refused_at_start_until_reseeded(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    ks = KeyedSum(bootstrap_servers, unique, tmp_path)
    await create_topics(bootstrap_servers, TopicSpec(ks.source, PARTITIONS, 1))
    sent = await produce_keyed(bootstrap_servers, ks.source, 600, seed=3, keys=20)
    try:
        await ks.run_until_committed()
        assert ks.worker.terminate() == 0
        await ks.delete_changelog()
        await create_topics(
            bootstrap_servers,
            TopicSpec(ks.changelog, PARTITIONS, 1, {"cleanup.policy": "compact"}),
        )
        ks.worker.start()
        code = await ks.exited()
        log = ks.worker.log_since_start()
        assert code == 2, ks.worker.tail()
        assert f"table 'sums' (changelog {ks.changelog!r}) partition " in log
        assert "the changelog ends at 0" in log and "refusing to start" in log
        assert "wiping" not in log and "Traceback" not in log
        reseed = ks.changelog_command("reseed")
        assert reseed.returncode == 0, reseed.stderr
        more = await produce_keyed(bootstrap_servers, ks.source, 300, seed=4, keys=20)
        await ks.run_until_committed()
    finally:
        ks.worker.terminate()
    expected = sums_of(sent + more)  # not restarted from an empty table
    assert await table_from_changelog(bootstrap_servers, ks.changelog) == expected
    assert await last_sums(bootstrap_servers, ks.sums) == expected


async def test_an_input_topic_deleted_makes_the_worker_not_ready_then_stops_it(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    app = App(
        f"gone-{unique}",
        broker=bootstrap_servers,
        topic_partitions=2,
        missing_topic_timeout=4.0,
        web_port=0,
    )
    source = app.topic(f"gone-in-{unique}", key_type=str, value_type=int)
    kept = app.topic(f"kept-in-{unique}", key_type=str, value_type=int)

    @app.agent(source)
    async def one(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    @app.agent(kept)
    async def other(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    worker = app.worker(state_dir=tmp_path / "s")
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(worker.started.wait(), 60)
    url = f"{worker.web_url}/ready"

    async def ready() -> tuple[int, dict[str, object]]:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status, await response.json()

    async def is_ready() -> bool:
        return (await ready())[0] == 200

    await wait_until(is_ready, timeout=60)
    async with OpsAdmin(bootstrap_servers) as admin:
        await admin.delete_topics([source.name])

    async def says_missing() -> bool:
        status, body = await ready()
        return status == 503 and body.get("reason") == "input topic missing"

    await wait_until(says_missing, timeout=30)
    _, body = await ready()
    assert body["topics"] == [source.name]
    with pytest.raises(MissingSourceTopic, match=rf"input topic\(s\) '{source.name}' missing"):
        await asyncio.wait_for(run, 60)
