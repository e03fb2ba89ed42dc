"""`make demo`'s main job, as a test: broker, worker on topologies.orders, data in, results out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_counts_every_order_exactly_once(tmp_path: Path) -> None:
    # Its own embedded broker and worker process, as `make demo` runs it; the demo waits until
    # the group has committed every order and restock before it reads the results back.
    proc = subprocess.run(
        [sys.executable, "-m", "streams_app", "demo", "--orders", "500", "--seed", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "inventory records: 500  notifications: 500  orders sent: 500" in out, out
    assert "duplicates: 0  missing: 0" in out, out
    assert "every order counted exactly once." in out, out
