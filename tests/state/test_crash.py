"""SIGKILL a process writing RocksDB batches at a random moment: no batch is ever torn, with or
without background flushes (``flush_interval``) running when it dies."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams_app.state import RocksDBStorePartition
from tests.state import crash_writer

ROUNDS = 6


@pytest.mark.parametrize("flush_interval", [None, 0.01], ids=["memtable-full", "every-10ms"])
def test_sigkill_never_tears_a_batch(tmp_path: Path, flush_interval: float | None) -> None:
    path = tmp_path / "p"
    extra = [] if flush_interval is None else [str(flush_interval)]
    rng = random.Random()
    previous = 0
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for _ in range(ROUNDS):
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.state.crash_writer", str(path), *extra],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=Path(__file__).resolve().parents[2],
        )
        try:
            assert child.stdout is not None
            first = int(child.stdout.readline())
            assert first == previous + 1  # it resumed from the stored offset
            time.sleep(rng.uniform(0.05, 0.6))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        assert child.returncode == -signal.SIGKILL

        part = RocksDBStorePartition(path)
        try:
            offset = part.changelog_offset
            assert offset is not None and offset >= first
            values = {v.split(b"|")[0] for _, v in part.items()}
            keys = sum(1 for _ in part.items())
        finally:
            part.close()
        assert keys == crash_writer.KEYS
        assert values == {str(offset).encode()}, f"torn batch: offset {offset}, values {values}"
        previous = offset
    if flush_interval is not None:
        # The background flushes did run (the data reached table files, not only the WAL).
        assert list(path.glob("*.sst")), sorted(p.name for p in path.iterdir())
