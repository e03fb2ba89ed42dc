"""The transaction inspector on the real broker: a dump of a topic that does not exist answered at
once (one Metadata request, not a client polling for it), and ``--from`` past the end answered
with the partition's real offsets."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from tests.ops.support import REPO, run_cli
from tests.ops.test_txn_inspector import create_topic, write_plain

pytestmark = pytest.mark.kafka


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
