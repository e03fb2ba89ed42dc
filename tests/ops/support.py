"""Helpers of the operator-tool tests: the CLI in-process, killed producers, Kafka's own dump."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from streams_app.broker.jars import tools_classpath
from streams_app.cli.main import main
from streams_app.jvm import java_executable

REPO = Path(__file__).resolve().parents[2]


def app_cli(
    app: str, env: dict[str, str], *argv: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``python -m streams_app -A APP ARGV`` in a child process, with ``env`` added."""
    return subprocess.run(
        [sys.executable, "-m", "streams_app", "-A", app, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        timeout=180,
        check=False,
    )


def run_cli(*argv: str, stdin: str = "") -> tuple[int, str]:
    """``streams-app ARGV`` in this process: (exit status, stdout)."""
    out = io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            code = main(list(argv))
    finally:
        sys.stdin = old_stdin
    return code, out.getvalue()


def killed_producer(config: dict[str, Any], tmp_path: Path) -> dict[str, int]:
    """Run ``tests.ops.txn_producer`` until its records are written, then SIGKILL it.

    Returns its producer id and epoch. The transaction it began stays open.
    """
    ready = tmp_path / f"ready-{config['transactional_id']}"
    log = tmp_path / f"producer-{config['transactional_id']}.log"
    config = {**config, "ready": str(ready)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.ops.txn_producer", json.dumps(config)],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None:
                raise AssertionError(f"the producer exited ({proc.returncode}):\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the producer never wrote its records:\n{log.read_text()}")
            time.sleep(0.05)
    finally:
        proc.kill()  # SIGKILL: mid-transaction, nothing ends it
        proc.wait()
    info: dict[str, int] = json.loads(ready.read_text())
    return info


_PAIR = re.compile(r"(\w+): (\S+)")


def dump_log_segments(segment: Path) -> list[dict[str, Any]]:
    """Kafka's ``DumpLogSegments --deep-iteration`` of one segment file, parsed: one dict per
    batch (its fields as printed) with its records under ``records``."""
    proc = subprocess.run(
        [
            java_executable(),
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-cp",
            tools_classpath(),
            "org.apache.kafka.tools.DumpLogSegments",
            "--deep-iteration",
            "--files",
            str(segment),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    batches: list[dict[str, Any]] = []
    for line in proc.stdout.splitlines():
        if line.startswith("baseOffset:"):
            batches.append({**dict(_PAIR.findall(line)), "records": []})
        elif line.startswith("| offset:"):
            batches[-1]["records"].append(dict(_PAIR.findall(line)))
    assert batches, proc.stdout
    return batches
