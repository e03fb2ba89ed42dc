"""`streams-app broker start/stop` never signals a process that is not our Kafka, and says why.

Real processes (``sleep``, a Python process dressed with our broker's command line) stand in
for a reused pid and for a running dev broker: what is tested is our guard, not Kafka.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from streams_app.broker import devserver
from streams_app.errors import StreamsAppError


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STREAMS_APP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "120"])
    # Popen can return before the child's /proc/<pid>/cmdline shows the new program (seen once
    # in CI as an empty command); the kernel offers no event for it, so poll with a deadline.
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes().startswith(b"sleep") and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def write_state(state: devserver.DevBrokerState) -> None:
    path = devserver._state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(state)))


def state_for(
    pid: int, root: str, port: int = 19092, started: int | None = None
) -> devserver.DevBrokerState:
    return devserver.DevBrokerState(
        pid=pid,
        bootstrap=f"127.0.0.1:{port}",
        broker_port=port,
        controller_port=port + 1,
        cluster_id="x",
        root=root,
        started=started,
    )


def test_stale_pid_of_another_process_is_not_signalled(
    sleeper: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    info = devserver.process_info(sleeper.pid)
    assert info is not None
    write_state(state_for(sleeper.pid, str(tmp_path / "cluster"), started=info.started))
    stopped, found = devserver.stop()
    assert not stopped
    assert f"pid {sleeper.pid} is now another program (sleep 120)" in found
    assert sleeper.poll() is None  # still running: never signalled
    assert devserver.load_state() is None  # the stale state is gone


@pytest.fixture
def fake_broker(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A process whose command line is our broker's (main class and data dir)."""
    root = str(tmp_path / "cache" / "dev-broker" / "cluster")
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "kafka.Kafka", f"{root}/x.props"]
    )
    try:
        yield proc, root
    finally:
        proc.kill()
        proc.wait()


def test_our_kafka_with_another_start_time_is_not_signalled(
    fake_broker: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, root = fake_broker
    info = devserver.process_info(proc.pid)
    assert info is not None and info.started is not None
    write_state(state_for(proc.pid, root, started=info.started - 1))
    stopped, found = devserver.stop()
    assert not stopped and "started at another time" in found
    assert proc.poll() is None


def test_start_on_another_port_names_the_running_broker_and_stop_signals_it(
    fake_broker: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, root = fake_broker
    info = devserver.process_info(proc.pid)
    assert info is not None
    write_state(state_for(proc.pid, root, port=19092, started=info.started))
    with pytest.raises(StreamsAppError) as error:
        devserver.start(port=19500)
    assert f"a dev broker already runs at 127.0.0.1:19092 (pid {proc.pid})" in str(error.value)
    stopped, found = devserver.stop()
    assert stopped and f"pid {proc.pid}" in found
    assert proc.wait(30) is not None  # verified as ours, so it was signalled


def test_busy_port_is_named_in_one_line() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(StreamsAppError) as error:
            devserver.start(port=port)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(f"port {port} on 127.0.0.1 is in use by pid ")
    assert "python" in message.split(" is in use by ", 1)[1]
