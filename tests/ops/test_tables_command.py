"""``streams-app tables`` against the real broker: windowed tables (a key's windows, one window
by its start or as ``tables NAME`` lists it), one key answered by the running worker that owns
it, or, with no worker, from the one changelog partition holding it; ``--json`` throughout.

The app is tests/ops/apps/windowed_tables.py (a plain, a tumbling and a sliding table).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from streams_app.readback import read_topics
from streams_app.testing.workers import WorkerProcess
from tests.ops.support import app_cli

pytestmark = pytest.mark.kafka

APP = "tests.ops.apps.windowed_tables"
T0 = 1_700_000_040_000  # a whole minute, in ms
MINUTE = 60_000
RECORDS = [(f"k{i % 7}", i, T0 + 1_500 * i) for i in range(120)]  # three minutes of data


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return app_cli(APP, env, *argv)


def cli_json(env: dict[str, str], *argv: str) -> tuple[int, Any, str]:
    done = cli(env, *argv, "--json")
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


async def produce(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        for key, value, ts in RECORDS:
            await producer.send(topic, key=key.encode(), value=b"%d" % value, timestamp_ms=ts)
        await producer.flush()
    finally:
        await producer.stop()


def per_minute(key: str) -> list[dict[str, int]]:
    windows: dict[int, int] = defaultdict(int)
    for k, value, ts in RECORDS:
        if k == key:
            windows[ts - ts % MINUTE] += value
    return [{"start": s, "end": s + MINUTE, "value": v} for s, v in sorted(windows.items())]


def test_tables_reads_windowed_tables_from_the_owner_or_one_partition(
    bootstrap_servers: str, unique: str, tmp_path: Path
) -> None:
    env = {
        "STREAMS_APP_BROKER": bootstrap_servers,
        "STREAMS_APP_SESSION_TIMEOUT": "3",
        "STREAMS_APP_HEARTBEAT_INTERVAL": "1",
        "TEST_SUFFIX": unique,
    }
    changelog = f"wt-{unique}-per-minute-changelog"
    worker = WorkerProcess(APP, state_dir=tmp_path / "s", log_path=tmp_path / "w.log", env=env)
    worker.start()
    try:
        worker.wait_assigned()
        web = worker.wait_web_url()
        asyncio.run(produce(bootstrap_servers, f"wt-in-{unique}"))
        done = cli(env, "status", "--wait-committed", "--timeout", "120s")
        assert done.returncode == 0, done.stdout + done.stderr
        # status --json: the same facts for scripts.
        code, status, _ = cli_json(env, "status")
        assert code == 0 and status["app_id"] == f"wt-{unique}"
        assert (status["lag"], status["caught_up"], status["held"]) == (0, True, [])
        (member,) = status["group"]["members"]
        assert status["group"]["state"] == "Stable" and member["web"] == web
        assert len(member["assignment"]) == 4
        assert [
            (t["task"], t["owner"], (t["committed"] or 0) == t["end"]) for t in status["tasks"]
        ] == [(f"0_{p}", member["member_id"], True) for p in range(4)]
        assert sum(t["end"] for t in status["tasks"]) == len(RECORDS)
        assert [
            t["transactional_id"].startswith(f"wt-{unique}-") for t in status["transactions"]
        ] == [True]

        # The list: windowed tables show their own codecs and their window.
        code, listed, _ = cli_json(env, "tables")
        rows = {row["table"]: row for row in listed}
        assert code == 0 and set(rows) == {"sums", "per-minute", "recent"}
        assert (
            rows["per-minute"]["values"] == "json:int" and rows["per-minute"]["keys"] == "json:str"
        )
        assert rows["per-minute"]["window"] == {
            "kind": "tumbling",
            "size_ms": MINUTE,
            "grace_ms": 0,
            "retention_ms": 86_400_000,
        }
        assert rows["sums"]["window"] is None and rows["sums"]["partitions"] == 4
        text = cli(env, "tables").stdout
        assert "None" not in text and "tumbling (size 1m00s, grace 0ms)" in text, text

        # A key of a windowed table: all its windows, answered by the worker owning it.
        code, one, stderr = cli_json(env, "tables", "per-minute", "k3")
        assert code == 0 and one["found"] and one["windows"] == per_minute("k3"), one
        assert one["source"] == {"worker": web}, stderr
        assert f"from worker {web}" in stderr
        first = per_minute("k3")[0]
        # One window: by its start, or as `tables per-minute` lists it.
        by_start = cli(env, "tables", "per-minute", "k3", str(first["start"]))
        assert (by_start.returncode, by_start.stdout.strip()) == (0, str(first["value"]))
        listed_form = json.dumps(["k3", first["start"], first["end"]])
        as_listed = cli(env, "tables", "per-minute", listed_form)
        assert (as_listed.returncode, as_listed.stdout.strip()) == (0, str(first["value"]))
        contents = cli(env, "tables", "per-minute").stdout
        assert f'"k3"  {first["start"]}  {first["end"]}  {first["value"]}' in contents
        assert listed_form not in contents  # no list keys: KEY, START and END columns
        nowhere = cli(env, "tables", "per-minute", "k3", str(T0 - MINUTE))
        assert nowhere.returncode == 1 and "no committed window" in nowhere.stdout
        # Sliding windows show the aggregate (not the newest-record time kept beside it).
        code, sliding, _ = cli_json(env, "tables", "recent", "k0")
        k0 = [(v, ts) for k, v, ts in RECORDS if k == "k0"]
        left = {w["end"]: w["value"] for w in sliding["windows"]}
        assert left[k0[3][1]] == sum(v for v, ts in k0 if k0[3][1] - 10_000 <= ts <= k0[3][1])
        # A plain table's key, from the worker too.
        code, summed, _ = cli_json(env, "tables", "sums", "k5")
        assert summed["value"] == sum(v for k, v, _ in RECORDS if k == "k5")
        assert summed["source"] == {"worker": web}
        assert worker.terminate() == 0, worker.tail()

        # No worker: only the key's changelog partition is read.
        code, offline, stderr = cli_json(env, "tables", "per-minute", "k3")
        assert code == 0 and offline["windows"] == one["windows"], stderr
        assert offline["partition"] == one["partition"]
        read = offline["source"]["records_read"]
        assert offline["source"]["changelog"] == changelog
        everything = asyncio.run(read_topics(bootstrap_servers, [changelog]))[changelog]
        in_partition = [r for r in everything if r.partition == offline["partition"]]
        assert read == len(in_partition) < len(everything), (read, len(everything))
        missing = cli(env, "tables", "per-minute", "nope", "--json")
        assert missing.returncode == 1 and json.loads(missing.stdout)["found"] is False

    finally:
        if worker.running:
            worker.kill()
