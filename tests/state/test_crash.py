"""SIGKILL a process writing RocksDB batches at a random moment: no batch is ever torn, with or
without background flushes (``flush_interval``) running when it dies, and with write-behind
(``write_behind_interval``) the partition comes back at the last batch written out, never
ahead of its offset and never torn."""

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


@pytest.mark.parametrize(
    ("flush_interval", "write_behind"),
    [(None, 0.0), (0.01, 0.0), (0.01, 0.05)],
    ids=["memtable-full", "every-10ms", "write-behind-50ms"],
)
def test_sigkill_never_tears_a_batch(
    tmp_path: Path, flush_interval: float | None, write_behind: float
) -> None:
    path = tmp_path / "p"
    extra = ["none" if flush_interval is None else str(flush_interval), str(write_behind)]
    # The kill moments come from this seed, printed (pytest shows it for a failing test):
    # STREAMS_APP_CRASH_SEED replays a run's moments (as closely as the child's timing allows).
    seed = int(os.environ.get("STREAMS_APP_CRASH_SEED") or random.randrange(1_000_000))
    print(f"kill moments from seed {seed} (STREAMS_APP_CRASH_SEED={seed} to replay)")
    rng = random.Random(seed)
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
            assert offset is not None
            # Written at once, the first batch is on disk; written behind, the batches in
            # memory died with the process, and what is on disk is never older than before.
            assert offset >= (previous if write_behind else first)
            values = {v.split(b"|")[0] for _, v in part.items()}
            keys = sum(1 for _ in part.items())
        finally:
            part.close()
        assert keys == crash_writer.KEYS
        assert values == {str(offset).encode()}, f"torn batch: offset {offset}, values {values}"
        previous = offset
    if write_behind:
        # The kills came at random moments, yet batches reached disk in most rounds: those
        # written behind do get written (a batch takes a few ms, the rounds 50-600 ms).
        assert previous > ROUNDS, previous
    if flush_interval is not None:
        # The background flushes did run (the data reached table files, not only the WAL).
        assert list(path.glob("*.sst")), sorted(p.name for p in path.iterdir())
