"""Topic: a Kafka topic with its codecs, as an agent's input or a destination for ``send``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streams_app.app.context import SendFuture, current_runtime
from streams_app.codecs import Codec, CodecSpec, RecordCodec, resolve_codec

if TYPE_CHECKING:
    from streams_app.app.app import App


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
    ) -> None:
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"invalid topic name {name!r}")
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

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        return (
            None if key is None else self.key_codec.dumps(key),
            None if value is None else self.value_codec.dumps(value),
        )

    def __repr__(self) -> str:
        return f"<Topic {self.name}>"
