"""PostgresSink: a topic landed in PostgreSQL exactly once, as a topology declares it.

The app layer only *declares* the sink: which topic, which database, and the handler that turns
a batch of records into business writes. :mod:`streams_app.postgres.sink` runs it (as its own
process: ``streams-app -A module sink NAME``); nothing here talks to PostgreSQL.

The handler gets an open psycopg ``AsyncConnection`` inside a transaction and a list of decoded
records; it runs its writes on that connection and returns. The runner adds the records' Kafka
offsets to the *same* transaction and commits it, so the rows and the offsets land together or
not at all::

    @app.postgres_sink(reservations)
    async def land(conn, records):
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO reservations (order_id, item, qty) VALUES (%s, %s, %s)",
                [(r.value.order_id, r.value.item, r.value.qty) for r in records],
            )
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from streams_app.errors import ConfigError
from streams_app.settings import ERROR_POLICIES

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.topic import Topic

#: Where the sink keeps its offsets unless told otherwise (one table serves every sink).
DEFAULT_OFFSETS_TABLE = "streams_app_offsets"


@dataclass(frozen=True, slots=True)
class SinkRecord:
    """A committed Kafka record as the handler sees it: decoded with the topic's codecs."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes], ...]

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def __repr__(self) -> str:  # no key or value: they may be personal data
        return f"<SinkRecord {self.topic}[{self.partition}]@{self.offset}>"


#: ``async def handler(conn, records)``: ``conn`` is a psycopg ``AsyncConnection`` in a transaction.
SinkHandler: TypeAlias = Callable[[Any, list[SinkRecord]], Awaitable[Any]]


class PostgresSink:
    """One declared sink. See :meth:`streams_app.App.postgres_sink` for the arguments."""

    def __init__(
        self,
        app: App,
        topic: Topic,
        handler: SinkHandler,
        *,
        name: str,
        dsn: str | None = None,
        max_batch: int | None = None,
        offsets_table: str = DEFAULT_OFFSETS_TABLE,
        schema: str | Sequence[str] | None = None,
        error_policy: str | None = None,
        idle_in_transaction_timeout: float = 60.0,
    ) -> None:
        if not name or not all(c.isalnum() or c in "._-" for c in name):
            raise ConfigError(
                "postgres_sink name", f"{name!r} is not a valid name", "use letters, digits, ._-"
            )
        if max_batch is not None and max_batch < 1:
            raise ConfigError("max_batch", "must be at least 1", "use e.g. 2000")
        if error_policy is not None and error_policy not in ERROR_POLICIES:
            raise ConfigError(
                "error_policy",
                f"unknown policy {error_policy!r} for sink {name!r}",
                f"use one of {', '.join(ERROR_POLICIES)}",
            )
        if idle_in_transaction_timeout <= 0:
            raise ConfigError(
                "idle_in_transaction_timeout", "must be positive", "use e.g. 60 (seconds)"
            )
        self.app = app
        self.topic = topic
        self.handler = handler
        self.name = name
        self._dsn = dsn
        self._max_batch = max_batch
        self.offsets_table = offsets_table
        self.schema: tuple[str, ...] = (schema,) if isinstance(schema, str) else tuple(schema or ())
        self._error_policy = error_policy
        #: The sink's own sessions get this ``idle_in_transaction_session_timeout``: a sink frozen
        #: inside a transaction (a zombie) has its locks released by the server after it.
        self.idle_in_transaction_timeout = idle_in_transaction_timeout

    @property
    def group_id(self) -> str:
        """The sink's consumer group: its own, never the worker's."""
        return f"{self.app.id}-sink-{self.name}"

    @property
    def max_batch(self) -> int:
        """Records per database transaction (one fetched batch)."""
        return self._max_batch or self.app.conf.max_poll_records

    @property
    def error_policy(self) -> str:
        return self._error_policy or self.app.conf.error_policy

    @property
    def dsn(self) -> str:
        """The sink's own DSN, else the app's ``postgres_dsn`` (``STREAMS_APP_POSTGRES_DSN``)."""
        dsn = self._dsn or self.app.conf.postgres_dsn
        if not dsn:
            raise ConfigError(
                "postgres_dsn",
                f"sink {self.name!r} has no database",
                "pass dsn= to app.postgres_sink or set STREAMS_APP_POSTGRES_DSN",
            )
        return dsn

    def __repr__(self) -> str:  # never the DSN: it may hold a password
        return f"<PostgresSink {self.name} on {self.topic.name}>"
