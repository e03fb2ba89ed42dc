"""``streams-app broker start|stop|status``: a long-lived local broker for development.

Unlike the test fixtures, this broker outlives the command that started it, keeps its data
between ``stop`` and ``start`` and listens on a fixed port (9092 unless told otherwise), so
``broker="kafka://localhost:9092"`` in a topology just works.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from streams_app.broker.cluster import EmbeddedKafka, free_port
from streams_app.broker.probe import cluster_view
from streams_app.errors import StreamsAppError
from streams_app.jvm import cache_dir


@dataclass
class DevBrokerState:
    pid: int
    bootstrap: str
    broker_port: int
    controller_port: int
    cluster_id: str
    root: str


def _home() -> Path:
    return cache_dir() / "dev-broker"


def _state_path() -> Path:
    return _home() / "state.json"


def load_state() -> DevBrokerState | None:
    try:
        return DevBrokerState(**json.loads(_state_path().read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def status() -> tuple[DevBrokerState | None, bool]:
    """The recorded broker, and whether it answers metadata requests right now."""
    state = load_state()
    if state is None or not _alive(state.pid):
        return state, False
    return state, cluster_view(state.bootstrap, timeout=2.0) is not None


def start(port: int = 9092, fresh: bool = False, timeout: float = 90.0) -> DevBrokerState:
    state, answering = status()
    if state and answering:
        return state
    if state and _alive(state.pid):
        stop()
    home = _home()
    root = home / "cluster"
    if fresh or state is None or state.broker_port != port:
        shutil.rmtree(root, ignore_errors=True)
        state = None
    broker_port = port if port else free_port()
    kafka = EmbeddedKafka(
        1,
        root=root,
        broker_port=broker_port,
        controller_port=state.controller_port if state else free_port(),
        cluster_id=state.cluster_id if state else None,
        die_with_parent=False,
    )
    try:
        kafka.start(timeout=timeout)
    except OSError as exc:
        raise StreamsAppError(
            f"could not start the broker on 127.0.0.1:{broker_port}: {exc}"
        ) from exc
    node = kafka.node(1)
    assert node.pid is not None
    new_state = DevBrokerState(
        pid=node.pid,
        bootstrap=kafka.bootstrap_servers,
        broker_port=kafka.addresses[0].broker_port,
        controller_port=kafka.addresses[0].controller_port,
        cluster_id=kafka.cluster_id,
        root=str(root),
    )
    home.mkdir(parents=True, exist_ok=True)
    _state_path().write_text(json.dumps(asdict(new_state), indent=2))
    return new_state


def stop(grace: float = 20.0) -> bool:
    state = load_state()
    if state is None or not _alive(state.pid):
        return False
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while _alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
        _reap(state.pid)
    if _alive(state.pid):
        os.kill(state.pid, signal.SIGKILL)
    return True


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def log_path() -> Path:
    return _home() / "cluster" / "node-1" / "server.log"
