"""Worker processes for tests: start ``streams-app -A module worker``, then crash it for real.

Faults that matter for exactly-once (SIGKILL mid-transaction, SIGSTOP past the session timeout)
can only be tested on a real process, so crash tests run workers exactly as production does and
signal them. Readiness is read from the worker's own log lines (events the worker reports), not
guessed with sleeps.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Lines the worker logs at info level that tests wait for.
STARTED = "started; inputs"
#: The process's own line once its partitions are set up: the worker's "<logger>: assigned N
#: partitions (M new tasks), generation G" and the sink's "<logger>: sink S: assigned N
#: partitions of T, claimed ...". Plain "assigned " would also match aiokafka's "Setting newly
#: assigned partitions" and "Revoking previously assigned partitions", counting a revocation as
#: an assignment.
ASSIGNED = ": assigned "
WEB = "web server on http"
_WEB_URL = re.compile(r"web server on (http://\S+) ")


class WorkerProcess:
    def __init__(
        self,
        app: str,
        *,
        state_dir: Path,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        name: str = "worker",
        cwd: Path | None = None,
        argv: Sequence[str] | None = None,
        prefix: Sequence[str] = (),
    ) -> None:
        self.app = app
        #: The command line; None: ``python -m streams_app -A <app> worker`` on ``state_dir``.
        self.argv = list(argv) if argv is not None else None
        #: Put before the command line (``nsenter --net=...``: the worker runs in a network
        #: namespace of its own, and keeps its pid, so signals still reach it).
        self.prefix = list(prefix)
        self.state_dir = state_dir
        self.log_path = log_path
        self.name = name
        self.cwd = cwd or Path.cwd()
        self.env = dict(os.environ)
        # Several workers run on one machine: each web server on a free port (logged as
        # "web server on http://...": see ``web_url``), unless the test chooses one.
        self.env.setdefault("STREAMS_APP_WEB_PORT", "0")
        self.env.update(env or {})
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(self.cwd), self.env.get("PYTHONPATH", "")] if p
        )
        self.process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self.starts = 0

    def start(self) -> WorkerProcess:
        """Start (or restart, on the same state dir) the worker process."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== {self.name} start #{self.starts + 1} =====\n".encode())
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
            )
        self.starts += 1
        return self

    def command(self) -> list[str]:
        if self.argv is not None:
            return [*self.prefix, *self.argv]
        return [
            *self.prefix,
            sys.executable,
            "-m",
            "streams_app",
            "-A",
            self.app,
            "worker",
            "-l",
            "info",
            "--state-dir",
            str(self.state_dir),
        ]

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process else None

    def log_since_start(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_count(self, text: str) -> int:
        return self.log_since_start().count(text)

    def wait_for_log(self, text: str, timeout: float = 60.0, count: int = 1) -> None:
        """Wait until the current run has logged ``text`` ``count`` times."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log_count(text) >= count:
                return
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.process.returncode} before logging {text!r}:"
                    f"\n{self.tail()}"
                )
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} did not log {text!r} in {timeout:.0f}s:\n{self.tail()}")

    def wait_started(self, timeout: float = 60.0) -> None:
        self.wait_for_log(STARTED, timeout)

    def wait_assigned(self, timeout: float = 60.0, count: int = 1) -> None:
        self.wait_for_log(ASSIGNED, timeout, count)

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM: the graceful stop (finish the batch, commit, close)."""
        return self._signal_and_wait(signal.SIGTERM, timeout)

    def kill(self) -> int:
        """SIGKILL: a crash in the middle of whatever the worker was doing."""
        return self._signal_and_wait(signal.SIGKILL, 30.0)

    def pause(self) -> None:
        """SIGSTOP: the process freezes; past the session timeout it is a zombie."""
        self._send(signal.SIGSTOP)

    def resume(self) -> None:
        self._send(signal.SIGCONT)

    def _send(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, sig)

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            os.kill(self.process.pid, sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    @property
    def web_url(self) -> str | None:
        """The address of this run's web server, from its log line (None until logged)."""
        found = _WEB_URL.findall(self.log_since_start())
        return found[-1] if found else None

    def wait_web_url(self, timeout: float = 60.0) -> str:
        self.wait_for_log(WEB, timeout)
        url = self.web_url
        assert url is not None
        return url

    def tail(self, lines: int = 40) -> str:
        text = self.log_since_start()
        return "\n".join(text.splitlines()[-lines:])
