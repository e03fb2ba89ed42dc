"""Running one Faust app as a real worker process, under faust-streaming or under streams_app.

Under streams_app the app's source is rewritten by ``rewrite.to_streams_app`` (its import lines
only) and nothing else changes: the same file name, the same command line
(``python app.py worker -l info``, or ``-A module worker`` for apps without ``app.main()``),
the broker given in the environment each framework reads (``BROKER_URL`` for Faust,
``STREAMS_APP_BROKER`` for streams_app).

What an app prints is collected from its output: streams_app leaves ``print`` alone; a Faust
worker turns it into log records at WARNING level (``[time] [pid] [WARNING] text``), which are
turned back into the printed text here.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from streams_app.broker.cluster import free_port
from tests.faust_conformance.rewrite import changed_lines, to_streams_app

FAUST = "faust"
STREAMS_APP = "streams_app"
SYSTEMS = (FAUST, STREAMS_APP)

_FAUST_PRINT = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[\d+\] \[WARNING\] (.*)$")
_FAUST_LOG = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[\d+\] \[[A-Z]+\] ")
_OUR_LOG = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ [A-Z]+ [\w.]+: ")


class AppProcess:
    """One app under one system, in its own working directory."""

    def __init__(
        self,
        system: str,
        source: Path,
        workdir: Path,
        bootstrap: str,
        *,
        module_style: bool = False,
        extra_files: Sequence[Path] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.system = system
        self.workdir = workdir
        self.bootstrap = bootstrap
        self.module_style = module_style
        workdir.mkdir(parents=True, exist_ok=True)
        self.file = workdir / source.name
        text = source.read_text()
        if system == STREAMS_APP:
            rewritten = to_streams_app(text)
            for before, after in changed_lines(text, rewritten):
                assert "import" in before and "import" in after, (before, after)
            text = rewritten
        self.file.write_text(text)
        for extra in extra_files:
            shutil.copy(extra, workdir / extra.name)
        self.env = dict(os.environ)
        self.env.pop("PYTHONPATH", None)
        self.env.update(
            {
                "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": str(workdir),
                # Faust's settings from the environment, and ours.
                "BROKER_URL": f"kafka://{bootstrap}",
                # A killed Faust worker leaves the group within 10 s, not Faust's 60.
                "BROKER_SESSION_TIMEOUT": "10",
                "BROKER_HEARTBEAT_INTERVAL": "2",
                "STREAMS_APP_BROKER": bootstrap,
                "STREAMS_APP_STATE_DIR": str(workdir / "state"),
                "STREAMS_APP_COMMIT_INTERVAL": "0.1",
            }
        )
        self.env.update(env or {})
        self.log_path = workdir / f"{system}.log"
        self.process: subprocess.Popen[bytes] | None = None
        #: The worker's web server (both frameworks serve the app's pages there).
        self.web_port: int | None = None

    @property
    def module(self) -> str:
        return self.file.stem

    def _argv(self, *args: str) -> list[str]:
        if self.module_style:
            runner = "faust" if self.system == FAUST else "streams_app"
            return [sys.executable, "-m", runner, "-A", self.module, *args]
        return [sys.executable, str(self.file), *args]

    def start(self) -> AppProcess:
        """The worker, with its web server on a free port of 127.0.0.1 (the app's pages)."""
        self.web_port = free_port()
        web = ["--web-port", str(self.web_port), "--web-bind", "127.0.0.1"]
        web += ["--web-host", "127.0.0.1"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self._argv("worker", "-l", "info", *web),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.workdir,
            )
        return self

    def run_command(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """``python app.py <command> ...``: an app command, to completion."""
        return subprocess.run(
            self._argv(*args),
            capture_output=True,
            text=True,
            env=self.env,
            cwd=self.workdir,
            timeout=timeout,
            check=False,
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def printed(self) -> list[str]:
        """What the app printed, in order (Faust's log prefix removed)."""
        lines = []
        in_print = False
        for line in self.output().splitlines():
            if self.system == FAUST:
                if match := _FAUST_PRINT.match(line):
                    lines.append(match.group(1).rstrip())
                    in_print = True
                elif _FAUST_LOG.match(line):
                    in_print = False
                elif in_print and not line.startswith(("[20", "+ƒaµS†")):
                    lines.append(line.rstrip())
            elif not _OUR_LOG.match(line) and not line.startswith(("Traceback", "  ")):
                lines.append(line.rstrip())
        return lines

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])


async def wait_for(predicate: object, timeout: float, what: str, proc: AppProcess) -> None:
    """Poll ``predicate`` (sync or async) until true; the app's output tail on failure."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate() if callable(predicate) else predicate  # type: ignore[operator]
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if proc.process is not None and proc.process.poll() is not None:
            raise AssertionError(
                f"{proc.system} exited ({proc.process.returncode}) before {what}:\n{proc.tail()}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"{proc.system}: not {what} after {timeout:.0f}s:\n{proc.tail()}")
        await asyncio.sleep(0.25)
