"""``streams-app send``: checked against the topic's model, from an argument, stdin or a file;
refuses framework topics unless forced; a missing topic is named at once."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streams_app.cli.main import main
from streams_app.readback import read_topics
from streams_app.transport.base import TopicSpec
from tests.kafka.helpers import create_topics

APP = "tests.runtime.apps.typed"
GOOD = {"order_id": "o1", "item": "apple", "qty": 2}


@pytest.fixture
def send(
    bootstrap_servers: str,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):  # type: ignore[no-untyped-def]
    """Run ``streams-app -A APP send ARGS`` in this process; returns (exit code, out, err)."""
    monkeypatch.setenv("STREAMS_APP_BROKER", bootstrap_servers)
    monkeypatch.setenv("TEST_SUFFIX", unique)
    monkeypatch.delitem(sys.modules, APP, raising=False)  # topic names come from TEST_SUFFIX

    def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(["-A", APP, "send", *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def test_send_checks_the_value_and_reads_it_from_an_argument_stdin_or_a_file(
    send,
    bootstrap_servers: str,
    unique: str,
    tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    topic = f"typed-orders-{unique}"
    asyncio.run(create_topics(bootstrap_servers, TopicSpec(topic, 2, 1)))

    code, out, err = send(topic, "--key", "apple", json.dumps(GOOD))
    assert code == 0, err
    assert f"sent to {topic}[" in out
    code, _, err = send(topic, "--key", "fig", "-", stdin=json.dumps(GOOD))
    assert code == 0, err
    path = tmp_path / "order.json"
    path.write_text(json.dumps({**GOOD, "qty": 3}))
    code, _, err = send(topic, "--key", "fig", "--file", str(path))
    assert code == 0, err

    code, _, err = send(topic, "--key", "apple", json.dumps({**GOOD, "qty": "two"}))
    assert code == 2 and "field 'qty' must be an integer, got string" in err
    code, _, err = send(topic, "--key", "apple", '{"order_id":"o2"}')
    assert code == 2 and "missing required field" in err
    code, _, err = send(topic, "[1, 2]")
    assert code == 2 and "expected a JSON object" in err
    code, _, err = send(topic, "{not json")
    assert code == 2 and "not JSON" in err

    records = asyncio.run(read_topics(bootstrap_servers, [topic]))[topic]
    assert sorted(json.loads(r.value or b"null")["qty"] for r in records) == [2, 2, 3]


def test_send_refuses_framework_topics_unless_forced(
    send,
    bootstrap_servers: str,
    unique: str,  # type: ignore[no-untyped-def]
) -> None:
    for topic in (
        f"typed-orders-{unique}.dlq",
        f"typed-{unique}-stock-changelog",
        f"typed-{unique}-reserve-by-item-repartition",
        "__consumer_offsets",
    ):
        code, _, err = send(topic, "--key", "a", json.dumps(GOOD))
        assert code == 2
        assert "refusing to send" in err and "--force" in err
    dlq = f"typed-orders-{unique}.dlq"
    asyncio.run(create_topics(bootstrap_servers, TopicSpec(dlq, 2, 1)))
    code, _, err = send(dlq, "--key", "a", "--force", json.dumps(GOOD))
    assert code == 0, err


def test_send_to_a_missing_topic_names_it_in_a_few_lines(
    bootstrap_servers: str, unique: str
) -> None:
    """The real command line, so that every line it prints is counted."""
    topic = f"no-such-topic-{unique}"
    env = {**os.environ, "STREAMS_APP_BROKER": bootstrap_servers, "TEST_SUFFIX": unique}
    failed = subprocess.run(
        [sys.executable, "-m", "streams_app", "-A", APP, "send", topic, "--key", "a", "{}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert failed.returncode == 2
    assert f"topic {topic!r} does not exist on {bootstrap_servers}" in failed.stderr
    # One line of our own, not a client retrying for its metadata all along.
    assert len(failed.stderr.strip().splitlines()) <= 3, failed.stderr


def test_send_raw_sends_the_bytes_as_given(
    send,
    bootstrap_servers: str,
    unique: str,
    tmp_path: Path,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--raw``: what a worker will dead-letter (not JSON, not the model, not UTF-8), to test
    one's dead-letter handling; the topic checks still apply."""
    topic = f"typed-orders-{unique}"
    asyncio.run(create_topics(bootstrap_servers, TopicSpec(topic, 2, 1)))
    code, _, err = send(topic, "{not json")
    assert code == 2 and "not JSON" in err  # checked, without --raw

    code, out, err = send(topic, "--raw", "--key", "apple", "{not json", "--partition", "1")
    assert code == 0 and f"sent to {topic}[1]" in out, err
    path = tmp_path / "blob"
    path.write_bytes(b"\xff\x00binary")
    code, _, err = send(topic, "--raw", "--file", str(path))
    assert code == 0, err
    stdin = io.TextIOWrapper(io.BytesIO(b'{"qty": "two"}'))
    monkeypatch.setattr(sys, "stdin", stdin)
    code, _, err = send(topic, "--raw", "-")
    assert code == 0, err
    code, _, err = send(f"{topic}.dlq", "--raw", "x")
    assert code == 2 and "refusing to send" in err  # still a framework topic

    records = asyncio.run(read_topics(bootstrap_servers, [topic]))[topic]
    assert sorted((r.key or b"", r.value) for r in records) == sorted(
        [(b"apple", b"{not json"), (b"", b"\xff\x00binary"), (b"", b'{"qty": "two"}')]
    )
    assert [r.key for r in records if r.value == b"{not json"] == [b"apple"]
