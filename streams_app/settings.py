"""An app's settings: keyword arguments, overridden by ``STREAMS_APP_<NAME>`` environment variables.

The environment wins so that one topology module runs unchanged on a laptop, in docker-compose
and in production: the code states intent and defaults, the deployment states addresses and
sizes. Every wrong value stops the worker at start with a :class:`~streams_app.errors.ConfigError`
naming the setting and the fix.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streams_app.errors import ConfigError

EXACTLY_ONCE_V2 = "exactly_once_v2"
AT_LEAST_ONCE = "at_least_once"
AT_MOST_ONCE = "at_most_once"
GUARANTEES = (EXACTLY_ONCE_V2, AT_LEAST_ONCE, AT_MOST_ONCE)
ERROR_POLICIES = ("retry", "stop", "dlq")
ENV_PREFIX = "STREAMS_APP_"

#: Settings that are secrets: never printed, never logged.
SECRET_SETTINGS = frozenset({"sasl_password", "ssl_password"})


@dataclass
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
    transaction_timeout: float = 10.0
    session_timeout: float = 10.0
    heartbeat_interval: float = 3.0
    max_poll_interval: float = 300.0
    max_poll_records: int = 2_000
    topic_partitions: int = 8
    topic_replication_factor: int = 1
    #: What to do when an agent raises: retry (with backoff), stop the worker, or dlq.
    error_policy: str = "retry"
    retry_backoff: float = 0.1
    retry_backoff_max: float = 10.0
    #: Retries of one record before giving up (then the worker stops); None: forever.
    max_retries: int | None = None
    #: Dead-letter topic name; ``{topic}`` is replaced by the source topic.
    dead_letter_topic: str = "{topic}.dlq"
    #: Add src_topic / src_partition / src_offset headers to every record sent while processing.
    lineage_headers: bool = True
    #: Add txn_id / generation headers (the worker's transactional id, and the consumer-group
    #: generation its offsets commit under) to every record sent while processing, so an audit
    #: (the chaos verifier) can prove no fenced zombie got anything committed. Off by default.
    transaction_headers: bool = False
    restore_timeout: float = 300.0
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
    producer_linger_ms: int = 5
    producer_max_batch_size: int = 256 * 1024
    compression_type: str | None = None
    # Security: passed through to the Kafka clients unchanged.
    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def build(
        cls, id: str, overrides: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Defaults < keyword arguments < environment. Unknown names are rejected."""
        environ = os.environ if environ is None else environ
        fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in ("id", "extra")}
        unknown = set(overrides) - set(fields)
        if unknown:
            name = sorted(unknown)[0]
            raise ConfigError(
                name,
                "is not a streams_app setting",
                f"remove it, or use one of: {', '.join(sorted(fields))}",
            )
        values: dict[str, Any] = dict(overrides)
        for name, f in fields.items():
            raw = environ.get(ENV_PREFIX + name.upper())
            if raw is not None:
                values[name] = _parse(name, raw, f.type)
        app_id = environ.get(ENV_PREFIX + "ID", id)
        settings = cls(id=app_id, **values)
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
    def bootstrap_servers(self) -> str:
        servers = []
        for part in self.broker.split(";") if ";" in self.broker else self.broker.split(","):
            part = part.strip()
            if part.startswith("kafka://"):
                part = part[len("kafka://") :]
            servers.append(part.rstrip("/"))
        return ",".join(servers)

    def security(self) -> dict[str, Any]:
        """Client keyword arguments for TLS and SASL, passed through to aiokafka."""
        out: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol in ("SSL", "SASL_SSL"):
            from aiokafka.helpers import create_ssl_context

            out["ssl_context"] = create_ssl_context(
                cafile=self.ssl_cafile,
                certfile=self.ssl_certfile,
                keyfile=self.ssl_keyfile,
                password=self.ssl_password,
            )
        if self.sasl_mechanism:
            out["sasl_mechanism"] = self.sasl_mechanism
            out["sasl_plain_username"] = self.sasl_username
            out["sasl_plain_password"] = self.sasl_password
        return out

    def describe(self) -> dict[str, Any]:
        """The settings as an operator may see them: secrets masked."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = "*****" if f.name in SECRET_SETTINGS and value else value
        return out

    # -- validation -----------------------------------------------------------------------

    def validate(self) -> None:
        if not self.id or not all(c.isalnum() or c in "._-" for c in self.id):
            raise ConfigError(
                "id", f"{self.id!r} is not a valid app id", "use letters, digits, '.', '_', '-'"
            )
        if self.processing_guarantee not in GUARANTEES:
            raise ConfigError(
                "processing_guarantee",
                f"unknown guarantee {self.processing_guarantee!r}",
                f"use one of {', '.join(GUARANTEES)}",
            )
        if not self.bootstrap_servers:
            raise ConfigError("broker", "is empty", "set broker='kafka://host:9092'")
        for server in self.bootstrap_servers.split(","):
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(
                    "broker",
                    f"{server!r} is not host:port",
                    "use broker='kafka://host:9092' (several: comma-separated)",
                )
        scheme = self.store.split("://", 1)[0]
        if "://" not in self.store or scheme not in ("rocksdb", "memory"):
            raise ConfigError(
                "store", f"unknown store {self.store!r}", "use 'rocksdb://' or 'memory://'"
            )
        interval = self.effective_commit_interval
        if interval <= 0:
            raise ConfigError("commit_interval", "must be positive", "use e.g. 0.1 (seconds)")
        if self.commit_every < 1:
            raise ConfigError("commit_every", "must be at least 1", "use e.g. 10000")
        if self.exactly_once and self.transaction_timeout < interval:
            raise ConfigError(
                "transaction_timeout",
                f"{self.transaction_timeout}s is below commit_interval ({interval}s): every "
                "transaction would time out before it commits",
                "raise transaction_timeout or lower commit_interval",
            )
        if self.heartbeat_interval >= self.session_timeout:
            raise ConfigError(
                "heartbeat_interval",
                f"{self.heartbeat_interval}s is not below session_timeout "
                f"({self.session_timeout}s)",
                "use a heartbeat_interval of at most a third of session_timeout",
            )
        if self.error_policy not in ERROR_POLICIES:
            raise ConfigError(
                "error_policy",
                f"unknown policy {self.error_policy!r}",
                f"use one of {', '.join(ERROR_POLICIES)}",
            )
        if "{topic}" not in self.dead_letter_topic and not self.dead_letter_topic:
            raise ConfigError(
                "dead_letter_topic", "is empty", "use e.g. '{topic}.dlq' or a fixed topic name"
            )
        for name in ("topic_partitions", "topic_replication_factor", "max_poll_records"):
            if getattr(self, name) < 1:
                raise ConfigError(name, "must be at least 1", f"set {name} to a positive number")
        self._validate_state_memory()
        if self.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise ConfigError(
                "security_protocol",
                f"unknown protocol {self.security_protocol!r}",
                "use PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
            )
        if self.security_protocol.startswith("SASL") and not self.sasl_mechanism:
            raise ConfigError(
                "sasl_mechanism",
                f"is required with security_protocol={self.security_protocol}",
                "set sasl_mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)",
            )

    def _validate_state_memory(self) -> None:
        for name in ("state_cache_max_bytes", "state_uncommitted_max_bytes"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
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
        files = self.rocksdb_max_open_files
        if not _is_int(files) or not (files == -1 or files >= 20):
            raise ConfigError(
                "rocksdb_max_open_files",
                f"{files!r} is not -1 or at least 20 (RocksDB's minimum)",
                "use e.g. 64 (files per table partition), or -1 to keep every file open",
            )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse(name: str, raw: str, annotation: Any) -> Any:
    """Turn an environment string into the setting's type."""
    kind = str(annotation)
    try:
        if "bool" in kind:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if raw.strip().lower() in ("", "none") and "None" in kind:
            return None
        if "Path" in kind:
            return Path(raw)
        if "float" in kind:
            return float(raw)
        if "int" in kind:
            return int(raw)
    except ValueError:
        raise ConfigError(
            name,
            f"environment variable {ENV_PREFIX}{name.upper()}={raw!r} is not a valid {kind}",
            f"set {ENV_PREFIX}{name.upper()} to a valid value or unset it",
        ) from None
    return raw
