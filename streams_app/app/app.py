"""App: the definition of a topology, and the door to running it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streams_app.app.agent import Agent, AgentFun, Sink
from streams_app.app.pages import Page
from streams_app.app.postgres import DEFAULT_OFFSETS_TABLE, PostgresSink, SinkHandler
from streams_app.app.table import Table, WindowCloseCallback
from streams_app.app.topic import Topic
from streams_app.codecs import Codec, CodecSpec
from streams_app.settings import Settings
from streams_app.transport.base import ProducerConfig, RecordMetadataLike, Transport

if TYPE_CHECKING:
    from streams_app.runtime.clock import Clock
    from streams_app.runtime.worker import Worker


WALL_CLOCK = "wall_clock"
STREAM_TIME = "stream_time"


class App:
    """A stream-processing application: topics, agents and tables, plus its settings.

    >>> app = App("orders", broker="kafka://localhost:9092")      # doctest: +SKIP
    >>> orders = app.topic("orders", value_type=Order)             # doctest: +SKIP
    """

    def __init__(self, id: str, **settings: Any) -> None:
        self.conf = Settings.build(id, settings)
        self.topics: dict[str, Topic] = {}
        self.agents: list[Agent] = []
        self.tables: dict[str, Table] = {}
        self.timers: list[Timer] = []
        self.sinks: dict[str, PostgresSink] = {}
        self.pages: list[Page] = []

    @property
    def id(self) -> str:
        return self.conf.id

    # -- definitions ----------------------------------------------------------------------

    def topic(
        self,
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
    ) -> Topic:
        """A topic. ``timestamp_fn(value)`` gives records their time (a datetime or epoch
        seconds) instead of the Kafka timestamp; ``on_invalid_timestamp`` says what a missing or
        negative one does (see :class:`~streams_app.app.topic.Topic`)."""
        existing = self.topics.get(name)
        if existing is not None:
            if timestamp_fn is not None:
                existing.use_timestamp_fn(timestamp_fn, f"app.topic({name!r})")
            return existing
        topic = Topic(
            self,
            name,
            key_type=key_type,
            value_type=value_type,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
            partitions=partitions,
            replicas=replicas,
            config=config,
            internal=internal,
            timestamp_fn=timestamp_fn,
            on_invalid_timestamp=on_invalid_timestamp,
        )
        self.topics[name] = topic
        return topic

    def agent(
        self,
        channel: Topic | str,
        *,
        name: str | None = None,
        concurrency: int = 1,
        sink: Sequence[Sink] | None = None,
        timestamp_fn: Callable[[Any], Any] | None = None,
    ) -> Callable[[AgentFun], Agent]:
        """Decorate ``async def f(stream)`` to process ``channel``. ``timestamp_fn`` sets the
        input topic's record time (see :meth:`topic`)."""
        topic = channel if isinstance(channel, Topic) else self.topic(channel)
        if timestamp_fn is not None:
            topic.use_timestamp_fn(timestamp_fn, f"agent on {topic.name!r}")

        def decorate(fun: AgentFun) -> Agent:
            agent = Agent(self, fun, topic, name=name, concurrency=concurrency, sink=sink)
            if any(a.short_name == agent.short_name for a in self.agents):
                raise ValueError(f"two agents are named {agent.short_name!r}; pass name=...")
            self.agents.append(agent)
            return agent

        return decorate

    def Table(
        self,
        name: str,
        *,
        default: Callable[[], Any] | None = None,
        partitions: int | None = None,
        key_type: CodecSpec = None,
        value_type: CodecSpec = None,
        changelog_topic: str | None = None,
        on_window_close: WindowCloseCallback | None = None,
    ) -> Table:
        """A changelog-backed table; ``.tumbling()``, ``.hopping()``, ``.sliding()`` and
        ``.session()`` make it windowed, and ``on_window_close(key, value)`` is then called
        with each window's final value when it closes (``key`` is ``(key, WindowRange)``)."""
        if name in self.tables:
            raise ValueError(f"table {name!r} is already defined")
        table = Table(
            self,
            name,
            default=default,
            partitions=partitions,
            key_type=key_type,
            value_type=value_type,
            changelog_topic=changelog_topic,
            on_window_close=on_window_close,
        )
        self.tables[name] = table
        return table

    def timer(
        self, interval: float, *, name: str | None = None, on: str = WALL_CLOCK
    ) -> Callable[[Callable[[], Awaitable[Any]]], Callable[[], Awaitable[Any]]]:
        """Run ``async def f()`` every ``interval`` seconds.

        ``on="wall_clock"`` (the default): once per worker, between batches, by the worker's
        clock. ``on="stream_time"`` (Kafka Streams' ``PunctuationType.STREAM_TIME``): once per
        task each time the task's stream time crosses a multiple of ``interval`` (at most once
        per batch, however many multiples it crossed), for that task: table reads and writes
        reach the task's partition (``current_task`` is set).

        Records it sends join the worker's transaction (they commit with the next commit, with
        the offsets that moved stream time); an exception is handled like an agent error
        (abort, rewind, error policy).
        """
        if interval <= 0:
            raise ValueError("timer interval must be positive")
        if on not in (WALL_CLOCK, STREAM_TIME):
            raise ValueError(f"timer on={on!r}: use {WALL_CLOCK!r} or {STREAM_TIME!r}")

        def decorate(fun: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
            timer_name = name or fun.__name__
            if any(t.name == timer_name for t in self.timers):
                raise ValueError(f"two timers are named {timer_name!r}; pass name=...")
            self.timers.append(Timer(timer_name, interval, fun, on))
            return fun

        return decorate

    def postgres_sink(
        self,
        channel: Topic | str,
        *,
        handler: SinkHandler | None = None,
        name: str | None = None,
        dsn: str | None = None,
        max_batch: int | None = None,
        offsets_table: str = DEFAULT_OFFSETS_TABLE,
        schema: str | Sequence[str] | None = None,
        error_policy: str | None = None,
        idle_in_transaction_timeout: float = 60.0,
    ) -> Any:
        """Land ``channel`` in PostgreSQL exactly once: ``async def handler(conn, records)``.

        Use as a decorator (``@app.postgres_sink(topic)``) or pass ``handler=``. Each fetched
        batch is one database transaction: the handler's writes plus the batch's offsets in
        ``offsets_table``; the sink seeks to those offsets on every assignment and commits none
        to Kafka. ``dsn`` defaults to the ``postgres_dsn`` setting (``STREAMS_APP_POSTGRES_DSN``);
        ``schema`` is idempotent DDL run at start (``CREATE TABLE IF NOT EXISTS ...``). Run it
        with ``streams-app -A module sink NAME`` (docs/database.md).
        """
        topic = channel if isinstance(channel, Topic) else self.topic(channel)

        def declare(fun: SinkHandler) -> PostgresSink:
            sink_name = name or getattr(fun, "__name__", None) or topic.name
            if sink_name in self.sinks:
                raise ValueError(f"two sinks are named {sink_name!r}; pass name=...")
            sink = PostgresSink(
                self,
                topic,
                fun,
                name=sink_name,
                dsn=dsn,
                max_batch=max_batch,
                offsets_table=offsets_table,
                schema=schema,
                error_policy=error_policy,
                idle_in_transaction_timeout=idle_in_transaction_timeout,
            )
            self.sinks[sink_name] = sink
            return sink

        if handler is not None:
            return declare(handler)
        return declare

    def page(
        self, path: str, *, base: Any = None, cors_options: Any = None, name: str | None = None
    ) -> Callable[[Any], Any]:
        """Serve ``async def view(web, request, **match)`` (or a class with ``get``/``post``
        methods) at ``path`` on every worker's web server, as Faust's ``@app.page``."""
        if not path.startswith("/"):
            raise ValueError(f"page path {path!r} must start with '/'")

        def decorate(view: Any) -> Any:
            self.pages.append(Page(path, view, base=base, cors_options=cors_options, name=name))
            return view

        return decorate

    # -- running --------------------------------------------------------------------------

    def worker(
        self, *, transport: Transport | None = None, clock: Clock | None = None, **overrides: Any
    ) -> Worker:
        from streams_app.runtime.worker import Worker

        return Worker(self, transport=transport, clock=clock, **overrides)

    def transport(self) -> Transport:
        from streams_app.transport.kafka import KafkaTransport

        conf = self.conf
        return KafkaTransport(
            conf.bootstrap_servers, security=conf.security(), principal=conf.principal
        )

    @asynccontextmanager
    async def producer(
        self, *, transport: Transport | None = None
    ) -> AsyncIterator[StandaloneProducer]:
        """A plain idempotent producer (acks=all) for feeding topics from scripts and tests."""
        transport = transport or self.transport()
        client = transport.producer(
            ProducerConfig(transactional_id=None, client_id=f"{self.id}-feeder")
        )
        await client.start()
        producer = StandaloneProducer(self, client)
        try:
            yield producer
            await producer.flush()
        finally:
            await client.stop()

    def __repr__(self) -> str:
        return f"<App {self.id}>"


@dataclass(frozen=True)
class Timer:
    name: str
    interval: float
    fun: Callable[[], Awaitable[Any]]
    #: ``"wall_clock"`` or ``"stream_time"``.
    on: str = WALL_CLOCK

    @property
    def interval_ms(self) -> int:
        return max(1, round(self.interval * 1000))


class StandaloneProducer:
    """Sends outside any worker, with the topics' codecs."""

    def __init__(self, app: App, client: Any) -> None:
        self._app = app
        self._client = client
        self._pending: list[asyncio.Future[RecordMetadataLike]] = []

    async def send(
        self,
        topic: Topic | str,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
        partition: int | None = None,
    ) -> asyncio.Future[RecordMetadataLike]:
        target = topic if isinstance(topic, Topic) else self._app.topic(topic)
        raw_key, raw_value = target.encode(key, value)
        future: asyncio.Future[RecordMetadataLike] = await self._client.send(
            target.name, key=raw_key, value=raw_value, partition=partition, headers=headers
        )
        self._pending.append(future)
        return future

    async def flush(self) -> list[RecordMetadataLike]:
        """Wait for every send; raise the first failure."""
        await self._client.flush()
        pending, self._pending = self._pending, []
        return list(await asyncio.gather(*pending))
