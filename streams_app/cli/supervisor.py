"""``worker --processes N``: one supervisor, N worker processes in the app's consumer group.

The Python answer to Kafka Streams' ``num.stream.threads``. One worker is one event loop on
one core; a machine with more cores runs more workers. The supervisor starts them, keeps them
running and stops them together, so that one Procfile line or one container uses every core.
It processes no records itself and holds no Kafka client: each child is an ordinary worker
(its own transactional producer, consumer-group member, state directory and web server), and
exactly-once holds across them as it holds across workers on different machines.

What each child ``i`` (0 to N-1) gets, from the worker's own settings:

- **state directory** ``<state_dir>/process-<i>``: the process id, lock and RocksDB tables of
  one worker (two workers must never share one). A restarted child finds its own, so it aborts
  its predecessor's open transaction at once and restores only the changelog tail;
- **web port** ``web_port + 1 + i``; the supervisor serves ``web_port`` itself (``/health``,
  ``/ready`` and ``/metrics`` of every child, :mod:`streams_app.cli.supervisor_web`). With
  ``web_port=0`` every one takes a free port (the children's are chosen by the supervisor at
  each start and logged). With ``web_enabled=False`` nobody serves;
- **static membership** ``<group_instance_id>-<i>`` when ``group_instance_id`` is set (each
  member of a group needs its own, and the same one across restarts).

A child that exits while the supervisor runs (a crash, a SIGKILL, the OOM killer) is started
again on its state directory, after 1 s, doubling up to 30 s for a child that keeps dying
within a minute of its start; after 5 such exits in a row the supervisor gives up: it stops
the others and exits with status 1 (the process manager above it decides what next).
SIGTERM or SIGINT to the supervisor reaches every child as SIGTERM: each finishes its batch,
commits and leaves the group (a second signal: they exit without the final commit; a third
kills them). The children run in their own process group, so a terminal's Ctrl-C reaches them
once, through the supervisor, and they get SIGTERM if the supervisor itself dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams_app.aio import within
from streams_app.errors import ConfigError

log = logging.getLogger("streams_app.supervisor")

#: Linux prctl(2) option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def parse_processes(text: str) -> int:
    """``--processes``: a count >= 1, or ``auto`` (one per CPU this process may run on)."""
    if text == "auto":
        return cpus_available()
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigError(
            "processes",
            f"{text!r} is not a number of worker processes",
            "use --processes N (N >= 1) or --processes auto (one per CPU)",
        )
    return count


def cpus_available() -> int:
    """CPUs this process may run on (its affinity mask: taskset, cgroup cpusets), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ChildSpec:
    """What makes child ``index`` a worker of its own (see the module doc)."""

    index: int
    state_dir: Path
    #: None: no web server; 0: a free port, chosen by the supervisor when it starts the child.
    web_port: int | None
    group_instance_id: str | None


def plan_children(
    processes: int,
    *,
    state_dir: Path,
    web_enabled: bool,
    web_port: int,
    group_instance_id: str | None,
) -> list[ChildSpec]:
    return [
        ChildSpec(
            index=i,
            state_dir=state_dir / f"process-{i}",
            web_port=(None if not web_enabled else 0 if web_port == 0 else web_port + 1 + i),
            group_instance_id=None if group_instance_id is None else f"{group_instance_id}-{i}",
        )
        for i in range(processes)
    ]


def free_port(bind: str) -> int:
    """A port nothing listens on now (for a child of a ``web_port=0`` supervisor)."""
    host = "127.0.0.1" if bind in ("", "0.0.0.0", "*") else "::1" if bind == "::" else bind
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class RestartPolicy:
    """When a child that exited is started again, and when the supervisor gives up."""

    #: Seconds before the first restart; doubled for each further exit in a row.
    backoff: float = 1.0
    backoff_max: float = 30.0
    #: A child that ran this long before it exited starts a new count of exits in a row.
    stable_after: float = 60.0
    #: Exits in a row (each within ``stable_after`` of its start) before the supervisor stops.
    max_exits: int = 5

    def delay(self, exits_in_a_row: int) -> float:
        return float(min(self.backoff_max, self.backoff * 2 ** max(0, exits_in_a_row - 1)))


