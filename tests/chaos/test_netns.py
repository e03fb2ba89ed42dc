"""The networked mode's network: made and removed idempotently, leftovers of a killed run
removed by the next one (and a live run's never), and a clear refusal without the rights."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from streams_app.broker import netns
from streams_app.broker.netns import Network, namespaces, unavailable_reason

pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _needs_namespaces() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"network namespaces cannot be made here: {reason}")


def ours(run_id: str) -> list[str]:
    return [n for n in namespaces() if n.startswith(f"sa-{run_id}-")]


def bridge_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def test_made_and_removed_idempotently() -> None:
    net = Network().create()
    try:
        first = net.add_host("w0", 31)
        assert net.add_host("w0", 31) == first
        net.add_host("b1", 11)
        assert sorted(ours(net.run_id)) == sorted([f"sa-{net.run_id}-w0", f"sa-{net.run_id}-b1"])
        assert bridge_exists(net.bridge)
        assert first.address == str(net.subnet.network_address + 31)  # type: ignore[union-attr]
    finally:
        net.destroy()
    net.destroy()  # again: nothing left to remove, no error
    assert ours(net.run_id) == [] and not bridge_exists(net.bridge)
    assert not (netns.OWNERS_DIR / f"{net.run_id}.json").exists()


def test_a_killed_runs_leftovers_are_removed_and_a_live_runs_are_not() -> None:
    live = Network().create()
    live.add_host("w0", 31)
    script = (
        "import sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from streams_app.broker.netns import Network\n"
        "net = Network().create(); net.add_host('b1', 11); net.add_host('w0', 31)\n"
        "print(net.run_id, net.bridge, flush=True)\n"
        "time.sleep(600)\n"
    )
    killed = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout is not None
        run_id, bridge = killed.stdout.readline().split()
        assert len(ours(run_id)) == 2 and bridge_exists(bridge)
        os.kill(killed.pid, signal.SIGKILL)  # no chance to clean up
        killed.wait()
        assert len(ours(run_id)) == 2, "the kernel removed them by itself?"
        later = Network().create()  # removes what dead runs left
        later.destroy()
        assert ours(run_id) == [] and not bridge_exists(bridge)
        assert ours(live.run_id) == [f"sa-{live.run_id}-w0"], "a live run's network was touched"
    finally:
        killed.kill()
        live.destroy()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_refused_with_a_clear_message_without_the_rights(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("runs the command as an unprivileged user, which needs root to arrange")
    os.chmod(tmp_path, 0o777)
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "streams_app.chaos",
            "--network",
            "--records",
            "10",
            "--duration",
            "1",
            "--faults",
            "0",
            "--systems",
            "streams_app",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "network namespace" in proc.stderr and "root" in proc.stderr, proc.stderr
    assert "without --network" in proc.stderr, proc.stderr
