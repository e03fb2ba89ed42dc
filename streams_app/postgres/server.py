"""A real PostgreSQL server started by the project's own code, on 127.0.0.1 and a free port.

The tests and the local pipeline need a PostgreSQL to land batches in. Nothing runs one by
default, so this module finds the server binaries (installing Debian's ``postgresql`` package
with ``apt-get`` when they are missing and we may), runs ``initdb`` into a directory of our own
and starts ``postgres`` there, listening on 127.0.0.1 only, with no Unix socket, and trusting
local connections (it is a development server; do not point it at the network).

PostgreSQL refuses to run as root. When we are root the server runs as the ``postgres`` user
(which the Debian package creates), and its directory is owned by that user, so it must not
sit below a directory only root can enter (such as ``/root``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pwd
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from streams_app.errors import ToolchainError
from streams_app.jvm import cache_dir, file_lock

log = logging.getLogger(__name__)

#: Point at a directory holding initdb and postgres to skip the search.
BINDIR_ENV = "STREAMS_APP_PG_BINDIR"
SERVICE_USER = "postgres"
_PR_SET_PDEATHSIG = 1


def find_bindir() -> Path | None:
    """The newest PostgreSQL server bin directory on this machine, if any."""
    explicit = os.environ.get(BINDIR_ENV)
    if explicit:
        if not (Path(explicit) / "initdb").exists():
            raise ToolchainError(f"{BINDIR_ENV}={explicit} holds no initdb; fix or unset it")
        return Path(explicit)
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if debian:
        return debian[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def ensure_installed() -> Path:
    """The server's bin directory, installing Debian's ``postgresql`` package if needed."""
    bindir = find_bindir()
    if bindir:
        return bindir
    apt = shutil.which("apt-get")
    if os.geteuid() != 0 or not apt:
        raise ToolchainError(
            "PostgreSQL's server binaries (initdb, postgres) were not found. Install them "
            "(Debian/Ubuntu: `sudo apt-get install postgresql`), or set "
            f"{BINDIR_ENV} to the directory holding initdb, or pass a DSN of a running server."
        )
    with file_lock(cache_dir() / "postgres-install.lock"):
        bindir = find_bindir()
        if bindir:
            return bindir
        log.warning("PostgreSQL is not installed; installing Debian's postgresql package")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = [apt, "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q", "postgresql"]
        proc = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:  # most often stale package lists: refresh once and retry
            subprocess.run([apt, "update", "-q"], capture_output=True, env=env, check=False)
            proc = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
        bindir = find_bindir()
        if proc.returncode != 0 or bindir is None:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
            raise ToolchainError(f"`apt-get install postgresql` failed:\n{tail}")
        return bindir


class PostgresServer:
    """One PostgreSQL server process with its data directory under ``root``.

    The data directory outlives the process: starting again on the same ``root`` keeps the
    databases (the local pipeline relies on this; tests use a fresh temporary root).

    >>> with PostgresServer(Path("/tmp/pg")) as pg:      # doctest: +SKIP
    ...     psycopg.connect(pg.dsn)
    """

    def __init__(
        self, root: Path, port: int = 0, *, durable: bool = True, die_with_parent: bool = True
    ) -> None:
        self.root = Path(root)
        self.port = port
        #: ``durable=False`` turns fsync off: faster, for throw-away test servers.
        self.durable = durable
        #: False for a server that outlives the process starting it (``streams-app postgres``).
        self.die_with_parent = die_with_parent
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://{SERVICE_USER}@127.0.0.1:{self.port}/postgres"

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> PostgresServer:
        bindir = ensure_installed()
        user = _service_user()
        self.root.mkdir(parents=True, exist_ok=True)
        if user is not None:
            os.chown(self.root, user.pw_uid, user.pw_gid)
            os.chmod(self.root, 0o700)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(bindir, user)
        for attempt in range(3):
            port = self.port or _free_port()
            self._spawn(bindir, user, port)
            try:
                self._wait_ready(port, timeout)
            except ToolchainError:
                self.stop()
                if self.port or attempt == 2 or "could not bind" not in self._log_tail():
                    raise
                continue
            self.port = port
            return self
        raise AssertionError("unreachable")

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT: clients are disconnected, data is flushed)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _initdb(self, bindir: Path, user: pwd.struct_passwd | None) -> None:
        shutil.rmtree(self.data_dir, ignore_errors=True)
        cmd = [
            str(bindir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SERVICE_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            check=False,
            cwd=self.root,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
        )
        if proc.returncode != 0:
            raise ToolchainError(
                f"initdb failed in {self.data_dir} (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()[-800:]}"
            )

    def _spawn(self, bindir: Path, user: pwd.struct_passwd | None, port: int) -> None:
        cmd = [
            str(bindir / "postgres"),
            "-D",
            str(self.data_dir),
            "-c",
            "listen_addresses=127.0.0.1",
            "-p",
            str(port),
            "-c",
            "unix_socket_directories=",
            "-c",
            "max_connections=50",
        ]
        if not self.durable:
            cmd += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.process = subprocess.Popen(
                cmd,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.root,
                start_new_session=True,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
                user=user.pw_uid if user else None,
                group=user.pw_gid if user else None,
                extra_groups=[] if user else None,
            )
        finally:
            log_file.close()

    def _wait_ready(self, port: int, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        dsn = f"postgresql://{SERVICE_USER}@127.0.0.1:{port}/postgres"
        while True:
            if self.process is None or self.process.poll() is not None:
                raise ToolchainError(
                    f"postgres exited during start (see {self.log_path}):\n{self._log_tail()}"
                )
            with contextlib.suppress(psycopg.OperationalError):
                with psycopg.connect(dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                log.info("PostgreSQL ready at 127.0.0.1:%d (data %s)", port, self.data_dir)
                return
            if time.monotonic() > deadline:
                raise ToolchainError(
                    f"postgres did not accept connections on 127.0.0.1:{port} within "
                    f"{timeout:.0f}s (see {self.log_path}):\n{self._log_tail()}"
                )
            time.sleep(0.1)

    def _log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


def _service_user() -> pwd.struct_passwd | None:
    """The user the server runs as: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise ToolchainError(
            "PostgreSQL refuses to run as root and there is no 'postgres' user to run it as. "
            "Install Debian's postgresql package (it creates the user) or run as another user."
        ) from None


def _free_port() -> int:
    from streams_app.broker.cluster import free_port

    return free_port()


def _die_with_parent() -> None:
    """Runs in the child before exec: a fast shutdown if the process that owns it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGINT)
    except OSError:
        pass
