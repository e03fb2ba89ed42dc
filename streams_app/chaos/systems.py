"""The systems under test: streams_app and faust-streaming running the same EOS test topology.

A :class:`System` knows everything the run and the verifier need that differs between the two:
topic and group names, how to start a worker process, which transactional id a worker uses (for
the transaction-coordinator fault), where a worker keeps its tables and how to read them back,
and its timeouts (for the liveness bound). Everything else, the generator, the faults and the
verifier, is shared, so both rows of the result table come from the same code.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from streams_app.testing.workers import WorkerProcess

STREAMS_APP = "streams_app"
FAUST = "faust-streaming"

TABLES = ("sum", "min", "cnt", "max")


@dataclass(frozen=True)
class Topics:
    data: str
    echo: str
    sum: str
    min: str
    cnt: str
    max: str
    repartition: str
    #: Table name (sum, min, cnt, max) -> its changelog topic.
    changelogs: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, suffix: str, app: str, repartition: str) -> Topics:
        """The EOS test topics: named alike for both systems, all but the repartition topic."""
        return cls(
            data=f"data-{suffix}",
            echo=f"echo-{suffix}",
            sum=f"sum-{suffix}",
            min=f"min-{suffix}",
            cnt=f"cnt-{suffix}",
            max=f"max-{suffix}",
            repartition=repartition,
            changelogs={t: f"{app}-{t}-changelog" for t in TABLES},
        )

    @property
    def external(self) -> list[str]:
        """Topics the run creates before any worker starts (the app creates its own)."""
        return [self.data, self.echo, self.sum, self.min, self.cnt, self.max]

    @property
    def inputs(self) -> list[str]:
        """What the consumer group consumes (and commits offsets for)."""
        return [self.data, self.repartition]

    @property
    def outputs(self) -> list[str]:
        """Everything the topology writes, in transactions."""
        return [
            self.echo,
            self.sum,
            self.min,
            self.cnt,
            self.repartition,
            self.max,
            *self.changelogs.values(),
        ]


@dataclass(frozen=True)
class StoreSnapshot:
    """One table partition as a worker left it on disk."""

    worker: str
    table: str
    partition: int
    #: The next changelog offset the data does not contain (None: the store keeps none).
    changelog_offset: int | None
    items: dict[bytes, bytes]


@dataclass
class WorkerSettings:
    session_timeout: float
    heartbeat_interval: float
    transaction_timeout: float
    commit_interval: float | None
    replication_factor: int
    #: Warm copies of each task's tables on other workers (0: none).
    standby_replicas: int = 0
    #: Static group membership: worker i joins as ``worker-<i>`` (group.instance.id).
    static_membership: bool = False
    #: None: exactly-once (each system's own). Another guarantee only to show that the
    #: verifier catches what it lets through (tests/chaos/test_chaos.py).
    processing_guarantee: str | None = None


class System:
    name: str
    group_id: str
    topics: Topics
    #: Whether outputs carry ``txn_id`` headers (one transactional id per worker).
    has_txn_headers: bool

    def __init__(self, bootstrap: str, suffix: str, workdir: Path, settings: WorkerSettings):
        self.bootstrap = bootstrap
        self.suffix = suffix
        self.workdir = workdir
        self.settings = settings
        #: Networked mode: the command prefix that runs worker i in its network namespace.
        self.command_prefix: Callable[[int], list[str]] | None = None

    def prefix(self, index: int) -> list[str]:
        return self.command_prefix(index) if self.command_prefix is not None else []

    @property
    def transaction_timeout(self) -> float:
        return self.settings.transaction_timeout

    def state_dir(self, index: int) -> Path:
        return self.workdir / f"worker-{index}" / "state"

    def log_path(self, index: int) -> Path:
        return self.workdir / f"worker-{index}.log"

    def worker(self, index: int) -> WorkerProcess:
        raise NotImplementedError

    def transactional_id(self, index: int) -> str:
        raise NotImplementedError

    def stores(self, index: int) -> Iterator[StoreSnapshot]:
        raise NotImplementedError

    def restore_seconds(self, log_text: str) -> list[float]:
        return []


async def wait_transactional_id(system: System, index: int, timeout: float = 90.0) -> str:
    """The worker's transactional id, read from its state directory. A worker restarted after a
    state wipe writes its new process id only once it has started (slowly on a loaded machine):
    wait for the file rather than fail the fault."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return system.transactional_id(index)
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.2)  # polling a file the worker writes; no event to await


