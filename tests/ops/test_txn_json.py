"""The transaction inspector for scripts, on the real broker: ``--json`` on every ``txn`` command
(the fields docs/operations.md lists), the dump's transactional-id column, a dump of a topic
that does not exist answered at once (one Metadata request, not a client polling for it), and
``--from`` past the end answered with the partition's real offsets."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.ops.support import REPO, killed_producer, run_cli
from tests.ops.test_txn_inspector import create_topic, fence, write_history, write_plain

pytestmark = pytest.mark.kafka


def cli_json(*argv: str) -> tuple[int, Any]:
    code, out = run_cli(*argv, "--json")
    return code, json.loads(out)


def test_every_txn_command_speaks_json(bootstrap_servers: str, unique: str, tmp_path: Path) -> None:
    bootstrap = bootstrap_servers
    topic, done_id, open_id = f"json-{unique}", f"json-done-{unique}", f"json-open-{unique}"
    asyncio.run(create_topic(bootstrap, topic, 1))
    asyncio.run(write_history(bootstrap, topic, done_id))
    killed = killed_producer(
        {
            "bootstrap": bootstrap,
            "transactional_id": open_id,
            "topic": topic,
            "partition": 0,
            "timeout_ms": 600_000,
        },
        tmp_path,
    )
    asyncio.run(write_plain(bootstrap, topic, b"behind"))
    try:
        # dump: batches with their status and transactional id, the summary, no data.
        code, dump = cli_json("txn", "dump", topic, "0", "--bootstrap", bootstrap)
        assert code == 0
        assert (dump["topic"], dump["partition"]) == (topic, 0)
        assert (dump["last_stable_offset"], dump["high_watermark"]) == (9, 12)
        at = {
            b["base_offset"]: (b["status"], b["transactional_id"], b["read_committed_now"])
            for b in dump["batches"]
        }
        assert at[0] == ("plain", None, True)
        assert at[2] == ("committed", done_id, True)
        assert at[5] == ("control", done_id, False)
        assert at[6] == ("aborted", done_id, False)
        assert at[9] == ("open", open_id, False)
        assert at[11] == ("plain", None, False)  # behind the open transaction
        marker = next(b["marker"] for b in dump["batches"] if b["base_offset"] == 5)
        assert marker["type"] == "COMMIT" and marker["coordinator_epoch"] >= 0
        assert dump["summary"]["records"] == {
            "committed": 3,
            "aborted": 2,
            "open": 2,
            "plain": 3,
            "control": 2,
        }
        assert dump["summary"]["open_transactions"] == [
            {
                "producer_id": killed["producer_id"],
                "producer_epoch": killed["producer_epoch"],
                "first_offset": 9,
                "transactional_id": open_id,
            }
        ]
        code, deep = cli_json("txn", "dump", topic, "0", "--records", "--bootstrap", bootstrap)
        record = next(b for b in deep["batches"] if b["base_offset"] == 2)["records"][0]
        assert set(record) == {
            "offset",
            "timestamp",
            "key_size",
            "value_size",
            "sequence",
            "header_keys",
            "control",
        }
        assert (record["header_keys"], record["value_size"]) == (["h1"], 3)
        assert "c-0" not in json.dumps(deep)  # record data is never included
        # The text dump has the column too.
        code, text = run_cli("txn", "dump", topic, "0", "--bootstrap", bootstrap)
        assert "TRANSACTIONAL ID" in text.splitlines()[1] and open_id in text
        assert f"from offset 9 [{open_id}]" in text

        # list, describe, hanging.
        code, listing = cli_json("txn", "list", "--bootstrap", bootstrap)
        found = {t["transactional_id"]: t for t in listing["transactions"]}
        assert found[open_id]["state"] == "Ongoing" and found[open_id]["open"] is True
        assert found[open_id]["partitions"] == [{"topic": topic, "partition": 0}]
        assert found[open_id]["producer_id"] == killed["producer_id"]
        assert found[open_id]["age_ms"] >= 0 and found[open_id]["start_time_ms"] > 0
        assert found[done_id]["state"] == "CompleteAbort" and found[done_id]["age_ms"] is None
        assert listing["unreachable_brokers"] == []
        code, detail = cli_json("txn", "describe", done_id, "--bootstrap", bootstrap)
        assert code == 0 and detail["current"]["state"] == "CompleteAbort"
        assert [h["state"] for h in detail["history"]][-3:] == [
            "Ongoing",
            "PrepareAbort",
            "CompleteAbort",
        ]
        code, unknown = cli_json("txn", "describe", f"nobody-{unique}", "--bootstrap", bootstrap)
        assert code == 1 and unknown["current"] is None and unknown["history"] == []
        code, hanging = cli_json("txn", "hanging", "--topic", topic, "--bootstrap", bootstrap)
        assert code == 0
        assert [
            (t["partition"], t["verdict"], t["transactional_id"]) for t in hanging["transactions"]
        ] == [(0, "open", open_id)]
        code, _ = run_cli("txn", "hanging", "--abort", "--json", "--bootstrap", bootstrap)
        assert code == 2  # --json --abort without --yes: the questions would mix with the JSON

        # --from past the end: the partition's real range, not -1..-1.
        code, text = run_cli("txn", "dump", topic, "0", "--from", "1000", "--bootstrap", bootstrap)
        assert code == 2
    finally:
        asyncio.run(fence(bootstrap, open_id))


def test_txn_dump_past_the_end_names_the_real_range(
    bootstrap_servers: str, unique: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"range-{unique}"
    asyncio.run(create_topic(bootstrap_servers, topic, 1))
    for i in range(19):
        asyncio.run(write_plain(bootstrap_servers, topic, b"%d" % i))
    code, _ = run_cli("txn", "dump", topic, "0", "--from", "1000", "--bootstrap", bootstrap_servers)
    err = capsys.readouterr().err
    assert code == 2
    assert (
        f"offset 1000 is outside {topic}[0], which holds offsets 0..18 (high watermark 19)" in err
    )


def test_txn_dump_of_a_missing_topic_answers_at_once(bootstrap_servers: str, unique: str) -> None:
    """The real command line, so that every line it prints is counted: one of our own, not a
    client polling for the topic's metadata until its request timeout."""
    topic = f"no-such-topic-{unique}"
    argv = [sys.executable, "-m", "streams_app", "txn", "dump", topic, "0"]
    failed = subprocess.run(
        [*argv, "--bootstrap", bootstrap_servers],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )
    assert failed.returncode == 2, failed.stdout + failed.stderr
    assert f"topic {topic!r} does not exist on {bootstrap_servers}" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
