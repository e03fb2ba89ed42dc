"""One Kafka 4.x node (broker and KRaft controller in one JVM) as a child process."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from streams_app.broker.security import BrokerSecurity
from streams_app.errors import ToolchainError
from streams_app.jvm import java_executable

#: Fast start and a small footprint matter more than peak JIT speed on a 2-core test machine.
DEFAULT_JVM_OPTS = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    "-Dlog4j2.formatMsgNoLookups=true",
)
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class NodeAddress:
    node_id: int
    broker_port: int
    controller_port: int
    #: Where the node listens and what it advertises: loopback, or its own address in a
    #: networked cluster (each node in a network namespace, see broker.netns).
    host: str = "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.broker_port}"

    @property
    def voter(self) -> str:
        return f"{self.node_id}@{self.host}:{self.controller_port}"


@dataclass
class KafkaNode:
    """A node's configuration, data directory and (when running) its JVM process.

    The data directory outlives the process, so a killed node restarts with its logs intact,
    the way a crashed broker comes back in production.
    """

    address: NodeAddress
    voters: tuple[NodeAddress, ...]
    root: Path
    libs: Path
    cluster_id: str
    settings: Mapping[str, str]
    heap: str = "512m"
    jvm_opts: tuple[str, ...] = DEFAULT_JVM_OPTS
    die_with_parent: bool = True
    #: TLS/SASL listeners and ACLs instead of one PLAINTEXT listener (see broker.security).
    security: BrokerSecurity | None = None
    #: Put before the JVM's command line (``nsenter --net=...``: run it in its own network
    #: namespace); the process keeps its pid, so signals still reach the JVM.
    command_prefix: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    @property
    def node_id(self) -> int:
        return self.address.node_id

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def config_path(self) -> Path:
        return self.root / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    @property
    def log4j_path(self) -> Path:
        return self.root.parent / "log4j2.properties"

    def properties(self) -> dict[str, str]:
        a = self.address
        props = {
            "process.roles": "broker,controller",
            "node.id": str(a.node_id),
            "controller.quorum.voters": ",".join(v.voter for v in self.voters),
            "listeners": f"PLAINTEXT://{a.host}:{a.broker_port},"
            f"CONTROLLER://{a.host}:{a.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{a.host}:{a.broker_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
        }
        if self.security is not None:
            props.update(self.security.properties(a.broker_port, a.controller_port))
        props.update(self.settings)
        return props

    def write_config(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        lines = [f"{k}={v}" for k, v in self.properties().items()]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _java(self, main: str, *args: str, heap: str) -> list[str]:
        return [
            java_executable(),
            f"-Xms{min(heap, '128m', key=_mb)}",
            f"-Xmx{heap}",
            *self.jvm_opts,
            f"-Dlog4j2.configurationFile={self.log4j_path}",
            f"-Dkafka.logs.dir={self.root}",
            "-cp",
            f"{self.libs}/*",
            main,
            *args,
        ]

    def format(self) -> None:
        """Format the data directory for KRaft (static quorum, so no --standalone)."""
        self.write_config()
        proc = subprocess.run(
            self._java(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(self.config_path),
                "--ignore-formatted",
                *(self.security.format_args() if self.security else ()),
                heap="256m",
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ToolchainError(
                f"formatting Kafka node {self.node_id} failed (exit {proc.returncode}):\n"
                + (proc.stdout + proc.stderr)[-3000:]
            )

    def start(self) -> None:
        if self.running:
            return
        self.write_config()
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it from here on
        try:
            self.process = subprocess.Popen(
                [
                    *self.command_prefix,
                    *self._java("kafka.Kafka", str(self.config_path), heap=self.heap),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        finally:
            log.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM (a controlled shutdown), then SIGKILL if it has not exited after ``grace``."""
        if not self.process:
            return
        if self.process.poll() is None:
            self._signal(signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait()
        self.process = None

    def terminate(self) -> None:
        """Ask for a controlled shutdown without waiting for it."""
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: the broker dies mid-write, as in a power cut."""
        if self.process and self.process.poll() is None:
            self._signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        if self.process and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, sig)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker log yet)"
        return "\n".join(text.splitlines()[-lines:])

    def exit_description(self) -> str | None:
        if self.process and self.process.poll() is not None:
            return f"node {self.node_id} exited with code {self.process.returncode}"
        return None

    def wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.running


def _mb(size: str) -> int:
    unit = size[-1].lower()
    number = int(size[:-1]) if unit in "kmg" else int(size)
    return {"k": number // 1024, "m": number, "g": number * 1024}.get(unit, number // (1 << 20))


def _die_with_parent() -> None:
    """Runs in the child before exec: end the JVM if the test process that owns it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
