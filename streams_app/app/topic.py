"""Topic: a Kafka topic with its codecs, as an agent's input or a destination for ``send``."""

from __future__ import annotations

import asyncio
import datetime
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streams_app.app import joins
from streams_app.app.windows import Duration, instant_ms
from streams_app.codecs import Codec, CodecSpec, RecordCodec, codec_for, plain_of
from streams_app.errors import InvalidTimestamp, TopologyError
from streams_app.topology.contract import (
    Collected,
    ResultRow,
    SendFuture,
    SourcedRow,
    current_runtime,
)

if TYPE_CHECKING:
    from streams_app.app.app import App


def _seconds(value: Any) -> float:
    return value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)


INVALID_TIMESTAMP_POLICIES = ("dlq", "record_time", "partition_time")


class Topic:
    """A named Kafka topic, declared by the app (created at start if it does not exist).

    Codecs follow Faust: keys use ``key_serializer`` (default: the app's, ``"raw"``), values
    ``value_serializer`` (default: the app's, ``"json"``), and ``key_type``/``value_type``
    convert what they decode to (``str``, ``int``, a ``faust.Record`` subclass, ...).
    """

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
        config: Mapping[str, Any] | None = None,
        internal: bool = False,
        retention: Any = None,
        compacting: bool | None = None,
        deleting: bool | None = None,
        has_prefix: bool = False,
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
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        conf = app.conf
        # Faust's codecs (keys raw, values JSON by default). Decoding checks the declared
        # types: a value that does not fit is a poison record for the dead-letter topic.
        self.key_codec = codec_for(
            key_type, key_serializer, getattr(conf, "key_serializer", "raw"), checked=True
        )
        self.value_codec = codec_for(
            value_type, value_serializer, getattr(conf, "value_serializer", "json"), checked=True
        )
        self.partitions = partitions
        self.replicas = replicas
        self.config: dict[str, str] = self.topic_config(config, retention, compacting, deleting)
        self.internal = internal
        #: The name already carries the app id (an agent's own topic), as Faust's flag.
        self.has_prefix = has_prefix
        #: An internal topic partitioned like another topic (a foreign-key join's).
        self.follows: str | None = None
        #: Tables are built from it (``app.Table(name, source=topic)``): its tombstones delete
        #: their keys, so they reach the tables even when its values are a Record model.
        self.feeds_tables = False

    @staticmethod
    def topic_config(
        config: Mapping[str, Any] | None,
        retention: Any = None,
        compacting: bool | None = None,
        deleting: bool | None = None,
    ) -> dict[str, str]:
        """The topic configs a declaration asks for (``retention`` and the cleanup flags as
        Kafka's ``retention.ms`` and ``cleanup.policy``, unless ``config`` sets them)."""
        out = {k: str(v) for k, v in (config or {}).items()}
        policies = [p for p, on in (("compact", compacting), ("delete", deleting)) if on]
        if policies and "cleanup.policy" not in out:
            out["cleanup.policy"] = ",".join(policies)
        if retention is not None and "retention.ms" not in out:
            out["retention.ms"] = str(int(_seconds(retention) * 1000))
        return out

    def check_redeclared(self, *, config: Mapping[str, str], **declared: Any) -> None:
        """``app.topic(name, ...)`` again: refuse what says something else than the first
        declaration (it would be ignored, the topic keeping the first declaration's codecs,
        partition count and configs)."""
        for attribute, value in declared.items():
            first = getattr(self, attribute)
            if value is None or value is first or value == first:
                continue
            said = "without it" if first is None else f"with {attribute}={first!r}"
            raise TopologyError(
                f"topic {self.name!r} is declared again with {attribute}={value!r}, but was "
                f"declared {said}: declare a topic once, with everything it needs, and use that "
                f"Topic (app.topics[{self.name!r}]) everywhere else"
            )
        for key, value in config.items():
            if self.config.get(key) != value:
                first = self.config.get(key)
                said = "without it" if first is None else f"with {key}={first}"
                raise TopologyError(
                    f"topic {self.name!r} is declared again with topic config {key}={value}, "
                    f"but was declared {said}: declare a topic once, with everything it needs"
                )

    # -- Faust's names for the same things --------------------------------------------------

    @property
    def topics(self) -> tuple[str, ...]:
        return (self.name,)

    def get_topic_name(self) -> str:
        return self.name

    # -- sending ------------------------------------------------------------------------------

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        timestamp: float | None = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        key_serializer: Any = None,
        value_serializer: Any = None,
        callback: Callable[[Any], Any] | None = None,
        force: bool = False,
    ) -> SendFuture:
        """Send a record from inside a running worker (or an app command).

        While a record is processed or a timer runs, it joins the worker's transaction: the
        returned future (awaitable, with ``done()`` and ``result()``) resolves, and the record
        is visible to ``read_committed`` readers, when the transaction commits. From tasks,
        services, pages and commands it goes through a plain idempotent producer (acks=all).
        Outside a worker use ``async with app.producer() as producer`` instead.
        """
        runtime = current_runtime.get()
        if runtime is None:
            raise RuntimeError(
                f"{self.name}.send() called outside a running worker; to feed a topic from a "
                "script use `async with app.producer() as producer: await producer.send(...)`"
            )
        # :meth:`encode`, inline, with the codecs' plain types checked here (the codecs'
        # ``plain``): up to three calls fewer a record on the hot path.
        if key is None:
            raw_key = None
        elif type(key) is self._key_plain:
            raw_key = self._key_dumps(key)
        else:
            raw_key = self._key_codec.dumps(key)
        if value is None:
            raw_value = None
        elif type(value) is self._value_plain:
            raw_value = self._value_dumps(value)
        else:
            raw_value = self._value_codec.dumps(value)
        future = runtime.send_nowait(self.name, raw_key, raw_value, headers, partition, timestamp)
        if future is None:  # no transaction begun yet, metadata unknown, a large value, ...
            future = await runtime.send_encoded(
                self.name, raw_key, raw_value, headers, partition, timestamp
            )
        if callback is not None:
            _call_when_done(future, callback)
        return future

    def send_nowait(
        self, key: Any = None, value: Any = None, timestamp: float | None = None
    ) -> SendFuture | None:
        """:meth:`send` (no headers, partition or callback) when it needs no await, as almost
        every send inside processing does: the caller saves a coroutine per record. None when
        nothing was sent and the caller must await :meth:`send` instead (outside a worker, no
        transaction begun yet, the topic's metadata unknown, a large value, ...)."""
        runtime = current_runtime.get()
        if runtime is None:
            return None  # send() says what is wrong
        raw_key, raw_value = self.encode(key, value)
        return runtime.send_nowait(self.name, raw_key, raw_value, None, None, timestamp)

    def send_soon(
        self,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        timestamp: float | None = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        **_: Any,
    ) -> None:
        """Send from synchronous code (e.g. a window-close callback); sent before the next
        commit, in the same transaction as :meth:`send` would be."""
        runtime = current_runtime.get()
        if runtime is None:
            raise RuntimeError(f"{self.name}.send_soon() called outside a running worker")
        runtime.send_soon(self, key=key, value=value, headers=headers, partition=partition)

    async def maybe_declare(self) -> None:
        """Create the topic if it does not exist (the worker creates declared topics at start
        anyway)."""
        runtime = current_runtime.get()
        if runtime is not None:
            await runtime.declare(self)

    declare = maybe_declare

    @property
    def accepts_tombstones(self) -> bool:
        """Whether a record without a value reaches the agents (as ``None``).

        Not on topics whose values are a Record model: no model is ``None``, so such a
        tombstone goes to the dead-letter topic as a :class:`~streams_app.codecs.TombstoneError`
        instead of crashing the agent that reads ``order.item``. Untyped topics (JSON, raw,
        str) deliver it, as Faust does, for agents that treat it as a delete.
        """
        return self.feeds_tables or not isinstance(self.value_codec, RecordCodec)

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

    # -- joins (Faust's names, Kafka Streams' semantics: docs/joins.md) ----------------------

    def join(
        self,
        other: Any,
        *fields: Any,
        joiner: joins.Joiner | None = None,
        key: Any = None,
        within: Duration | None = None,
        before: Duration | None = None,
        after: Duration | None = None,
        grace: Duration | None = None,
        idle_close: Duration | None = None,
        name: str | None = None,
        changelog: str | None = None,
    ) -> joins.JoinedStream:
        """Inner join of this topic's records (a stream) with ``other``:

        - a table built from a topic (``app.Table(n, source=topic)``): each record meets the
          table's value for its key when it is processed (a versioned table: as of the
          record's time; ``grace=`` lets records wait that long for late table updates);
        - a GlobalTable: ``key=`` (a function of the value, or a model field) maps the record
          to the table's key (default: the record's key);
        - another topic: a windowed stream-stream join, records of the same key at most
          ``within=`` apart (or ``before=``/``after=``), ``grace=`` for late records.

        Results keep this record's key and timestamp (stream-stream: the later of the two);
        their value is ``joiner(left, right)``, or ``Joined(left, right)`` without a joiner.
        ``idle_close=``: see docs/joins.md (opt-in final results when input goes quiet).
        ``changelog="input"`` (stream-stream): each buffer is restored from its input topic
        instead of a changelog topic of its own (docs/joins.md: when that is safe, and why it
        is faster).
        """
        return joins.stream_join(
            self.app,
            joins.INNER,
            self,
            other,
            fields,
            joiner=joiner,
            key=key,
            within=within,
            before=before,
            after=after,
            grace=grace,
            idle_close=idle_close,
            name=name,
            changelog=changelog,
        )

    inner_join = join

    def left_join(
        self,
        other: Any,
        *fields: Any,
        joiner: joins.Joiner | None = None,
        key: Any = None,
        within: Duration | None = None,
        before: Duration | None = None,
        after: Duration | None = None,
        grace: Duration | None = None,
        idle_close: Duration | None = None,
        name: str | None = None,
        changelog: str | None = None,
    ) -> joins.JoinedStream:
        """Left join: as :meth:`join`, and a record without a partner is a result too, with
        ``None`` on the right (stream-stream: once its window has closed unmatched)."""
        return joins.stream_join(
            self.app,
            joins.LEFT,
            self,
            other,
            fields,
            joiner=joiner,
            key=key,
            within=within,
            before=before,
            after=after,
            grace=grace,
            idle_close=idle_close,
            name=name,
            changelog=changelog,
        )

    def outer_join(
        self,
        other: Any,
        *fields: Any,
        joiner: joins.Joiner | None = None,
        within: Duration | None = None,
        before: Duration | None = None,
        after: Duration | None = None,
        grace: Duration | None = None,
        idle_close: Duration | None = None,
        name: str | None = None,
        changelog: str | None = None,
    ) -> joins.JoinedStream:
        """Outer stream-stream join: as :meth:`left_join`, for records of either side."""
        return joins.stream_join(
            self.app,
            joins.OUTER,
            self,
            other,
            fields,
            joiner=joiner,
            within=within,
            before=before,
            after=after,
            grace=grace,
            idle_close=idle_close,
            name=name,
            changelog=changelog,
        )

    @property
    def key_codec(self) -> Codec:
        return self._key_codec

    @key_codec.setter
    def key_codec(self, codec: Codec) -> None:
        self._key_codec = codec
        self._key_plain, self._key_dumps = plain_of(codec)

    @property
    def value_codec(self) -> Codec:
        return self._value_codec

    @value_codec.setter
    def value_codec(self, codec: Codec) -> None:
        self._value_codec = codec
        self._value_plain, self._value_dumps = plain_of(codec)

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        """Both codecs' ``dumps``. A key or value of its codec's plain type goes to the plain
        ``dumps`` directly, as in :meth:`send`: no property and no codec method in between
        for :meth:`send_nowait`, which every join result takes."""
        return (
            None
            if key is None
            else self._key_dumps(key)
            if type(key) is self._key_plain
            else self._key_codec.dumps(key),
            None
            if value is None
            else self._value_dumps(value)
            if type(value) is self._value_plain
            else self._value_codec.dumps(value),
        )

    def encode_results(self, results: Sequence[Collected]) -> list[ResultRow]:
        """:meth:`encode` of each result of a run, as :meth:`Runtime.send_run_nowait`'s rows
        (``(key, value, timestamp_ms, trigger)``): one comprehension, a call fewer per
        result."""
        key_plain, key_dumps, key_codec = self._key_plain, self._key_dumps, self._key_codec
        value_plain, value_dumps = self._value_plain, self._value_dumps
        value_codec = self._value_codec
        return [
            (
                None if k is None else key_dumps(k) if type(k) is key_plain else key_codec.dumps(k),
                None
                if v is None
                else value_dumps(v)
                if type(v) is value_plain
                else value_codec.dumps(v),
                timestamp,
                trigger,
            )
            for _, k, v, timestamp, trigger in results
        ]

    def encode_sourced_run(
        self, results: Sequence[Collected], header: str, fmt: bytes, raw_keys: bool
    ) -> list[SourcedRow]:
        """:meth:`encode_results` of a run whose every result has its record (``trigger``),
        each row with the header ``header: fmt % <the record's offset>`` (its lineage: the
        record collector's ``send_results_nowait``), in the same comprehension. ``raw_keys``:
        each result's key is its record's decoded key and this topic's key codec would encode
        it back to the record's key bytes, which are taken as they are (a text key, decoded
        and encoded again, is the same UTF-8). Some 100 ns a result fewer than encoding, then
        heading each row in a second pass (BENCHMARKS.md)."""
        key_plain, key_dumps, key_codec = self._key_plain, self._key_dumps, self._key_codec
        value_plain, value_dumps = self._value_plain, self._value_dumps
        value_codec = self._value_codec
        return [
            (
                trigger.raw_key  # type: ignore[union-attr]
                if raw_keys
                else None
                if k is None
                else key_dumps(k)
                if type(k) is key_plain
                else key_codec.dumps(k),
                None
                if v is None
                else value_dumps(v)
                if type(v) is value_plain
                else value_codec.dumps(v),
                [(header, fmt % trigger.offset)],  # type: ignore[union-attr]
                timestamp,
            )
            for _, k, v, timestamp, trigger in results
        ]

    def __repr__(self) -> str:
        return f"<Topic {self.name}>"


def _call_when_done(future: Any, callback: Callable[[Any], Any]) -> None:
    async def wait() -> None:
        try:
            await future
        except Exception:
            return
        result = callback(future)
        if inspect.isawaitable(result):
            await result

    task = asyncio.ensure_future(wait())
    _callbacks.add(task)
    task.add_done_callback(_callbacks.discard)


_callbacks: set[asyncio.Future[None]] = set()
