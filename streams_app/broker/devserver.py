"""``streams-app broker start|stop|status``: a long-lived local broker for development.

Unlike the test fixtures, this broker outlives the command that started it, keeps its data
between ``stop`` and ``start`` and listens on a fixed port (9092 unless told otherwise), so
``broker="kafka://localhost:9092"`` in a topology just works.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from streams_app import devstate
from streams_app.broker.cluster import EmbeddedKafka, free_port
from streams_app.broker.probe import cluster_view
from streams_app.errors import StreamsAppError
from streams_app.jvm import cache_dir

#: The main class our broker JVM runs (streams_app.broker.node).
KAFKA_MAIN = "kafka.Kafka"


@dataclass
class DevBrokerState:
    pid: int
    bootstrap: str
    broker_port: int
    controller_port: int
    cluster_id: str
    root: str
    #: The process's start time (clock ticks after boot, /proc/<pid>/stat field 22): a pid the
    #: kernel reused for another process has another start time.
    started: int | None = None


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    command: str
    started: int | None


def process_info(pid: int) -> ProcessInfo | None:
    """The command line and start time of a running process (Linux /proc), or None."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    command = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    # The comm field may hold spaces and parentheses: the fields after it follow the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    started = int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None
    return ProcessInfo(pid, command, started)


def is_our_broker(state: DevBrokerState) -> tuple[bool, str]:
    """Is ``state.pid`` the Kafka we started? (verdict, what the process is, for messages)."""
    info = process_info(state.pid)
    if info is None:
        return False, f"pid {state.pid} is not running"
    short = info.command if len(info.command) <= 120 else info.command[:117] + "..."
    if KAFKA_MAIN not in info.command.split() or state.root not in info.command:
        return False, f"pid {state.pid} is now another program ({short})"
    if state.started is not None and info.started != state.started:
        return False, f"pid {state.pid} runs Kafka on our data, but started at another time"
    return True, f"pid {state.pid} ({short})"


def _home() -> Path:
    return cache_dir() / "dev-broker"


def _state_path() -> Path:
    return _home() / "state.json"


def load_state() -> DevBrokerState | None:
    return devstate.load(_state_path(), DevBrokerState)


def status() -> tuple[DevBrokerState | None, bool]:
    """The recorded broker, and whether it is ours and answers metadata requests right now."""
    state = load_state()
    if state is None or not is_our_broker(state)[0]:
        return state, False
    return state, cluster_view(state.bootstrap, timeout=2.0) is not None


def port_owner(port: int, host: str = "127.0.0.1") -> str | None:
    """Who listens on ``host:port``: None when the port is free, else a one-line description
    ("pid N (command)" where /proc tells, else "another process")."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            pass
        else:
            return None
    inode = _listening_inode(port)
    pid = _pid_of_inode(inode) if inode else None
    info = process_info(pid) if pid else None
    if info is None:
        return "another process"
    command = info.command if len(info.command) <= 100 else info.command[:97] + "..."
    return f"pid {info.pid} ({command})"


def _listening_inode(port: int) -> str | None:
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                return parts[9]
    return None


def _pid_of_inode(inode: str) -> int | None:
    target = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) == target:
                    return int(proc.name)
        except OSError:
            continue
    return None


def start(port: int = 9092, fresh: bool = False, timeout: float = 90.0) -> DevBrokerState:
    state, answering = status()
    running = state is not None and is_our_broker(state)[0]
    if state and running and port and state.broker_port != port:
        raise StreamsAppError(
            f"a dev broker already runs at {state.bootstrap} (pid {state.pid}); "
            f"stop it first (streams-app broker stop) or use --port {state.broker_port}"
        )
    if state and answering:
        return state
    if state and running:
        stop()
    home = _home()
    root = home / "cluster"
    if fresh or state is None or state.broker_port != port:
        shutil.rmtree(root, ignore_errors=True)
        state = None
    broker_port = port if port else free_port()
    controller_port = state.controller_port if state else free_port()
    for number, role in ((broker_port, "port"), (controller_port, "controller port")):
        owner = port_owner(number)
        if owner is not None:
            raise StreamsAppError(
                f"{role} {number} on 127.0.0.1 is in use by {owner}; stop it or choose "
                "another port (streams-app broker start --port P)"
            )
    kafka = EmbeddedKafka(
        1,
        root=root,
        broker_port=broker_port,
        controller_port=controller_port,
        cluster_id=state.cluster_id if state else None,
        die_with_parent=False,
    )
    try:
        kafka.start(timeout=timeout)
    except OSError as exc:
        raise StreamsAppError(
            f"could not start the broker on 127.0.0.1:{broker_port}: {exc}"
        ) from exc
    except StreamsAppError as exc:
        if "Address already in use" in str(exc):  # lost a race for the port: one line
            owner = port_owner(broker_port) or port_owner(controller_port) or "another process"
            raise StreamsAppError(
                f"port {broker_port} or {controller_port} on 127.0.0.1 is in use by {owner}"
            ) from None
        raise
    node = kafka.node(1)
    assert node.pid is not None
    info = process_info(node.pid)
    new_state = DevBrokerState(
        pid=node.pid,
        bootstrap=kafka.bootstrap_servers,
        broker_port=kafka.addresses[0].broker_port,
        controller_port=kafka.addresses[0].controller_port,
        cluster_id=kafka.cluster_id,
        root=str(root),
        started=info.started if info else None,
    )
    devstate.save(_state_path(), new_state)
    return new_state


def stop(grace: float = 20.0) -> tuple[bool, str]:
    """Stop the recorded broker if, and only if, its pid is still our Kafka.

    A state file outlives reboots and crashes, and the kernel reuses pids: the pid it names
    may now belong to anything. So before any signal the process's command line must name our
    Kafka main class and our data directory, and its start time must be the one recorded.
    Returns (stopped, what was found).
    """
    state = load_state()
    if state is None:
        return False, "no broker was started here"
    ours, found = is_our_broker(state)
    if not ours:
        _state_path().unlink(missing_ok=True)  # stale: it describes nothing that runs
        return False, f"no broker stopped: {found}; removed the stale state {_state_path()}"
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while devstate.pid_alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
        _reap(state.pid)
    if devstate.pid_alive(state.pid):
        os.kill(state.pid, signal.SIGKILL)
    return True, f"stopped {found}"


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def log_path() -> Path:
    return _home() / "cluster" / "node-1" / "server.log"
