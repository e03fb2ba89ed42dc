"""Topic: a Kafka topic with its codecs, as an agent's input or a destination for ``send``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streams_app.app.context import SendFuture, current_runtime
from streams_app.app.windows import instant_ms
from streams_app.codecs import Codec, CodecSpec, RecordCodec, resolve_codec
from streams_app.errors import InvalidTimestamp, TopologyError

if TYPE_CHECKING:
    from streams_app.app.app import App


INVALID_TIMESTAMP_POLICIES = ("dlq", "record_time", "partition_time")


class Topic:
    def __init__(
        self,
        app: App,
        name: str,
        *,
        key_type: CodecSpec = None,
        value_type: CodecSpec = None,
        key_serializer: str | Codec | None = None,
        value_serializer: str | Codec | None = None,
        partitions: int | None = None,
        replicas: int | None = None,
        config: Mapping[str, str] | None = None,
        internal: bool = False,
        timestamp_fn: Callable[[Any], Any] | None = None,
        on_invalid_timestamp: str = "dlq",
    ) -> None:
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"invalid topic name {name!r}")
        if on_invalid_timestamp not in INVALID_TIMESTAMP_POLICIES:
            raise ValueError(
                f"on_invalid_timestamp must be one of {INVALID_TIMESTAMP_POLICIES}, "
                f"not {on_invalid_timestamp!r}"
            )
        #: ``f(value) -> datetime | epoch seconds``: the record's time, instead of Kafka's
        #: timestamp (Kafka Streams' TimestampExtractor).
        self.timestamp_fn = timestamp_fn
        #: What a missing or negative timestamp does: ``"dlq"`` (the record goes to the
        #: dead-letter topic, the default), ``"record_time"`` (use the Kafka timestamp instead
        #: of a bad ``timestamp_fn`` result), ``"partition_time"`` (use the partition's stream
        #: time, as Kafka Streams' UsePartitionTimeOnInvalidTimestamp).
        self.on_invalid_timestamp = on_invalid_timestamp
        self.app = app
        self.name = name
        self.key_type = key_type
        self.value_type = value_type
        # Keys default to raw bytes (as in Faust), values to JSON. Decoding checks the declared
        # types: a value that does not fit is a poison record for the dead-letter topic.
        self.key_codec: Codec = resolve_codec(
            key_serializer or key_type, default="raw", checked=True
        )
        self.value_codec: Codec = resolve_codec(
            value_serializer or value_type, default="json", checked=True
        )
        self.partitions = partitions
        self.replicas = replicas
        self.config: dict[str, str] = dict(config or {})
        self.internal = internal

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> SendFuture:
        """Send a record from inside a running worker: it joins the worker's transaction.

        Returns the delivery future without waiting for it (awaitable, with ``done()`` and
        ``result()`` like an ``asyncio.Future``): under exactly-once the record is acknowledged,
        and visible to ``read_committed`` readers, when the transaction commits.
        Outside a worker use ``async with app.producer() as producer`` instead.
        """
        runtime = current_runtime.get()
        if runtime is None:
            raise RuntimeError(
                f"{self.name}.send() called outside a running worker; to feed a topic from a "
                "script use `async with app.producer() as producer: await producer.send(...)`"
            )
        return await runtime.send(
            self,
            key=key,
            value=value,
            headers=headers,
            partition=partition,
            timestamp=timestamp,
        )

    @property
    def accepts_tombstones(self) -> bool:
        """Whether a record without a value reaches the agents (as ``None``).

        Not on topics whose values are a Record model: no model is ``None``, so such a
        tombstone goes to the dead-letter topic as a :class:`~streams_app.codecs.TombstoneError`
        instead of crashing the agent that reads ``order.item``. Untyped topics (JSON, raw,
        str) deliver it, as Faust does, for agents that treat it as a delete.
        """
        return not isinstance(self.value_codec, RecordCodec)

    def use_timestamp_fn(self, fun: Callable[[Any], Any], owner: str) -> None:
        """An agent's ``timestamp_fn`` applies to its input topic: one per topic."""
        if self.timestamp_fn is not None and self.timestamp_fn is not fun:
            raise TopologyError(
                f"{owner} sets a timestamp_fn on topic {self.name!r}, which already has "
                "another one: a topic's records have one time; set it once, on the topic"
            )
        self.timestamp_fn = fun

    def timestamp_of(self, record_timestamp: int, value: Any, partition_time: int) -> int:
        """The record's time in ms; raises :class:`InvalidTimestamp` when there is none."""
        fun = self.timestamp_fn
        if fun is None:
            if record_timestamp >= 0:
                return record_timestamp
            problem = f"the record's Kafka timestamp is {record_timestamp}"
        else:
            try:
                raw = fun(value)
                timestamp = None if raw is None else instant_ms(raw, "timestamp_fn result")
            except Exception as exc:
                timestamp = None
                problem = f"timestamp_fn failed: {type(exc).__name__}: {exc}"
            else:
                problem = f"timestamp_fn returned {raw!r}"
            if timestamp is not None and timestamp >= 0:
                return timestamp
            if self.on_invalid_timestamp == "record_time" and record_timestamp >= 0:
                return record_timestamp
        if self.on_invalid_timestamp == "partition_time" and partition_time >= 0:
            return partition_time
        raise InvalidTimestamp(
            f"{problem} (topic {self.name!r}, on_invalid_timestamp={self.on_invalid_timestamp!r})"
        )

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        return (
            None if key is None else self.key_codec.dumps(key),
            None if value is None else self.value_codec.dumps(value),
        )

    def __repr__(self) -> str:
        return f"<Topic {self.name}>"
