"""The pipeline's HOME: one pipeline at a time, and where its embedded PostgreSQL can be found.

HOME holds the checkpoints, the Parquet table and (by default) the embedded PostgreSQL's data
directory. Two pipelines on one HOME would run the same queries on the same checkpoints (Spark
refuses the second with an error deep in its log) and two PostgreSQL servers on one data
directory (the second fails with a lock error in its own log). So the pipeline takes an
exclusive ``flock`` on ``HOME/.pipeline.lock`` first and a second one stops right there with
"another pipeline is using HOME". The kernel drops the lock when the process dies, however it
dies. ``HOME/pipeline.json`` records the running pipeline's pid and PostgreSQL address, so
``streams-app pipeline query`` can reach the server while a pipeline runs.

A HOME given as a URI (``hdfs://``, ``s3a://``) cannot be locked from here: on a cluster, the
scheduler that submits the job must make sure it runs once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from streams_app.errors import StreamsAppError

LOCK_FILE = ".pipeline.lock"
INFO_FILE = "pipeline.json"


class PipelineHomeBusy(StreamsAppError):
    def __init__(self, home: str, pid: int | None) -> None:
        self.home = home
        self.pid = pid
        who = f" (pid {pid})" if pid else ""
        super().__init__(
            f"another pipeline is using {home}{who}: stop it first, or pass another --home"
        )


def is_local(home: str) -> bool:
    return "://" not in home


class PipelineHome:
    """Hold ``HOME``'s lock while a pipeline (or a query of its PostgreSQL) runs."""

    def __init__(self, home: str) -> None:
        self.home = home
        self._fd: int | None = None

    @property
    def path(self) -> Path:
        return Path(self.home)

    def acquire(self) -> PipelineHome:
        if not is_local(self.home):
            return self
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            info = running_pipeline(self.home) or {}
            raise PipelineHomeBusy(self.home, info.get("pid")) from None
        self._fd = fd
        self.record(None)
        return self

    def record(self, postgres_dsn: str | None) -> None:
        """Note this process and its PostgreSQL address in ``HOME/pipeline.json``."""
        if self._fd is None:
            return
        info = {"pid": os.getpid(), "postgres_dsn": postgres_dsn}
        tmp = self.path / f"{INFO_FILE}.tmp"
        tmp.write_text(json.dumps(info))
        os.replace(tmp, self.path / INFO_FILE)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            (self.path / INFO_FILE).unlink()
        os.close(fd)

    def __enter__(self) -> PipelineHome:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def running_pipeline(home: str) -> dict[str, Any] | None:
    """What ``HOME/pipeline.json`` says about the pipeline running there, if any."""
    try:
        data = json.loads((Path(home) / INFO_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
