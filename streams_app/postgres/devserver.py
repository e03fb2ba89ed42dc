"""``streams-app postgres start|stop|status``: a long-lived local PostgreSQL for development.

The same server the tests start (:mod:`streams_app.postgres.server`), but it outlives the
command, keeps its data between ``stop`` and ``start`` and listens on a fixed port (5432 unless
told otherwise), trusting local connections as user ``postgres``: so the topologies' default
``postgres_dsn`` (``postgresql://postgres@127.0.0.1:5432/postgres``) just works, as the broker
does with ``streams-app broker start``. A development server: never expose it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from streams_app import devstate
from streams_app.jvm import cache_dir
from streams_app.postgres.server import PostgresServer


@dataclass
class DevPostgresState:
    pid: int
    port: int
    dsn: str
    root: str


def _home() -> Path:
    if os.geteuid() == 0:
        # The server runs as the 'postgres' user, which cannot enter /root (the cache's home).
        return Path("/var/lib/streams_app/dev-postgres")
    return cache_dir() / "dev-postgres"


def _state_path() -> Path:
    return cache_dir() / "dev-postgres.json"


def load_state() -> DevPostgresState | None:
    return devstate.load(_state_path(), DevPostgresState)


def _is_our_postgres(state: DevPostgresState) -> bool:
    """The recorded pid is alive *and* still a postgres on our data directory (pids recycle)."""
    if not devstate.pid_alive(state.pid):
        return False
    try:
        cmdline = Path(f"/proc/{state.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        bool(cmdline)
        and cmdline[0].endswith(b"postgres")
        and state.root.encode() in b" ".join(cmdline)
    )


def status() -> DevPostgresState | None:
    state = load_state()
    return state if state is not None and _is_our_postgres(state) else None


def start(port: int = 5432, fresh: bool = False) -> DevPostgresState:
    running = status()
    if running is not None:
        return running
    root = _home()
    if fresh:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    server = PostgresServer(root, port, die_with_parent=False).start()
    assert server.process is not None
    state = DevPostgresState(server.process.pid, server.port, server.dsn, str(root))
    devstate.save(_state_path(), state)
    return state


def stop(grace: float = 30.0) -> bool:
    """Fast shutdown (SIGINT), as PostgresServer.stop does."""
    state = load_state()
    if state is None or not _is_our_postgres(state):
        _state_path().unlink(missing_ok=True)
        return False
    os.kill(state.pid, signal.SIGINT)
    deadline = time.monotonic() + grace
    while devstate.pid_alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(state.pid, os.WNOHANG)
    if devstate.pid_alive(state.pid):
        os.kill(state.pid, signal.SIGKILL)
    _state_path().unlink(missing_ok=True)
    return True
