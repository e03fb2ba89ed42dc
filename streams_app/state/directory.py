"""A worker's state directory: its lock, its persistent process id, and where tables live.

Layout::

    <root>/<app_id>/
        .lock                       exclusive flock while a worker runs (holds its pid, for errors)
        process-id                  uuid4 hex, created once, never changed
        left-open.json              only while a transaction given up may still be open somewhere
                                    (runtime/left_open_file.py): checked at the next start
        tables/<table>/<partition>/ one RocksDB database per table partition

**Why a lock.** Two workers sharing one directory would write the same RocksDB files and, worse,
share a process id and so a ``transactional.id``: each would fence the other in a loop. The
lock is a ``flock`` on ``.lock``: the kernel drops it when the process dies however it dies
(SIGKILL included), so a stale lock never blocks a restart. ``flock`` locks belong to an open
file, not to a process, so a second :class:`StateDirectory` on the same path fails inside one
process too.

**Why a persistent process id.** The runtime's transactional id is ``<app id>-<process id>``.
A worker restarted on the same directory gets the same id, so its producer's InitProducerId
fences its previous incarnation and aborts the transaction that one left open *at once*, instead
of waiting ``transaction.timeout.ms`` for the broker to time it out (Kafka Streams keeps its
process id in the state directory for the same reason). Another directory means another id:
workers never fence each other.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import uuid
from pathlib import Path
from types import TracebackType

from streams_app.errors import ConfigError

LOCK_FILE = ".lock"
PROCESS_ID_FILE = "process-id"
TABLES_DIR = "tables"

_PROCESS_ID = re.compile(r"^[0-9a-f]{32}$")


def _check_name(kind: str, name: str) -> None:
    if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise ConfigError(
            kind,
            f"{name!r} cannot name a directory",
            f"choose a {kind} without '/', '\\' or NUL that is not '.' or '..'",
        )


class StateDirectory:
    """Opens (creating if needed) and locks ``<root>/<app_id>/``; :meth:`close` unlocks it."""

    def __init__(self, root: Path | str, app_id: str) -> None:
        _check_name("app id", app_id)
        self.root = Path(root)
        self.app_id = app_id
        self.path = self.root / app_id
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                "state_dir",
                f"cannot create the state directory {self.path}: {exc.strerror}",
                "point --state-dir at a writable directory",
            ) from exc
        self._lock_fd: int | None = self._lock()
        try:
            self.process_id: str = self._load_process_id()
        except BaseException:
            self.close()
            raise

    def _lock(self) -> int:
        lock_path = self.path / LOCK_FILE
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError, ValueError):
                pid = int(os.pread(fd, 32, 0).decode().strip())
                holder = f" (pid {pid})"
            os.close(fd)
            raise ConfigError(
                "state_dir",
                f"the state directory {self.path} is in use by another worker{holder}; two "
                "workers must never share one: they would corrupt each other's RocksDB state "
                "and fence each other's transactions",
                "give each worker its own --state-dir (or state_dir=...), or stop the other "
                "worker first",
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def _load_process_id(self) -> str:
        path = self.path / PROCESS_ID_FILE
        try:
            existing = path.read_text().strip()
        except FileNotFoundError:
            existing = ""
        if _PROCESS_ID.match(existing):
            return existing
        # Written durably, so a crash leaves either no id or a whole one.
        process_id = uuid.uuid4().hex
        write_durably(path, process_id + "\n")
        return process_id

    @property
    def locked(self) -> bool:
        return self._lock_fd is not None

    @property
    def tables_path(self) -> Path:
        return self.path / TABLES_DIR

    def table_path(self, table: str) -> Path:
        """Where a table's partitions live (``tables/<table>/``, each in ``<partition>/``)."""
        _check_name("table name", table)
        return self.tables_path / table

    def partition_path(self, table: str, partition: int) -> Path:
        return self.table_path(table) / str(partition)

    def transactional_id(self) -> str:
        """``<app id>-<process id>``: what the runtime's transactional producer uses."""
        return f"{self.app_id}-{self.process_id}"

    def close(self) -> None:
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the only descriptor releases the flock

    def __enter__(self) -> StateDirectory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StateDirectory({str(self.path)!r}, process_id={self.process_id!r})"


def write_durably(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash, of the process or of the machine, leaves
    the old file or the new one, never half of one: a temporary file, fsynced, renamed over
    it, the directory fsynced (the files of the state directory that outlive a process)."""
    tmp = path.with_name(f"{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """A rename or a removal in ``directory`` survives a crash of the machine."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some file systems refuse fsync on a directory
            os.fsync(fd)
    finally:
        os.close(fd)
