"""An app's settings: keyword arguments, overridden by ``STREAMS_APP_<NAME>`` environment variables.

The environment wins so that one topology module runs unchanged on a laptop, in docker-compose
and in production: the code states intent and defaults, the deployment states addresses and
sizes. Every wrong value stops the worker at start with a :class:`~streams_app.errors.ConfigError`
naming the setting, the value and the fix, before anything touches Kafka: a typo should cost
a second, not a stalled worker or a traceback an hour later. Limits only the broker knows
(``transaction.max.timeout.ms``, the session timeout range, ``message.max.bytes``) are checked
against the broker when the worker starts (``streams_app.runtime.broker_limits``).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import logging
import math
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from streams_app.errors import ConfigError

log = logging.getLogger(__name__)

EXACTLY_ONCE_V2 = "exactly_once_v2"
AT_LEAST_ONCE = "at_least_once"
AT_MOST_ONCE = "at_most_once"
GUARANTEES = (EXACTLY_ONCE_V2, AT_LEAST_ONCE, AT_MOST_ONCE)
ERROR_POLICIES = ("retry", "stop", "dlq")
LINEAGE_FORMATS = ("compact", "split")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The SASL mechanisms a worker can use from settings alone (GSSAPI needs a Kerberos set-up
#: and OAUTHBEARER a token provider object, neither of which a setting can carry).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
COMPRESSION_TYPES = ("gzip", "snappy", "lz4", "zstd")
#: aiokafka 0.14 (``aiokafka/codec.py``) compresses snappy, lz4 and zstd with ``cramjam``, an
#: optional dependency: ``pip install 'streams_app[compression]'`` installs it. gzip is stdlib.
COMPRESSION_MODULES = {"snappy": "cramjam", "lz4": "cramjam", "zstd": "cramjam"}
ENV_PREFIX = "STREAMS_APP_"
#: ``STREAMS_APP_*`` variables that are not settings but are read elsewhere (tooling, tests).
#: Anything else with the prefix is probably a misspelt setting and is warned about.
NON_SETTING_VARIABLES = frozenset(
    {
        "STREAMS_APP_ID",
        "STREAMS_APP_CACHE_DIR",
        "STREAMS_APP_KAFKA_VERSION",
        "STREAMS_APP_TEST_BOOTSTRAP",
        "STREAMS_APP_TEST_BACKEND",
        "STREAMS_APP_FAUST_CONFORMANCE",
        "STREAMS_APP_SPARK_MASTER",
        "STREAMS_APP_PG_BINDIR",
        "STREAMS_APP_PIPELINE_HOME",
        "STREAMS_APP_PIPELINE_POSTGRES",
        "STREAMS_APP_TEST_CRASH_AT",
    }
)

#: Settings that are secrets: never printed, never logged, never echoed in an error.
SECRET_SETTINGS = frozenset({"sasl_password", "ssl_password", "postgres_dsn"})
MASK = "*****"
#: Kafka's millisecond settings are 32-bit ints.
_MAX_MS = 2**31 - 1
#: Kafka Streams sets its producers' linger.ms to 100: the exactly-once default, at most.
EOS_LINGER_MS = 100
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
#: Names already warned about (each unknown variable is reported once per process).
_warned_env: set[str] = set()


@dataclass(repr=False)
class Settings:
    """Everything a worker needs to know; see docs/settings.md for the full reference."""

    id: str
    broker: str = "kafka://localhost:9092"
    processing_guarantee: str = EXACTLY_ONCE_V2
    store: str = "rocksdb://"
    state_dir: Path = Path("state")
    #: Seconds between commits; defaults to 0.1 under exactly-once (as Kafka Streams), else 1.0.
    commit_interval: float | None = None
    #: Commit after this many records even before the interval is up.
    commit_every: int = 10_000
    #: Seconds a task with several co-partitioned inputs waits for one that has nothing
    #: buffered before processing the others without it (Kafka Streams' max.task.idle.ms;
    #: 0: wait only for records already on the broker; -1: never wait).
    max_task_idle: float = 0.0
    transaction_timeout: float = 10.0
    #: Kafka's transaction protocol: None uses version 2 (KIP-890: no AddPartitionsToTxn or
    #: AddOffsetsToTxn, a new epoch per transaction) where the cluster has it, else 1.
    transaction_version: int | None = None
    session_timeout: float = 10.0
    heartbeat_interval: float = 3.0
    #: Static group membership (Kafka's ``group.instance.id``, KIP-345; Faust's
    #: ``consumer_group_instance_id``): a name unique to this worker among the app's workers
    #: and stable across its restarts (e.g. the pod or host name). A worker that restarts
    #: within ``session_timeout`` takes its tasks back at once, with no rebalance; a worker
    #: that stops, cleanly or not, keeps its tasks until ``session_timeout`` expires.
    #: None (the default): dynamic membership.
    group_instance_id: str | None = None
    max_poll_interval: float = 300.0
    max_poll_records: int = 2_000
    topic_partitions: int = 8
    topic_replication_factor: int = 1
    #: What happens to a record whose agent still fails after ``max_retries`` retries: ``dlq``
    #: (to the dead-letter topic, processing goes on), ``stop`` (the worker stops naming it),
    #: ``retry`` (never give up: only its partition waits). See docs/guarantees.md.
    error_policy: str = "dlq"
    #: Backoff before the first retry of a failing record, doubling up to retry_backoff_max;
    #: only the record's partition waits meanwhile.
    retry_backoff: float = 0.1
    retry_backoff_max: float = 10.0
    #: Retries of a failing record before error_policy applies; None: forever.
    max_retries: int | None = 3
    #: Dead-letter topic name; ``{topic}`` is replaced by the source topic.
    dead_letter_topic: str = "{topic}.dlq"
    #: Name the input record on every record sent while processing (streams_app/lineage.py).
    lineage_headers: bool = True
    #: How: ``compact``, one ``src`` header ``<topic>:<partition>:<offset>``; ``split``, the
    #: three headers ``src_topic`` / ``src_partition`` / ``src_offset`` workers wrote before
    #: (for downstream consumers that read them; about 35 bytes more a record).
    lineage_format: str = "compact"
    #: Add txn_id / generation headers (the worker's transactional id, and the consumer-group
    #: generation its offsets commit under) to every record sent while processing, so an audit
    #: (the chaos verifier) can prove no fenced zombie got anything committed. Off by default.
    transaction_headers: bool = False
    #: Exactly-once: process the next fetched records while a commit's round trips are in
    #: flight, holding their sends back until EndTxn (runtime/commit.py). Off: the worker
    #: waits for each commit, as Kafka Streams' stream thread does.
    process_during_commit: bool = True
    #: Allocations between collections of the garbage collector's young generation while the
    #: worker runs (Python's own: 700); 0 leaves the collector alone. See runtime/gc_tuning.py.
    gc_young_threshold: int = 10_000
    restore_timeout: float = 300.0
    # Liveness (docs/operations.md, "Health, readiness and stalls").
    #: Longest the agents may work on the records handed to them (one fetched batch) before
    #: they are all waiting for input again; past it the record each busy agent holds counts
    #: as failed and error_policy decides. None: derived from transaction_timeout (exactly-once)
    #: or max_poll_interval (:attr:`effective_processing_timeout`).
    processing_timeout: float | None = None
    #: Commit intervals without a commit point while input waits, after which the worker
    #: counts as stalled: ``/ready`` answers 503 naming why.
    stall_intervals: int = 30
    #: Seconds a worker may stay stalled (or an agent busy) before ``/health`` fails, so that a
    #: supervisor restarts it; None: three processing timeouts, at least 60 s.
    liveness_timeout: float | None = None
    #: Seconds an input topic may be missing (not ready meanwhile) before the worker stops.
    missing_topic_timeout: float = 60.0
    #: Seconds a graceful stop waits for the batch in progress before it cancels the agents and
    #: aborts; closing the clients gets as long again.
    shutdown_timeout: float = 10.0
    # State memory (docs/memory.md): one budget per worker, whatever the partitions it owns.
    #: Bytes of decoded committed table values cached in Python, shared by all tables and
    #: partitions (Kafka Streams' statestore.cache.max.bytes); 0 turns the cache off.
    state_cache_max_bytes: int = 64 * 1024 * 1024
    #: Bytes of pending table writes (all tasks) above which the worker commits early, at the
    #: next quiescent point (KIP-892's statestore.uncommitted.max.bytes); None: no bound.
    state_uncommitted_max_bytes: int | None = 64 * 1024 * 1024
    #: RocksDB block cache shared by every table partition of the worker (data, index, filters).
    rocksdb_block_cache_bytes: int = 64 * 1024 * 1024
    #: RocksDB memtables (write buffers) of every table partition together, a shared budget.
    rocksdb_memtable_bytes: int = 256 * 1024 * 1024
    #: Files each table partition's RocksDB keeps open (its table cache); -1: all, unbounded.
    rocksdb_max_open_files: int = 64
    #: Seconds committed table writes may wait in memory before they go to RocksDB, in one
    #: batch per partition with later commits' (write-behind; 0: at every commit). A crash
    #: restores that much more changelog; reads see them meanwhile.
    rocksdb_write_behind_interval: float = 1.0
    #: Bytes the writes waiting for RocksDB may hold, all table partitions together.
    rocksdb_write_behind_bytes: int = 16 * 1024 * 1024
    #: Warm copies of each task's tables kept by other workers (Faust's name; Kafka Streams'
    #: ``num.standby.replicas``): a failover then restores only a short changelog tail.
    table_standby_replicas: int = 0
    #: Changelog records a worker may be behind on a task and still count as caught up: the
    #: assignor moves an active task only to a caught-up worker (Kafka Streams' default).
    acceptable_recovery_lag: int = 10_000
    #: Extra standbys ("warm-ups") the group may run at once to move tasks to workers that have
    #: no state for them yet; the move happens at a probing rebalance, once they caught up.
    max_warmup_replicas: int = 2
    #: Seconds between the probing rebalances that move warmed-up tasks (Kafka Streams: 10 min).
    probing_rebalance_interval: float = 600.0
    #: How long an output batch waits for more records before it is sent; None: the
    #: guarantee's default (:attr:`effective_producer_linger_ms`).
    producer_linger_ms: int | None = None
    producer_max_batch_size: int = 256 * 1024
    #: Largest produce request (one record plus overhead) the producer sends; Kafka's
    #: ``max.request.size``. Checked against the broker's ``message.max.bytes`` at start.
    max_request_size: int = 1_048_576
    compression_type: str | None = None
    # Security: passed through to the Kafka clients.
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    #: The database of the app's PostgreSQL sinks (and the outbox relay run with -A); a libpq
    #: DSN or URL. A secret (it may hold a password): never logged, masked by describe().
    postgres_dsn: str | None = None
    #: The worker's web server (health, readiness, Prometheus metrics, table queries, pages):
    #: on, on 127.0.0.1:6066 (Faust's port) by default. ``web_port=0`` takes any free port
    #: (logged, and in ``Worker.web_url``). ``web_host`` is the address other workers and
    #: clients reach this one at (table queries are redirected there); default: ``web_bind``,
    #: or the machine's host name when binding every interface.
    web_enabled: bool = True
    web_bind: str = "127.0.0.1"
    web_port: int = 6066
    web_host: str | None = None
    #: Seconds between progress lines while a worker restores its tables or catches up with
    #: its inputs (logged at info; an interactive terminal gets a live progress bar instead).
    progress_interval: float = 5.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.state_dir, str):
            self.state_dir = Path(self.state_dir)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def names(cls) -> list[str]:
        """Every setting a keyword argument or ``STREAMS_APP_<NAME>`` may set."""
        return [f.name for f in dataclasses.fields(cls) if f.name not in ("id", "extra")]

    @classmethod
    def build(
        cls, id: str, overrides: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Defaults < keyword arguments < environment. Unknown names are rejected."""
        environ = os.environ if environ is None else environ
        kinds = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        _reject_unknown(cls, overrides)
        values: dict[str, Any] = dict(overrides)
        for name in cls.names():
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is not None:
                values[name] = _parse(name, raw, kinds[name])
        warn_unknown_environment(environ)
        app_id = environ.get(ENV_PREFIX + "ID", id)
        settings = cls(id=app_id, **values)
        settings.validate()
        return settings

    def replace(self, **overrides: Any) -> Self:
        """A copy with ``overrides`` applied and validated (a worker's ``--state-dir``, tests)."""
        _reject_unknown(type(self), overrides)
        settings = dataclasses.replace(self, **overrides)
        settings.validate()
        return settings

    # -- derived values -------------------------------------------------------------------

    @property
    def exactly_once(self) -> bool:
        return self.processing_guarantee == EXACTLY_ONCE_V2

    @property
    def effective_commit_interval(self) -> float:
        if self.commit_interval is not None:
            return self.commit_interval
        return 0.1 if self.exactly_once else 1.0

    @property
    def processing_budget(self) -> float:
        """The most :attr:`processing_timeout` may be (seconds; <= 0: none fits).

        A transaction lasts up to a commit interval plus the batch being processed when the
        interval is up, and must commit or abort within 90% of ``transaction_timeout``, or the
        coordinator aborts it first (and the worker would reprocess the same records forever).
        Every guarantee must poll within ``max_poll_interval`` too, or the group drops it."""
        interval = self.effective_commit_interval
        budget = 0.9 * self.max_poll_interval - interval
        if self.exactly_once:
            budget = min(budget, 0.9 * self.transaction_timeout - interval)
        return budget

    @property
    def effective_processing_timeout(self) -> float:
        """``processing_timeout``, or 90% of :attr:`processing_budget` (8 s by default under
        exactly-once: transaction_timeout 10 s, commit_interval 0.1 s)."""
        if self.processing_timeout is not None:
            return self.processing_timeout
        return round(0.9 * self.processing_budget, 3)

    @property
    def effective_liveness_timeout(self) -> float:
        if self.liveness_timeout is not None:
            return self.liveness_timeout
        return max(60.0, 3 * self.effective_processing_timeout)

    @property
    def stall_seconds(self) -> float:
        """How long without a commit point (input waiting) makes the worker stalled."""
        return self.stall_intervals * self.effective_commit_interval

    @property
    def effective_producer_linger_ms(self) -> int:
        """Exactly-once: the commit interval, at most 100 ms (Kafka Streams' producer default).
        No output is visible before its transaction commits, and the commit sends every open
        batch, so while the worker works through a backlog its batches wait for the commit
        (or until they are full): sent every few milliseconds instead, a commit's outputs went
        out in many more batches and produce requests, each costing the worker and the broker
        CPU (the broker used a fifth more, BENCHMARKS.md). A worker that has caught up with
        its input sends them at once (``runtime.worker.loop``): left for the commit, they would
        lengthen it, and every output's latency with it. Otherwise 5 ms: an output is visible
        once it is acknowledged, so every millisecond of linger is latency."""
        if self.producer_linger_ms is not None:
            return self.producer_linger_ms
        if self.exactly_once:
            return min(EOS_LINGER_MS, max(1, round(self.effective_commit_interval * 1000)))
        return 5

    @property
    def bootstrap_servers(self) -> str:
        servers = []
        for part in self.broker.split(";") if ";" in self.broker else self.broker.split(","):
            part = part.strip()
            if part.startswith("kafka://"):
                part = part[len("kafka://") :]
            servers.append(part.rstrip("/"))
        return ",".join(servers)

    @property
    def principal(self) -> str:
        """The Kafka principal the broker sees for these settings (for ACL error messages).

        SASL: ``User:<sasl_username>``. TLS with a client certificate: ``User:`` and the
        certificate's subject, as Kafka's default principal builder names it. Otherwise
        ``User:ANONYMOUS``.
        """
        if self.security_protocol.startswith("SASL") and self.sasl_username:
            return f"User:{self.sasl_username}"
        if self.security_protocol == "SSL" and self.ssl_certfile:
            return f"User:{certificate_subject(self.ssl_certfile)}"
        return "User:ANONYMOUS"

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context: verify the broker against ``ssl_cafile`` (else the system's
        CAs), check its host name, present ``ssl_certfile`` if set.

        Errors name the setting whose file is wrong.
        """
        try:
            context = ssl.create_default_context(cafile=self.ssl_cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                "ssl_cafile",
                f"{self.ssl_cafile!r} is not a readable PEM CA bundle ({exc})",
                "point ssl_cafile at the PEM file of the CA that signed the broker's certificate",
            ) from None
        if self.ssl_certfile:
            try:
                context.load_cert_chain(
                    self.ssl_certfile, self.ssl_keyfile or None, self.ssl_password or None
                )
            except (OSError, ssl.SSLError, ValueError) as exc:
                text = str(exc).lower()
                if self.ssl_password and ("decrypt" in text or "password" in text):
                    name = "ssl_password"
                else:
                    name = "ssl_keyfile" if self.ssl_keyfile else "ssl_certfile"
                raise ConfigError(
                    name,
                    f"the client certificate {self.ssl_certfile!r} / key "
                    f"{self.ssl_keyfile or '(in the certificate file)'!r} cannot be loaded "
                    f"({type(exc).__name__}: {exc})",
                    "use a PEM certificate and its PEM private key; set ssl_password if the key "
                    "is encrypted",
                ) from None
        return context

    def security(self) -> dict[str, Any]:
        """Client keyword arguments for TLS and SASL, passed through to aiokafka."""
        out: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol in ("SSL", "SASL_SSL"):
            out["ssl_context"] = self.ssl_context()
        if self.security_protocol.startswith("SASL") and self.sasl_mechanism:
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_plain_username"] = self.sasl_username
            out["sasl_plain_password"] = self.sasl_password
        return out

    def describe(self) -> dict[str, Any]:
        """The settings as an operator may see them: secrets masked."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = MASK if f.name in SECRET_SETTINGS and value else value
        return out

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.describe().items())
        return f"Settings({shown})"

    # -- validation -----------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`ConfigError` for the first wrong value (types, ranges, relations)."""
        self._validate_identity()
        self._validate_timing()
        self._validate_liveness()
        self._validate_sizes()
        self._validate_state_memory()
        self._validate_errors()
        self._validate_security()
        self._validate_database()
        self._validate_web()

    def _validate_database(self) -> None:
        """The DSN's shape only (libpq parses it when a sink or the relay connects); never
        echoed: it may carry a password."""
        dsn = self.postgres_dsn
        if dsn is None:
            return
        if not isinstance(dsn, str) or not dsn.strip():
            raise ConfigError(
                "postgres_dsn",
                "is not a non-empty string",
                "set a libpq DSN ('host=... dbname=...') or URL (postgresql://host:5432/db)",
            )
        scheme = dsn.split("://", 1)[0] if "://" in dsn else None
        if scheme is not None and scheme not in ("postgresql", "postgres"):
            raise ConfigError(
                "postgres_dsn",
                f"has the scheme {scheme!r}",
                "use a postgresql://host:5432/db URL or a libpq 'key=value' DSN",
            )

    def _validate_web(self) -> None:
        _count(self, "web_port", 0, "e.g. 6066, or 0 for any free port", 65535)
        _string(self, "web_bind")
        if not self.web_bind.strip() or any(c.isspace() or c in "/[]" for c in self.web_bind):
            raise ConfigError(
                "web_bind",
                f"{self.web_bind!r} is not an address to listen on",
                "use an IP address or host name, e.g. '127.0.0.1' (the default) or '0.0.0.0' "
                "(every interface, e.g. in a container)",
            )
        if self.web_host is not None:
            _string(self, "web_host")
            if not self.web_host or any(c.isspace() or c in "/?#@" for c in self.web_host):
                raise ConfigError(
                    "web_host",
                    f"{self.web_host!r} is not a host name",
                    "use the host name or IP other workers reach this one at (no scheme, no "
                    "port), or leave it unset",
                )

    def _validate_identity(self) -> None:
        if not isinstance(self.id, str) or not _TOPIC_NAME.match(self.id):
            raise ConfigError(
                "id",
                f"{self.id!r} is not a valid app id",
                "use 1-249 letters, digits, '.', '_', '-' (it names the consumer group, the "
                "transactional ids and internal topics)",
            )
        _choice(self, "processing_guarantee", GUARANTEES)
        _choice(self, "lineage_format", LINEAGE_FORMATS)
        _string(self, "broker")
        if not self.bootstrap_servers:
            raise ConfigError("broker", "is empty", "set broker='kafka://host:9092'")
        for server in self.bootstrap_servers.split(","):
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ConfigError(
                    "broker",
                    f"{server!r} in {self.broker!r} is not host:port",
                    "use broker='kafka://host:9092' (several: comma-separated)",
                )
        _string(self, "store")
        scheme = self.store.split("://", 1)[0]
        if "://" not in self.store or scheme not in ("rocksdb", "memory"):
            raise ConfigError(
                "store", f"unknown store {self.store!r}", "use 'rocksdb://' or 'memory://'"
            )
        if not isinstance(self.state_dir, Path) or not str(self.state_dir):
            raise ConfigError(
                "state_dir", f"{self.state_dir!r} is not a path", "use a directory path"
            )
        for name in (
            "lineage_headers",
            "transaction_headers",
            "web_enabled",
            "process_during_commit",
        ):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ConfigError(
                    name,
                    f"{value!r} is not a boolean (a non-empty string would read as true)",
                    f"use {name}=True or {name}=False "
                    f"({ENV_PREFIX}{name.upper()}=true/false/1/0/yes/no/on/off)",
                )
        if not isinstance(self.extra, dict):
            raise ConfigError("extra", f"{self.extra!r} is not a dict", "use extra={...}")
        instance = self.group_instance_id
        if instance is not None and not (isinstance(instance, str) and _TOPIC_NAME.match(instance)):
            raise ConfigError(
                "group_instance_id",
                f"{instance!r} is not a valid group instance id",
                "use 1-249 letters, digits, '.', '_', '-', unique to this worker and the same "
                "across its restarts (e.g. the pod or host name), or leave it unset",
            )

    def _validate_timing(self) -> None:
        if self.commit_interval is not None:
            _seconds(self, "commit_interval", "e.g. 0.1 (exactly-once) or 1.0")
        interval = self.effective_commit_interval
        _seconds(self, "transaction_timeout", "e.g. 10 (Kafka Streams' default)")
        _seconds(self, "session_timeout", "e.g. 10 (between the broker's group.min/max)")
        _seconds(self, "heartbeat_interval", "e.g. 3, a third of session_timeout")
        _seconds(self, "max_poll_interval", "e.g. 300")
        _seconds(self, "restore_timeout", "e.g. 300")
        _seconds(self, "probing_rebalance_interval", "e.g. 600 (Kafka Streams' 10 minutes)")
        _seconds(self, "progress_interval", "e.g. 5")
        if isinstance(self.max_task_idle, bool) or not isinstance(self.max_task_idle, int | float):
            raise ConfigError(
                "max_task_idle",
                f"{self.max_task_idle!r} is not a number of seconds",
                "use seconds >= 0 (0: the default), or -1 to never wait for an input",
            )
        if not math.isfinite(self.max_task_idle) or (
            self.max_task_idle < 0 and self.max_task_idle != -1
        ):
            raise ConfigError(
                "max_task_idle",
                f"{self.max_task_idle} is not a finite number >= 0 or -1",
                "use seconds >= 0 (0: the default), or -1 to never wait for an input",
            )
        if self.exactly_once and self.transaction_timeout < interval:
            raise ConfigError(
                "transaction_timeout",
                f"{self.transaction_timeout}s is below commit_interval ({interval}s): every "
                "transaction would time out before it commits",
                "raise transaction_timeout or lower commit_interval",
            )
        if self.transaction_version not in (None, 1, 2):
            raise ConfigError(
                "transaction_version",
                f"unknown version {self.transaction_version!r}",
                "leave it unset (version 2 where the cluster has it), or use 1 or 2",
            )
        if self.heartbeat_interval >= self.session_timeout:
            raise ConfigError(
                "heartbeat_interval",
                f"{self.heartbeat_interval}s is not below session_timeout "
                f"({self.session_timeout}s)",
                "use a heartbeat_interval of at most a third of session_timeout",
            )
        if self.max_poll_interval < interval:
            raise ConfigError(
                "max_poll_interval",
                f"{self.max_poll_interval}s is below commit_interval ({interval}s): the group "
                "would drop the worker between two commits",
                "raise max_poll_interval (default 300) or lower commit_interval",
            )
        if self.exactly_once and self.restore_timeout <= self.transaction_timeout:
            raise ConfigError(
                "restore_timeout",
                f"{self.restore_timeout}s is not above transaction_timeout "
                f"({self.transaction_timeout}s): a restore waiting for the broker to abort a "
                "transaction a crashed worker left open would give up before the broker does",
                "use a restore_timeout well above transaction_timeout (default 300)",
            )

    def _validate_liveness(self) -> None:
        """The processing timeout against the transaction (see :attr:`processing_budget`),
        and the bounds that depend on it."""
        _count(self, "stall_intervals", 1, "e.g. 30 (commit intervals)", 1_000_000)
        _seconds(self, "missing_topic_timeout", "e.g. 60")
        _seconds(self, "shutdown_timeout", "e.g. 10")
        budget = self.processing_budget
        interval = self.effective_commit_interval
        if budget <= 0:
            if self.exactly_once and 0.9 * self.transaction_timeout - interval <= 0:
                raise ConfigError(
                    "commit_interval",
                    f"{interval}s leaves no time for processing within 90% of "
                    f"transaction_timeout ({self.transaction_timeout}s): a transaction lasts a "
                    "commit interval plus the batch in progress, and the coordinator aborts it "
                    "at transaction_timeout",
                    "lower commit_interval or raise transaction_timeout (e.g. at least twice "
                    "the commit interval)",
                )
            raise ConfigError(
                "commit_interval",
                f"{interval}s leaves no time for processing within 90% of max_poll_interval "
                f"({self.max_poll_interval}s)",
                "lower commit_interval or raise max_poll_interval",
            )
        if self.processing_timeout is not None:
            _seconds(self, "processing_timeout", f"e.g. {round(0.9 * budget, 3):g}")
            if self.processing_timeout > budget:
                if self.exactly_once and budget < 0.9 * self.max_poll_interval - interval:
                    limit = f"90% of transaction_timeout ({self.transaction_timeout}s)"
                    outlives = "its transaction, which the coordinator would then abort"
                else:
                    limit = f"90% of max_poll_interval ({self.max_poll_interval}s)"
                    outlives = "the poll interval, and the group would drop the worker"
                raise ConfigError(
                    "processing_timeout",
                    f"{self.processing_timeout}s plus commit_interval ({interval}s) is above "
                    f"{limit}: a batch could outlive {outlives}, again and again",
                    f"use processing_timeout <= {budget:.3g}, or raise transaction_timeout "
                    "(and max_poll_interval)",
                )
        if self.liveness_timeout is not None:
            _seconds(self, "liveness_timeout", "e.g. 120")
            if self.liveness_timeout <= self.effective_processing_timeout:
                raise ConfigError(
                    "liveness_timeout",
                    f"{self.liveness_timeout}s is not above processing_timeout "
                    f"({self.effective_processing_timeout}s): a record that is merely slow "
                    "would get the worker restarted before its own timeout fails it",
                    "use a liveness_timeout of a few processing timeouts (default: three, at "
                    "least 60 s)",
                )

    def _validate_sizes(self) -> None:
        _count(self, "commit_every", 1, "e.g. 10000")
        _count(self, "max_poll_records", 1, "e.g. 2000")
        _count(self, "topic_partitions", 1, "e.g. 8")
        _count(self, "topic_replication_factor", 1, "at most the number of brokers", 32767)
        if self.producer_linger_ms is not None:
            _count(self, "producer_linger_ms", 0, "e.g. 5 (milliseconds)", _MAX_MS)
        _count(self, "producer_max_batch_size", 1, "e.g. 262144 (bytes)", _MAX_MS)
        _count(self, "max_request_size", 1, "e.g. 1048576 (bytes)", _MAX_MS)
        _count(self, "table_standby_replicas", 0, "e.g. 1 (0: no standbys)", 32)
        _count(self, "acceptable_recovery_lag", 0, "e.g. 10000 (changelog records)", 2**63 - 1)
        _count(self, "max_warmup_replicas", 1, "e.g. 2", 1_000_000)
        _count(self, "gc_young_threshold", 0, "e.g. 10000 (0: Python's own, 700)", 10_000_000)
        if self.producer_max_batch_size > self.max_request_size:
            raise ConfigError(
                "producer_max_batch_size",
                f"{self.producer_max_batch_size} bytes is above max_request_size "
                f"({self.max_request_size}): a full batch could not be sent",
                "lower producer_max_batch_size or raise max_request_size",
            )
        if self.compression_type is not None:
            _choice(self, "compression_type", COMPRESSION_TYPES)
            module = COMPRESSION_MODULES.get(self.compression_type)
            if module and importlib.util.find_spec(module) is None:
                raise ConfigError(
                    "compression_type",
                    f"{self.compression_type!r} needs the {module!r} library, which is not "
                    "installed",
                    "pip install 'streams_app[compression]' (or use compression_type='gzip' "
                    "or None)",
                )

    def _validate_state_memory(self) -> None:
        for name in ("state_cache_max_bytes", "state_uncommitted_max_bytes"):
            value = getattr(self, name)
            allowed_none = name == "state_uncommitted_max_bytes"  # None: unbounded
            if not (value is None and allowed_none) and (not _is_int(value) or value < 0):
                raise ConfigError(
                    name,
                    f"{value!r} is not a number of bytes",
                    f"set {name} to a whole number of bytes >= 0 (e.g. {64 * 1024 * 1024} for "
                    "64 MiB; 0 for the cache turns it off); see docs/memory.md",
                )
        for name in ("rocksdb_block_cache_bytes", "rocksdb_memtable_bytes"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1024 * 1024:
                raise ConfigError(
                    name,
                    f"{value!r} is below 1 MiB",
                    f"set {name} to a number of bytes of at least 1048576; see docs/memory.md",
                )
        behind = self.rocksdb_write_behind_interval
        if (
            isinstance(behind, bool)
            or not isinstance(behind, int | float)
            or not (math.isfinite(behind) and 0 <= behind <= 60)
        ):
            raise ConfigError(
                "rocksdb_write_behind_interval",
                f"{behind!r} is not a number of seconds from 0 to 60",
                "use e.g. 1.0 (seconds committed writes may wait for RocksDB), or 0 to write "
                "them at every commit; see docs/memory.md",
            )
        behind_bytes = self.rocksdb_write_behind_bytes
        if not _is_int(behind_bytes) or behind_bytes < 0:
            raise ConfigError(
                "rocksdb_write_behind_bytes",
                f"{behind_bytes!r} is not a number of bytes",
                f"set rocksdb_write_behind_bytes to a whole number of bytes >= 0 (e.g. "
                f"{16 * 1024 * 1024} for 16 MiB); see docs/memory.md",
            )
        files = self.rocksdb_max_open_files
        if not _is_int(files) or not (files == -1 or files >= 20):
            raise ConfigError(
                "rocksdb_max_open_files",
                f"{files!r} is not -1 or at least 20 (RocksDB's minimum)",
                "use e.g. 64 (files per table partition), or -1 to keep every file open",
            )

    def _validate_errors(self) -> None:
        _choice(self, "error_policy", ERROR_POLICIES)
        _seconds(self, "retry_backoff", "e.g. 0.1")
        _seconds(self, "retry_backoff_max", "e.g. 10")
        if self.retry_backoff > self.retry_backoff_max:
            raise ConfigError(
                "retry_backoff",
                f"{self.retry_backoff}s is above retry_backoff_max ({self.retry_backoff_max}s)",
                "lower retry_backoff or raise retry_backoff_max",
            )
        if self.max_retries is not None:
            _count(self, "max_retries", 0, "e.g. 10, or None to retry forever")
        _string(self, "dead_letter_topic")
        sample = self.dead_letter_topic.replace("{topic}", "orders")
        problem = None
        if not _TOPIC_NAME.match(sample):
            problem = "is not a valid topic name (letters, digits, '.', '_', '-'; '{topic}')"
        elif sample.startswith("__"):
            problem = "names an internal topic (names starting with '__' belong to Kafka)"
        elif "{topic}" not in self.dead_letter_topic and sample in (".", ".."):
            problem = "is not a valid topic name"
        if problem:
            raise ConfigError(
                "dead_letter_topic",
                f"{self.dead_letter_topic!r} {problem}",
                "use e.g. '{topic}.dlq' (the default) or a fixed topic name of your own",
            )

    def _validate_security(self) -> None:
        _choice(self, "security_protocol", SECURITY_PROTOCOLS)
        tls = self.security_protocol in ("SSL", "SASL_SSL")
        sasl = self.security_protocol.startswith("SASL")
        for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password"):
            value = getattr(self, name)
            if value is None:
                continue
            _string(self, name)
            if not tls:
                raise ConfigError(
                    name,
                    f"is set but security_protocol is {self.security_protocol}: the "
                    "connection would not use TLS",
                    "set security_protocol='SSL' or 'SASL_SSL', or remove the ssl_* settings",
                )
            if name == "ssl_password":
                continue
            path = Path(value)
            if not path.is_file() or not os.access(path, os.R_OK):
                state = "does not exist" if not path.exists() else "is not a readable file"
                raise ConfigError(
                    name,
                    f"the file {value!r} {state}",
                    f"point {name} at a readable PEM file",
                )
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ConfigError(
                "ssl_keyfile",
                "is set without ssl_certfile",
                "set ssl_certfile to the client certificate of this key",
            )
        if self.ssl_password and not self.ssl_certfile:
            raise ConfigError(
                "ssl_password",
                "is set without ssl_certfile (it decrypts the client key)",
                "set ssl_certfile/ssl_keyfile, or remove ssl_password",
            )
        if self.sasl_mechanism is not None:
            _string(self, "sasl_mechanism")
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise ConfigError(
                    "sasl_mechanism",
                    f"unknown mechanism {self.sasl_mechanism!r}",
                    f"use one of {', '.join(SASL_MECHANISMS)}",
                )
        for name in ("sasl_mechanism", "sasl_username", "sasl_password"):
            if getattr(self, name) is not None and not sasl:
                raise ConfigError(
                    name,
                    f"is set but security_protocol is {self.security_protocol}: it would not "
                    "be used",
                    "set security_protocol='SASL_SSL' (or 'SASL_PLAINTEXT'), or remove the "
                    "sasl_* settings",
                )
        if sasl:
            if not self.sasl_mechanism:
                raise ConfigError(
                    "sasl_mechanism",
                    f"is required with security_protocol={self.security_protocol}",
                    f"set sasl_mechanism ({', '.join(SASL_MECHANISMS)})",
                )
            for name in ("sasl_username", "sasl_password"):
                value = getattr(self, name)
                if not isinstance(value, str) or not value:
                    raise ConfigError(
                        name,
                        f"is required with sasl_mechanism={self.sasl_mechanism}"
                        + ("" if value is None else " and must be a non-empty string"),
                        f"set {name} (or {ENV_PREFIX}{name.upper()})",
                    )
        if tls:
            self.ssl_context()  # a CA or key file that does not load is named now


# -- helpers -------------------------------------------------------------------------------


def _shown(name: str, value: Any) -> str:
    return MASK if name in SECRET_SETTINGS else repr(value)


def _reject_unknown(cls: type[Settings], overrides: Mapping[str, Any]) -> None:
    known = cls.names()
    for name in sorted(set(overrides) - set(known)):
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigError(
            name,
            "is not a streams_app setting",
            f"{hint}remove it, or use one of: {', '.join(sorted(known))}",
        )


def warn_unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """Warn (once per process and variable) about ``STREAMS_APP_*`` names that set nothing.

    A misspelt variable is otherwise silently ignored and the default applies, which is how a
    production worker ends up with the laptop's broker. Returns the warnings issued now.
    """
    known = {ENV_PREFIX + name.upper() for name in Settings.names()} | NON_SETTING_VARIABLES
    issued = []
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX) or variable in known or variable in _warned_env:
            continue
        _warned_env.add(variable)
        close = difflib.get_close_matches(variable, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        message = f"environment variable {variable} is not a streams_app setting{hint}"
        log.warning("%s (ignored)", message)
        issued.append(message)
    return issued


def _string(settings: Settings, name: str) -> None:
    value = getattr(settings, name)
    if not isinstance(value, str):
        raise ConfigError(name, f"{_shown(name, value)} is not a string", f"set {name} to text")


def _choice(settings: Settings, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(settings, name)
    if value not in choices:
        raise ConfigError(
            name, f"unknown value {_shown(name, value)}", f"use one of {', '.join(choices)}"
        )


def _seconds(settings: Settings, name: str, example: str) -> None:
    """A finite, positive number of seconds that fits Kafka's int32 milliseconds."""
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            name, f"{value!r} is not a number of seconds", f"set {name} to a number, {example}"
        )
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(
            name, f"{value!r} is not a positive, finite number of seconds", f"use {example}"
        )
    if value * 1000 > _MAX_MS:
        raise ConfigError(
            name, f"{value!r}s is above Kafka's limit of {_MAX_MS // 1000}s", f"use {example}"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _count(
    settings: Settings, name: str, minimum: int, example: str, maximum: int | None = None
) -> None:
    value = getattr(settings, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"{value!r} is not a whole number", f"use {example}")
    if value < minimum:
        raise ConfigError(name, f"{value!r} is below {minimum}", f"use {example}")
    if maximum is not None and value > maximum:
        raise ConfigError(name, f"{value!r} is above {maximum}", f"use {example}")


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _parse(name: str, raw: str, kind: str) -> Any:
    """Turn an environment string into the setting's type, strictly."""
    variable = f"{ENV_PREFIX}{name.upper()}"
    text = raw.strip()
    optional = "None" in kind
    if optional and text.lower() in ("", "none", "null"):
        return None
    try:
        if "bool" in kind:
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError("expected one of true/false/1/0/yes/no/on/off")
        if "Path" in kind:
            return Path(text)
        if "float" in kind:
            number = float(text)
            if not math.isfinite(number):
                raise ValueError("not a finite number")
            return number
        if "int" in kind:
            return int(text)
    except ValueError as exc:
        shown = MASK if name in SECRET_SETTINGS else repr(raw)
        expected = kind.replace(" | None", " or none")
        raise ConfigError(
            name,
            f"environment variable {variable}={shown} is not a valid {expected} ({exc})",
            f"set {variable} to a valid value or unset it",
        ) from None
    return raw


def certificate_subject(path: str) -> str:
    """The subject of a PEM certificate as Kafka writes a TLS principal (RFC 2253)."""
    try:
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
        return cert.subject.rfc4514_string()
    except Exception:  # cryptography missing or not a certificate: name the file instead
        return f"<subject of {path}>"
