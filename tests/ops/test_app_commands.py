"""``status --wait-committed``, ``tables``, ``agents`` and ``reset`` against a running app (a
worker process on the real broker), and the same read-back through the Python API.

The app is tests/runtime/apps/keyed_sum.py: a running sum per key in the table ``sums``. After a
reset and a restart the worker reprocesses every input from the beginning: the table ends up
with the same sums (not doubled), which only holds if the reset wiped both the changelog and
the local RocksDB state.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from streams_app import App
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.readback import read_table, read_topics, wait_app_committed
from streams_app.testing.workers import WorkerProcess
from tests.ops.support import app_cli
from tests.runtime.helpers import produce_keyed

pytestmark = pytest.mark.kafka

APP = "tests.runtime.apps.keyed_sum"
RECORDS = 300


def cli(env: dict[str, str], *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return app_cli(APP, env, *argv, stdin=stdin)


def twin(bootstrap: str, suffix: str) -> App:
    """The same app, declared in the test: its id, input topic and table (never run here)."""
    app = App(f"ks-{suffix}", broker=bootstrap)
    source = app.topic(f"ks-in-{suffix}", key_type=str, value_type=int)
    app.Table("sums", default=int, key_type=str, value_type=int)

    @app.agent(source)
    async def process(stream):  # type: ignore[no-untyped-def]
        async for _ in stream:
            pass

    return app


def table_lines(text: str) -> dict[str, int]:
    """``KEY VALUE`` rows of ``tables NAME`` (JSON), as a dict."""
    rows = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith('"'):
            rows[parts[0].strip('"')] = int(parts[1])
    return rows


def test_status_tables_and_reset_of_a_running_app(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    suffix = unique
    env = {
        "STREAMS_APP_BROKER": bootstrap_servers,
        "STREAMS_APP_SESSION_TIMEOUT": "3",
        "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
        "TEST_SUFFIX": suffix,
    }
    state = tmp_path / "state"
    worker = WorkerProcess(APP, state_dir=state, log_path=tmp_path / "worker.log", env=env)
    worker.start()
    try:
        worker.wait_assigned()
        sent = asyncio.run(
            produce_keyed(bootstrap_servers, f"ks-in-{suffix}", RECORDS, seed=7, keys=20)
        )
        sums: dict[str, int] = defaultdict(int)
        for key, value in sent:
            sums[key] += value

        # status --wait-committed returns once every input record is committed as processed.
        done = cli(env, "status", "--wait-committed", "--timeout", "120s")
        assert done.returncode == 0, done.stdout + done.stderr
        text = done.stdout
        assert f"group ks-{suffix} is Stable with 1 member(s)" in text
        assert f"ks-{suffix}-consumer" in text  # the member's client id
        member = re.search(rf"^(\S+)\s+ks-{suffix}-consumer\s", text, re.M)
        assert member, text
        # The member's web server, as it published it to the group (the WEB column).
        web = worker.web_url
        assert web and re.search(rf"ks-{suffix}-consumer\s+\S+\s+{re.escape(web)}\s", text), text
        ends = []
        for p in range(4):  # task, partition, owner, committed, end, lag
            row = re.search(
                rf"^0_{p}\s+ks-in-{suffix}\[{p}\]\s+(\S+)\s+(\d+)\s+(\d+)\s+0$", text, re.M
            )
            assert row, text
            assert row.group(1) == member.group(1) and row.group(2) == row.group(3)
            ends.append(int(row.group(3)))
        assert sum(ends) == RECORDS
        assert "total lag 0 (committed everything up to the end offsets)" in text
        assert "1 transactional id(s) of the app's workers" in text

        # tables: the list, a table's committed contents, one key.
        listed = cli(env, "tables")
        assert listed.returncode == 0, listed.stderr
        assert re.search(
            rf"^sums\s+ks-{suffix}-sums-changelog\s+4\s+json:str\s+json:int\s+-$",
            listed.stdout,
            re.M,
        )
        contents = cli(env, "tables", "sums")
        assert contents.returncode == 0, contents.stderr
        assert table_lines(contents.stdout) == sums
        assert f"{len(sums)} key(s)" in contents.stdout
        key = sent[0][0]
        one = cli(env, "tables", "sums", key)
        assert (one.returncode, one.stdout.strip()) == (0, str(sums[key]))
        missing = cli(env, "tables", "sums", "no-such-key")
        assert missing.returncode == 1 and "no committed value" in missing.stdout
        agents = cli(env, "agents")
        assert "process" in agents.stdout and f"ks-in-{suffix}" in agents.stdout

        # The same read-back from Python.
        app = twin(bootstrap_servers, suffix)
        assert asyncio.run(read_table(app, "sums")) == sums
        progress = asyncio.run(wait_app_committed(app, timeout=30))
        assert sum(p.end for p in progress) == RECORDS and all(p.lag == 0 for p in progress)

        # reset refuses while the worker is alive...
        refused = cli(env, "reset", "--yes", "--state-dir", str(state))
        assert refused.returncode == 2
        assert "1 live member(s)" in refused.stderr and "stop every worker" in refused.stderr
        assert worker.terminate() == 0, worker.tail()

        # ... and resets once it is gone.
        reset = cli(env, "reset", "--state-dir", str(state), stdin="y\n")
        assert reset.returncode == 0, reset.stdout + reset.stderr
        assert f"internal topics deleted: ks-{suffix}-sums-changelog" in reset.stdout
        assert f"ks-echo-{suffix}" in reset.stdout  # kept: an output
        assert not (state / f"ks-{suffix}" / "tables").exists()

        async def after_reset() -> tuple[dict[tuple[str, int], int], list[str]]:
            async with OpsAdmin(bootstrap_servers) as admin:
                return await admin.committed_offsets(f"ks-{suffix}"), await admin.list_topics()

        committed, topics = asyncio.run(after_reset())
        assert committed == {(f"ks-in-{suffix}", p): 0 for p in range(4)}
        assert f"ks-{suffix}-sums-changelog" not in topics
        lagging = cli(env, "status")
        assert f"total lag {RECORDS} (behind)" in lagging.stdout

        # A new worker reprocesses everything into a fresh table: the same sums, not doubled.
        worker.start()
        worker.wait_assigned()
        again = cli(env, "status", "--wait-committed", "--timeout", "120s")
        assert again.returncode == 0, again.stdout + again.stderr
        assert asyncio.run(read_table(app, "sums")) == sums
        echoed = asyncio.run(read_topics(bootstrap_servers, [f"ks-echo-{suffix}"]))
        assert len(echoed[f"ks-echo-{suffix}"]) == 2 * RECORDS  # outputs are not reset
        assert worker.terminate() == 0, worker.tail()
    finally:
        if worker.running:
            worker.kill()