def _env() -> dict[str, str]:
    """The worker's environment: this interpreter's, with the repository on the path."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


class StreamsAppSystem(System):
    name = STREAMS_APP
    has_txn_headers = True
    module = "topologies.eos_test"

    def __init__(self, bootstrap: str, suffix: str, workdir: Path, settings: WorkerSettings):
        super().__init__(bootstrap, suffix, workdir, settings)
        app = f"eos-test-{suffix}"
        self.app_id = app
        self.group_id = app
        # Named after the re-keying agent, as Faust names it: <agent>-<source>-<label>-repartition.
        self.topics = Topics.of(
            suffix, app, repartition=f"{self.module}.maximum-data-{suffix}-bucket-repartition"
        )

    def worker(self, index: int) -> WorkerProcess:
        s = self.settings
        env = {
            "STREAMS_APP_BROKER": self.bootstrap,
            "EOS_TEST_SUFFIX": self.suffix,
            "STREAMS_APP_TOPIC_REPLICATION_FACTOR": str(s.replication_factor),
            "STREAMS_APP_TRANSACTION_HEADERS": "1",
            "STREAMS_APP_SESSION_TIMEOUT": str(s.session_timeout),
            "STREAMS_APP_HEARTBEAT_INTERVAL": str(s.heartbeat_interval),
            "STREAMS_APP_TRANSACTION_TIMEOUT": str(s.transaction_timeout),
        }
        if s.commit_interval is not None:
            env["STREAMS_APP_COMMIT_INTERVAL"] = str(s.commit_interval)
        if s.standby_replicas:
            env["STREAMS_APP_TABLE_STANDBY_REPLICAS"] = str(s.standby_replicas)
        if s.static_membership:
            env["STREAMS_APP_GROUP_INSTANCE_ID"] = f"worker-{index}"
        if s.processing_guarantee is not None:
            env["STREAMS_APP_PROCESSING_GUARANTEE"] = s.processing_guarantee
        return WorkerProcess(
            self.module,
            state_dir=self.state_dir(index),
            log_path=self.log_path(index),
            env={**_env(), **env},
            name=f"{self.name}-worker-{index}",
            prefix=self.prefix(index),
        )

    def transactional_id(self, index: int) -> str:
        path = self.state_dir(index) / self.app_id / "process-id"
        return f"{self.app_id}-{path.read_text().strip()}"

    def stores(self, index: int) -> Iterator[StoreSnapshot]:
        from streams_app.state.rocksdb import RocksDBStorePartition

        tables = self.state_dir(index) / self.app_id / "tables"
        for table in TABLES:
            root = tables / table
            if not root.is_dir():
                continue
            for part_dir in sorted(root.iterdir()):
                if not part_dir.name.isdigit():
                    continue
                part = RocksDBStorePartition(part_dir)
                try:
                    yield StoreSnapshot(
                        worker=f"worker-{index}",
                        table=table,
                        partition=int(part_dir.name),
                        changelog_offset=part.changelog_offset,
                        items=dict(part.items()),
                    )
                finally:
                    part.close()

    _RESTORED = re.compile(r"restored \S+: \d+ record\(s\), offsets .* in ([0-9.]+)s")

    def restore_seconds(self, log_text: str) -> list[float]:
        return [float(m.group(1)) for m in self._RESTORED.finditer(log_text)]


class FaustSystem(System):
    name = FAUST
    has_txn_headers = False
    module = "topologies.eos_test_faust"
    #: faust-streaming does not let the transaction timeout be set: aiokafka's default applies.
    FAUST_TRANSACTION_TIMEOUT = 60.0

    def __init__(self, bootstrap: str, suffix: str, workdir: Path, settings: WorkerSettings):
        super().__init__(bootstrap, suffix, workdir, settings)
        app = f"eos-faust-{suffix}"
        self.app_id = app
        self.group_id = app
        self.topics = Topics.of(
            suffix, app, repartition=f"{self.module}.maximum-data-{suffix}-bucket-repartition"
        )

    @property
    def transaction_timeout(self) -> float:
        return self.FAUST_TRANSACTION_TIMEOUT

    def worker(self, index: int) -> WorkerProcess:
        s = self.settings
        env = {
            "FAUST_BROKER": self.bootstrap,
            "EOS_TEST_SUFFIX": self.suffix,
            "FAUST_REPLICATION_FACTOR": str(s.replication_factor),
            "FAUST_DATADIR": str(self.state_dir(index)),
            "FAUST_SESSION_TIMEOUT": str(s.session_timeout),
            "FAUST_HEARTBEAT_INTERVAL": str(s.heartbeat_interval),
            "FAUST_STANDBY_REPLICAS": str(s.standby_replicas),
        }
        if s.static_membership:
            env["FAUST_GROUP_INSTANCE_ID"] = f"worker-{index}"
        if s.processing_guarantee is not None:
            env["FAUST_GUARANTEE"] = s.processing_guarantee
        faust = Path(sys.executable).with_name("faust")
        return WorkerProcess(
            self.module,
            state_dir=self.state_dir(index),
            log_path=self.log_path(index),
            env={**_env(), **env},
            name=f"{self.name}-worker-{index}",
            argv=[str(faust), "-A", self.module, "worker", "-l", "info", "--without-web"],
            prefix=self.prefix(index),
        )

    def transactional_id(self, index: int) -> str:
        # One transactional producer per partition, '{app id}-{topic group}-{partition}'.
        return f"{self.app_id}-0-{index}"

    def stores(self, index: int) -> Iterator[StoreSnapshot]:
        from rocksdict import AccessType, Options, Rdict

        tables = self.state_dir(index) / "v1" / "tables"
        offset_key = b"__faust\0offset__"
        for table in TABLES:
            for path in sorted(tables.glob(f"{table}-*.db")):
                partition = int(path.name[len(table) + 1 : -len(".db")])
                db = Rdict(
                    str(path), options=Options(raw_mode=True), access_type=AccessType.read_only()
                )
                try:
                    items = {_bytes(k): _bytes(v) for k, v in db.items()}
                finally:
                    db.close()
                # Faust writes RocksDB while processing, before its transaction commits, and
                # keeps its changelog offset in-band, written apart from the data: no
                # consistent cut to compare against. Checked as "holds only committed values".
                items.pop(offset_key, None)
                yield StoreSnapshot(
                    worker=f"worker-{index}",
                    table=table,
                    partition=partition,
                    changelog_offset=None,
                    items=items,
                )


def _bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()
