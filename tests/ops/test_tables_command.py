"""``streams-app tables`` against the real broker: windowed tables (a key's windows, one window
by its start or as ``tables NAME`` lists it) and a versioned table (a key's latest value and its
versions; a key whose latest version is a tombstone is not found), one key answered by the
running worker that owns it, or, with no worker, from the one changelog partition holding it;
``--json`` throughout.

The app is tests/ops/apps/windowed_tables.py (a plain, a tumbling and a sliding table, and a
versioned table built from a topic).
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

from streams_app.readback import read_topics, wait_committed
from streams_app.testing.workers import WorkerProcess
from tests.ops.support import app_cli
from tests.windows.data import BASE

pytestmark = pytest.mark.kafka

APP = "tests.ops.apps.windowed_tables"
T0 = BASE  # a whole minute (an hour), in ms, and recent: tests/windows/data.py says why
MINUTE = 60_000
RECORDS = [(f"k{i % 7}", i, T0 + 1_500 * i) for i in range(120)]  # three minutes of data
# The versioned table's source: a version replaced at its own time, one out of order, a key
# deleted (a tombstone version).
PRICES = [
    ("apple", 9, T0),
    ("apple", 10, T0),
    ("pear", 5, T0 + 1_000),
    ("apple", 12, T0 + 5_000),
    ("apple", 11, T0 + 3_000),
    ("pear", None, T0 + 2_000),
]
APPLE = [
    {"valid_from": T0, "value": 10},
    {"valid_from": T0 + 3_000, "value": 11},
    {"valid_from": T0 + 5_000, "value": 12},
]
PEAR = [{"valid_from": T0 + 1_000, "value": 5}, {"valid_from": T0 + 2_000, "value": None}]


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return app_cli(APP, env, *argv)


def cli_json(env: dict[str, str], *argv: str) -> tuple[int, Any, str]:
    done = cli(env, *argv, "--json")
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


async def produce(bootstrap: str, topic: str, prices: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    await producer.start()
    try:
        for key, value, ts in RECORDS:
            await producer.send(topic, key=key.encode(), value=b"%d" % value, timestamp_ms=ts)
        for key, price, ts in PRICES:
            value = None if price is None else b"%d" % price
            await producer.send(prices, key=key.encode(), value=value, timestamp_ms=ts)
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
    prices_changelog = f"wt-{unique}-prices-changelog"
    worker = WorkerProcess(APP, state_dir=tmp_path / "s", log_path=tmp_path / "w.log", env=env)
    worker.start()
    try:
        worker.wait_assigned()
        web = worker.wait_web_url()
        asyncio.run(produce(bootstrap_servers, f"wt-in-{unique}", f"wt-prices-{unique}"))
        done = cli(env, "status", "--wait-committed", "--timeout", "120s")
        assert done.returncode == 0, done.stdout + done.stderr
        # status waits for the agents' inputs and the topics the group committed offsets of: a
        # table's source partition it has committed nothing of yet is not among them.
        asyncio.run(
            wait_committed(
                bootstrap_servers,
                f"wt-{unique}",
                [f"wt-prices-{unique}"],
                outputs=[prices_changelog],
                timeout=120,
            )
        )
        # status --json: the same facts for scripts.
        code, status, _ = cli_json(env, "status")
        assert code == 0 and status["app_id"] == f"wt-{unique}"
        assert (status["lag"], status["caught_up"], status["held"]) == (0, True, [])
        (member,) = status["group"]["members"]
        assert status["group"]["state"] == "Stable" and member["web"] == web
        assert len(member["assignment"]) == 8  # the input's partitions and the prices'
        inputs = [t for t in status["tasks"] if t["topic"] == f"wt-in-{unique}"]
        assert [(t["task"], t["owner"], (t["committed"] or 0) == t["end"]) for t in inputs] == [
            (f"0_{p}", member["member_id"], True) for p in range(4)
        ]
        assert sum(t["end"] for t in inputs) == len(RECORDS)
        assert [
            t["transactional_id"].startswith(f"wt-{unique}-") for t in status["transactions"]
        ] == [True]

        # The list: windowed tables show their own codecs and their window.
        code, listed, _ = cli_json(env, "tables")
        rows = {row["table"]: row for row in listed}
        assert code == 0 and set(rows) == {"sums", "per-minute", "recent", "prices"}
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
        assert rows["prices"]["versioned"] == {"history_ms": 86_400_000}
        assert rows["prices"]["window"] is None and rows["sums"]["versioned"] is None
        text = cli(env, "tables").stdout
        assert "None" not in text and "tumbling (size 1m00s, grace 0ms)" in text, text
        assert text.split("\n")[0].endswith("HISTORY") and "  24h00m\n" in text, text

        # A versioned table's key: its latest value and its versions, as the owner lists them.
        # (Three CLI runs in all, each some seconds of make test: `tables prices` and the
        # owner's 404 are checked broker-free, tests/unit/test_versioned_table_lookup.py and
        # tests/joins/test_stream_table_driver.py.)
        code, apple, stderr = cli_json(env, "tables", "prices", "apple")
        answer = (code, apple["found"], apple["value"], apple["versions"], apple["source"])
        assert answer == (0, True, 12, APPLE, {"worker": web}), stderr

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
        # The versioned table's key from its changelog partition: the owner's answer. A key
        # whose latest version is a tombstone is not found, its versions listed.
        code, offline, stderr = cli_json(env, "tables", "prices", "apple")
        assert code == 0 and offline["source"]["changelog"] == prices_changelog, stderr
        assert {**offline, "source": apple["source"]} == apple
        code, gone, _ = cli_json(env, "tables", "prices", "pear")
        answer = (code, gone["found"], gone["value"], gone["versions"], gone["source"]["changelog"])
        assert answer == (1, False, None, PEAR, prices_changelog), gone

    finally:
        if worker.running:
            worker.kill()