@dataclass
class Child:
    """One worker process of the supervisor, across its restarts."""

    spec: ChildSpec
    process: asyncio.subprocess.Process | None = None
    #: The web port of the current (or last) start; None without a web server.
    port: int | None = None
    starts: int = 0
    started_at: float = 0.0
    exits_in_a_row: int = 0
    last_exit: int | None = None
    #: Monotonic time of the next start while waiting to restart, else None.
    restart_at: float | None = None
    stopped: bool = False

    @property
    def index(self) -> int:
        return self.spec.index

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    def state(self) -> str:
        if self.running:
            return "running"
        if self.restart_at is not None:
            return "restarting"
        return "stopped" if self.stopped else "exited"

    def describe(self, now: float | None = None) -> dict[str, Any]:
        now = time.monotonic() if now is None else now
        about: dict[str, Any] = {
            "process": self.index,
            "state": self.state(),
            "pid": self.pid if self.running else None,
            "starts": self.starts,
            "restarts": self.restarts,
            "last_exit_code": self.last_exit,
            "state_dir": str(self.spec.state_dir),
            "web_port": self.port,
        }
        if self.running:
            about["uptime_s"] = round(now - self.started_at, 1)
        if self.restart_at is not None:
            about["restart_in_s"] = round(max(0.0, self.restart_at - now), 1)
        return about


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux; elsewhere a no-op),
    so that a SIGKILLed supervisor leaves no worker behind holding its partitions."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Supervisor:
    """Runs one worker process per :class:`ChildSpec` until stopped (see the module doc)."""

    specs: Sequence[ChildSpec]
    #: The command line of one child (its spec and the web port chosen for this start).
    command: Callable[[ChildSpec, int | None], list[str]]
    #: Environment variables set for a child on top of the supervisor's own.
    environment: Callable[[ChildSpec], Mapping[str, str]] = lambda spec: {}
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    #: The address children's web servers listen on (to pick free ports on it).
    web_bind: str = "127.0.0.1"
    children: list[Child] = field(init=False)

    def __post_init__(self) -> None:
        self.children = [Child(spec) for spec in self.specs]
        self._stop = asyncio.Event()
        self._signals = 0
        #: Why the supervisor gave up on a child (None while it has not).
        self.gave_up: str | None = None

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # -- running -------------------------------------------------------------------------

    async def run(self, *, handle_signals: bool = True) -> int:
        """Start every child, keep them running until a signal or :meth:`request_stop`, stop
        them; the exit status: 0 when every child stopped cleanly, else 1 (or 130 when the
        children were told to exit without their final commit)."""
        if handle_signals:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.on_signal, sig)
        log.info(
            "supervisor (pid %d): %d worker processes: %s",
            os.getpid(),
            len(self.children),
            "; ".join(self._plan_text(child.spec) for child in self.children),
        )
        await asyncio.gather(*(self._keep(child) for child in self.children))
        if self.gave_up is not None:
            return 1
        if self._signals > 1:
            return 130
        # Killed by the supervisor's own SIGTERM: a child stopped before it set up its handler.
        clean = (0, -signal.SIGTERM)
        return 0 if all(child.last_exit in clean for child in self.children) else 1

    def _plan_text(self, spec: ChildSpec) -> str:
        parts = [f"process {spec.index}: state dir {spec.state_dir}"]
        if spec.web_port is not None:
            parts.append(f"web port {spec.web_port or 'any free'}")
        if spec.group_instance_id is not None:
            parts.append(f"group_instance_id {spec.group_instance_id}")
        return ", ".join(parts)

    async def _keep(self, child: Child) -> None:
        """Start ``child``, and start it again whenever it exits, until stopping."""
        policy = self.policy
        while not self.stopping:
            await self._start(child)
            assert child.process is not None
            if self.stopping:  # the stop came while it was being started: it missed the signal
                with contextlib.suppress(ProcessLookupError):
                    child.process.send_signal(signal.SIGTERM)
            code = await child.process.wait()
            child.last_exit = code
            if self.stopping:
                break
            ran = time.monotonic() - child.started_at
            child.exits_in_a_row = 1 if ran >= policy.stable_after else child.exits_in_a_row + 1
            how = f"killed by {_signal_name(-code)}" if code < 0 else f"exit status {code}"
            if child.exits_in_a_row >= policy.max_exits:
                self.gave_up = (
                    f"process {child.index} exited {child.exits_in_a_row} times in a row, each "
                    f"within {policy.stable_after:g} s of its start (last: {how})"
                )
                log.error("%s: giving up, stopping the other worker processes", self.gave_up)
                self._stop_children()
                break
            delay = policy.delay(child.exits_in_a_row)
            log.warning(
                "worker process %d (pid %s) exited after %.1f s (%s): restarting it in %.1f s "
                "on its state directory",
                child.index,
                child.pid,
                ran,
                how,
                delay,
            )
            child.restart_at = time.monotonic() + delay
            with contextlib.suppress(TimeoutError):
                await within(self._stop.wait(), delay)
            child.restart_at = None
        child.stopped = True

    async def _start(self, child: Child) -> None:
        spec = child.spec
        port = spec.web_port
        if port == 0:
            port = free_port(self.web_bind)
        env = dict(os.environ)
        env.update(self.environment(spec))
        child.port = port
        child.process = await asyncio.create_subprocess_exec(
            *self.command(spec, port),
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            # Its own process group: a terminal's Ctrl-C reaches the supervisor only, which
            # passes it on once (a second one would skip the worker's final commit).
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        child.starts += 1
        child.started_at = time.monotonic()
        log.info(
            "worker process %d %s (pid %d%s)%s",
            child.index,
            "started" if child.starts == 1 else "restarted",
            child.process.pid,
            f", restart {child.restarts}" if child.restarts else "",
            f", web port {port}" if port is not None else "",
        )

    # -- stopping ------------------------------------------------------------------------

    def on_signal(self, sig: int) -> None:
        self._signals += 1
        name = _signal_name(sig)
        if self._signals == 1:
            log.info(
                "%s: stopping %d worker processes (each finishes its batch, commits, closes)",
                name,
                sum(child.running for child in self.children),
            )
            self._stop_children()
        elif self._signals == 2:
            log.warning("second %s: the worker processes exit without a final commit", name)
            self._signal_children(signal.SIGTERM)
        else:
            log.warning("%s again: killing the worker processes", name)
            self._signal_children(signal.SIGKILL)

    def request_stop(self) -> None:
        """Stop every child gracefully (as a first SIGTERM does)."""
        if not self.stopping:
            self._stop_children()

    def _stop_children(self) -> None:
        self._stop.set()
        self._signal_children(signal.SIGTERM)

    def _signal_children(self, sig: int) -> None:
        for child in self.children:
            if child.running and child.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    child.process.send_signal(sig)

    def describe(self) -> list[dict[str, Any]]:
        now = time.monotonic()
        return [child.describe(now) for child in self.children]


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def child_command_line(
    argv: Sequence[str], *, module_cli: bool, spec: ChildSpec, port: int | None
) -> list[str]:
    """The command line that runs child ``spec`` of ``streams-app ... worker --processes N``:
    the supervisor's own arguments without ``--processes`` and ``-W``, then the child's state
    directory, web port and index (given last, so they win over the same options before)."""

    args: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        # --processes: a child is one worker. -W: the supervisor changed directory already,
        # and its children start in the directory it is in.
        if arg in ("--processes", "-W", "--workdir"):
            skip = True
            continue
        if arg.startswith(("--processes=", "--workdir=")):
            continue
        args.append(arg)
    if module_cli:
        prefix = ["-m", "streams_app"]
    else:
        # ``python app.py worker`` (app.main()), or ``python -m package.app worker``.
        orig = list(getattr(sys, "orig_argv", []))
        prefix = orig[1:3] if len(orig) > 2 and orig[1] == "-m" else [sys.argv[0]]
    tail = ["--state-dir", str(spec.state_dir), "--process-index", str(spec.index)]
    if port is not None:
        tail += ["--web-port", str(port)]
    return [sys.executable, *prefix, *args, *tail]
