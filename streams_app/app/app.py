"""App: the definition of a topology, and the door to running it.

The surface is Faust's, so a Faust app runs on streams_app once its imports name streams_app:
topics, agents (with or without a topic of their own), tables (plain, set, global), channels,
timers, crontabs, tasks, services, commands, pages and signals. Everything here *declares*;
:meth:`App.worker` (and :meth:`App.main`, through the CLI) is the door to the runtime.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from streams_app.app import background
from streams_app.app.agent import Agent, AgentFun, Sink
from streams_app.app.background import STREAM_TIME, WALL_CLOCK, Crontab, Task, Timer
from streams_app.app.channel import Channel
from streams_app.app.commands import Argument, Command, Option
from streams_app.app.faust_settings import AppSettings, build_settings
from streams_app.app.global_table import GlobalTable
from streams_app.app.joins import Join, JoinedStream, JoinedTable, stream_join
from streams_app.app.options import (
    FAUST_AGENT,
    FAUST_CHANNEL,
    FAUST_TASK,
    FAUST_TIMER,
    FAUST_TOPIC,
    refuse_unknown,
)
from streams_app.app.pages import Page, routed
from streams_app.app.postgres import DEFAULT_OFFSETS_TABLE, PostgresSink, SinkHandler
from streams_app.app.set_table import SetTable
from streams_app.app.signals import Signal
from streams_app.app.table import Table, WindowCloseCallback
from streams_app.app.topic import Topic
from streams_app.app.versioned import VersionedTable
from streams_app.codecs import Codec, CodecSpec
from streams_app.errors import TopologyError
from streams_app.topology import names
from streams_app.topology.contract import current_runtime
from streams_app.topology.description import (
    GROUP_BY,
    THROUGH,
    RepartitionDecl,
    TopologyDescription,
)
from streams_app.transport.base import ProducerConfig, RecordMetadataLike, Transport

if TYPE_CHECKING:
    from streams_app.runtime.clock import Clock
    from streams_app.runtime.worker import Worker

__all__ = ["STREAM_TIME", "WALL_CLOCK", "App", "StandaloneProducer", "Timer"]

# The class names, for annotations inside App (whose methods Table/SetTable/GlobalTable shadow
# them there, as Faust's do).
_Table = Table
_SetTable = SetTable
_GlobalTable = GlobalTable


class App:
    """A stream-processing application: topics, agents and tables, plus its settings.

    Takes streams_app's settings and Faust's (each honoured, mapped or accepted with a warning:
    docs/migrating-from-faust.md).

    >>> app = App("orders", broker="kafka://localhost:9092")      # doctest: +SKIP
    >>> orders = app.topic("orders", value_type=Order)             # doctest: +SKIP
    """

    def __init__(self, id: str, **settings: Any) -> None:
        self.conf: AppSettings = build_settings(id, settings)
        self.topics: dict[str, Topic] = {}
        self.agents: list[Agent] = []
        self.tables: dict[str, Table] = {}
        self.timers: list[Timer | Crontab] = []
        self.tasks: list[Task] = []
        self.services: list[Any] = []
        self.commands: dict[str, Command] = {}
        self.pages: list[Page] = []
        self.channels: list[Channel] = []
        self.sinks: dict[str, PostgresSink] = {}
        #: Repartition topic -> its group_by/through (:meth:`declare_repartition`).
        self.repartitions: dict[str, RepartitionDecl] = {}
        #: Join name -> its declaration (``topic.join(...)``, ``table.join(...)``).
        self.joins: dict[str, Join] = {}
        #: Agent name -> the join whose results its stream reads (``stream.join`` inside it).
        self.agent_joins: dict[str, str] = {}
        #: Agent name -> why its trace stopped short (None: it did not), once traced.
        self._trace_notes: dict[str, str | None] = {}
        self.on_rebalance_start = Signal("on_rebalance_start", self)
        self.on_rebalance_complete = Signal("on_rebalance_complete", self)
        self.on_partitions_assigned = Signal("on_partitions_assigned", self)
        self.on_partitions_revoked = Signal("on_partitions_revoked", self)
        self.on_worker_init = Signal("on_worker_init", self)
        self.on_before_shutdown = Signal("on_before_shutdown", self)

    @property
    def id(self) -> str:
        return self.conf.id

    # -- topics and channels --------------------------------------------------------------

    def topic(
        self,
        *topics: str,
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
        pattern: Any = None,
        has_prefix: bool = False,
        timestamp_fn: Callable[[Any], Any] | None = None,
        on_invalid_timestamp: str = "dlq",
        schema: Any = None,
        **faust: Any,
    ) -> Topic:
        """Declare a topic (created at start if it does not exist). ``timestamp_fn(value)``
        gives records their time (a datetime or epoch seconds) instead of the Kafka timestamp;
        ``on_invalid_timestamp`` says what a missing or negative one does (see
        :class:`~streams_app.app.topic.Topic`). ``schema`` (Faust's ``faust.Schema``) gives
        the key and value types and serializers not given here.

        Declaring a name again returns the same Topic; a declaration that says something else
        about it (types, serializers, partitions, replicas, topic configs) is refused."""
        where = f"app.topic({', '.join(map(repr, topics))})"
        refuse_unknown(where, faust, App.topic, ignored=FAUST_TOPIC)
        if schema is not None:
            key_type = key_type if key_type is not None else schema.key_type
            value_type = value_type if value_type is not None else schema.value_type
            key_serializer = key_serializer or getattr(schema, "key_serializer", None)
            value_serializer = value_serializer or getattr(schema, "value_serializer", None)
        if pattern is not None:
            raise TopologyError("topic(pattern=...) is not supported: name the topics")
        if len(topics) != 1:
            raise TopologyError(
                f"app.topic() takes one topic name, got {len(topics)}: declare one Topic per "
                "topic (an agent reads one topic)"
            )
        name = topics[0]
        existing = self.topics.get(name)
        if existing is not None:
            existing.check_redeclared(
                key_type=key_type,
                value_type=value_type,
                key_serializer=key_serializer,
                value_serializer=value_serializer,
                partitions=partitions,
                replicas=replicas,
                config=Topic.topic_config(config, retention, compacting, deleting),
            )
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
            retention=retention,
            compacting=compacting,
            deleting=deleting,
            has_prefix=has_prefix,
            timestamp_fn=timestamp_fn,
            on_invalid_timestamp=on_invalid_timestamp,
        )
        self.topics[name] = topic
        return topic

    def declare_repartition(
        self,
        agent: Agent,
        source: str | None,
        key: Callable[[Any], Any] | None,
        *,
        name: str | None,
        partitions: int | None,
        topic: Topic | None = None,
    ) -> Topic:
        """Declare the repartition topic of ``agent``'s ``group_by(key)`` (or ``through(topic)``)
        on its stream of ``source``, and return it (the one already declared, if any).

        The one way repartition topics come into the app: the agents' ``group_by`` and
        ``through`` call it, whether a trace (:meth:`describe`) or a worker runs them.
        """
        source_topic = self.topics.get(source) if source else None
        if source_topic is None or (
            isinstance(agent.channel, Channel) and source == agent.channel.name
        ):
            raise RuntimeError("group_by/through need a topic: a channel has no partitions")
        label: str | None = None
        if topic is not None:
            target = topic
        else:
            label = name or getattr(key, "__name__", None)
            if not label or label == "<lambda>":
                raise ValueError("group_by(key) with a lambda needs name=...")
            topic_name = names.repartition_topic(
                agent.name, source_topic.name, label, source_has_prefix=source_topic.has_prefix
            )
            target = self.topics.get(topic_name) or self.topic(
                topic_name,
                key_serializer=source_topic.key_codec,
                value_serializer=source_topic.value_codec,
                partitions=partitions,  # None: the worker's topic_partitions (the planner)
                internal=True,
            )
        if target.name not in self.repartitions:
            self.repartitions[target.name] = RepartitionDecl(
                target.name,
                source_topic.name,
                agent.name,
                GROUP_BY if topic is None else THROUGH,
                label,
            )
        return target

    def declare_stream_join(
        self, agent: Agent, source: str, how: str, other: Any, options: Mapping[str, Any]
    ) -> JoinedStream:
        """``stream.join(other, ...)`` inside ``agent`` (before its first ``async for``) on its
        stream of ``source``: the same join a module-level ``topic.join`` declares, whose
        results the agent's stream then reads. Traces and running workers both call it."""
        topic = self.topics.get(source)
        if topic is None or (isinstance(agent.channel, Channel) and source == agent.channel.name):
            raise TopologyError(
                f"agent {agent.name!r}: join() needs a topic's stream (a channel has no "
                "partitions, and joined results cannot be joined again)"
            )
        joined = stream_join(self, how, topic, other, (), **options)
        known = self.agent_joins.get(agent.name)
        if known is not None and known != joined.name:
            raise TopologyError(
                f"agent {agent.name!r} joins twice ({known!r}, {joined.name!r}): an agent's "
                "stream reads one join's results"
            )
        self.agent_joins[agent.name] = joined.name
        return joined

    def describe(self, *, trace: bool = True) -> TopologyDescription:
        """What this app declares, as an immutable :class:`TopologyDescription` (``streams-app
        -A module topology`` prints it; the planner and the worker read it).

        ``trace``: first run each agent not traced yet up to its first ``async for``, so that
        its ``group_by`` topics are declared (no worker or event loop needed: see
        :mod:`streams_app.app.trace`). A worker describes without: its own agents have run that
        far when it describes the app.
        """
        if trace:
            untraced = [a for a in self.agents if a.name not in self._trace_notes]
            if untraced:
                from streams_app.app.trace import trace_agents

                self._trace_notes.update(trace_agents(self))
        from streams_app.app.describe import describe

        return describe(self, self._trace_notes)

    def resolve_table_partitions(self, table_partitions: Mapping[str, int]) -> None:
        """Give tables declared without ``partitions=`` the count the plan chose for them (one
        explicit step, at a worker's start), so ``table.partitions`` reads as in Faust."""
        stores = {s.name: s for s in self.join_stores()}
        for name, partitions in table_partitions.items():
            table = self.tables.get(name) or stores.get(name)
            if table is not None and table.partitions is None:
                table.partitions = partitions

    def own_changelogs(self) -> set[str]:
        """The changelog topics of the app's tables that are topics of their own: not a
        table's source topic serving as its changelog (an input of the app, which reset must
        not delete and ``send`` must not refuse)."""
        return {
            table.changelog_topic_name
            for table in self.tables.values()
            if not (table.source is not None and table.changelog_is_source)
        }

    def join_stores(self) -> list[Any]:
        """The stores joins keep, and the record times tables keep for joins (tables of the
        topology, not the app's: ``app.tables`` does not list them)."""
        stores: list[Any] = [t.times for t in self.tables.values() if t.times is not None]
        for join in self.joins.values():
            stores.extend(join.stores.values())
        return stores

    def channel(
        self,
        *,
        key_type: CodecSpec = None,
        value_type: CodecSpec = None,
        maxsize: int | None = None,
        **faust: Any,
    ) -> Channel:
        """An in-process channel (no Kafka, outside the transaction: see app.channel)."""
        refuse_unknown("app.channel()", faust, App.channel, ignored=FAUST_CHANNEL)
        channel = Channel(self, key_type=key_type, value_type=value_type, maxsize=maxsize)
        self.channels.append(channel)
        return channel

    # -- agents ---------------------------------------------------------------------------

    def agent(
        self,
        channel: Topic | Channel | JoinedStream | JoinedTable | str | None = None,
        *,
        name: str | None = None,
        concurrency: int = 1,
        sink: Sequence[Sink] | None = None,
        isolated_partitions: bool = False,
        key_type: Any = None,
        value_type: Any = None,
        use_reply_headers: bool = True,
        help: str | None = None,
        timestamp_fn: Callable[[Any], Any] | None = None,
        schema: Any = None,
        **faust: Any,
    ) -> Callable[[AgentFun], Agent]:
        """Decorate ``async def f(stream)`` to process ``channel`` (a topic, its name, or an
        in-process channel); without one, the agent owns a topic (Faust's ``@app.agent()``).
        ``timestamp_fn`` sets the input topic's record time (see :meth:`topic`); ``schema``
        (Faust's) the own topic's key and value types not given here."""
        refuse_unknown("@app.agent()", faust, App.agent, ignored=FAUST_AGENT)
        if schema is not None:
            key_type = key_type if key_type is not None else schema.key_type
            value_type = value_type if value_type is not None else schema.value_type
        source = self.topic(channel) if isinstance(channel, str) else channel
        if isinstance(source, JoinedTable):
            source = source.changes()  # an agent reads a joined table's updates

        def decorate(fun: AgentFun) -> Agent:
            agent = Agent(
                self,
                fun,
                source,
                name=name,
                concurrency=concurrency,
                sink=sink,
                isolated_partitions=isolated_partitions,
                key_type=key_type,
                value_type=value_type,
                use_reply_headers=use_reply_headers,
                help=help,
            )
            if any(a.name == agent.name for a in self.agents):
                raise ValueError(f"two agents are named {agent.name!r}; pass name=...")
            if timestamp_fn is not None:
                if not isinstance(agent.channel, Topic):
                    raise TopologyError(
                        f"agent {agent.name!r} sets a timestamp_fn but reads a channel: record "
                        "time comes from a topic's records"
                    )
                agent.channel.use_timestamp_fn(timestamp_fn, f"agent on {agent.channel.name!r}")
            self.agents.append(agent)
            return agent

        return decorate

    actor = agent

    # -- tables ---------------------------------------------------------------------------

    def _add_table(self, table: _Table) -> _Table:
        if table.name in self.tables:
            raise ValueError(f"table {table.name!r} is already defined")
        self.tables[table.name] = table
        return table

    def Table(
        self,
        name: str,
        *,
        default: Callable[[], Any] | None = None,
        partitions: int | None = None,
        key_type: CodecSpec = None,
        value_type: CodecSpec = None,
        changelog_topic: str | Topic | None = None,
        help: str | None = None,
        on_window_close: WindowCloseCallback | None = None,
        **options: Any,
    ) -> _Table:
        """A changelog-backed table; ``.tumbling()``, ``.hopping()``, ``.sliding()`` and
        ``.session()`` make it windowed, and ``on_window_close(key, value)`` is then called
        with each window's final value when it closes (``key`` is ``(key, WindowRange)``).

        ``source=topic``: a table built from a topic (Kafka Streams' ``builder.table``), its
        latest value per key, a tombstone deleting the key; ``versioned=history`` keeps every
        value for that long (seconds or a timedelta) for lookups as of a time (docs/joins.md).
        """
        kind = VersionedTable if options.get("versioned") is not None else Table
        return self._add_table(
            kind(
                self,
                name,
                default=default,
                partitions=partitions,
                key_type=key_type,
                value_type=value_type,
                changelog_topic=changelog_topic,
                help=help,
                on_window_close=on_window_close,
                **options,
            )
        )

    def SetTable(self, name: str, **options: Any) -> _SetTable:
        table = SetTable(self, name, **options)
        self._add_table(table)
        return table

    def GlobalTable(self, name: str, **options: Any) -> _GlobalTable:
        table = GlobalTable(self, name, **options)
        self._add_table(table)
        return table

    # -- timers, tasks, services ----------------------------------------------------------

    def timer(
        self,
        interval: float | Any,
        *,
        on_leader: bool = False,
        name: str | None = None,
        on: str = WALL_CLOCK,
        **faust: Any,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Run ``f()`` (or ``f(app)``) every ``interval`` seconds (a number or a timedelta).

        ``on="wall_clock"`` (the default): once per worker (or only on the leader, with
        ``on_leader=True``), between batches, by the worker's clock. ``on="stream_time"`` (Kafka
        Streams' ``PunctuationType.STREAM_TIME``): once per task each time the task's stream time
        crosses a multiple of ``interval`` (at most once per batch, however many multiples it
        crossed), for that task: table reads and writes reach the task's partition
        (``current_task`` is set). See :mod:`streams_app.app.background` for how timers stand
        with transactions.
        """
        refuse_unknown("@app.timer()", faust, App.timer, ignored=FAUST_TIMER)
        seconds = interval.total_seconds() if hasattr(interval, "total_seconds") else interval
        if float(seconds) <= 0:
            raise ValueError("timer interval must be positive")
        if on not in (WALL_CLOCK, STREAM_TIME):
            raise ValueError(f"timer on={on!r}: use {WALL_CLOCK!r} or {STREAM_TIME!r}")
        if on == STREAM_TIME and on_leader:
            raise ValueError(
                "a stream-time timer runs once per task, on every worker: on_leader=True "
                "applies to wall-clock timers only"
            )

        def decorate(fun: Callable[..., Any]) -> Callable[..., Any]:
            label = self._unique_timer_name(background.timer_name(fun, name))
            self.timers.append(Timer(label, float(seconds), fun, on_leader=on_leader, on=on))
            return fun

        return decorate

    def crontab(
        self,
        cron_format: str,
        *,
        timezone: Any = None,
        tz: Any = None,
        on_leader: bool = False,
        name: str | None = None,
        **faust: Any,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Run ``f()`` at the times of a cron expression (``timezone``: a tzinfo or a name;
        default the app's ``timezone`` setting)."""
        refuse_unknown("@app.crontab()", faust, App.crontab, ignored=FAUST_TASK)
        from croniter import croniter

        if not croniter.is_valid(cron_format):
            raise ValueError(f"{cron_format!r} is not a cron expression")

        def decorate(fun: Callable[..., Any]) -> Callable[..., Any]:
            label = self._unique_timer_name(background.timer_name(fun, name))
            zone = timezone or tz or self.conf.timezone
            self.timers.append(Crontab(label, cron_format, fun, zone, on_leader=on_leader))
            return fun

        return decorate

    def _unique_timer_name(self, label: str) -> str:
        taken = {t.name for t in self.timers}
        if label not in taken:
            return label
        index = 2
        while f"{label}#{index}" in taken:
            index += 1
        return f"{label}#{index}"

    def task(
        self, fun: Callable[..., Any] | None = None, *, on_leader: bool = False, **faust: Any
    ) -> Any:
        """``@app.task`` (or ``@app.task()``): run ``f()``/``f(app)`` once when a worker
        starts, beside the agents (its sends are outside any transaction)."""
        refuse_unknown("@app.task()", faust, App.task, ignored=FAUST_TASK)

        def decorate(target: Callable[..., Any]) -> Callable[..., Any]:
            self.tasks.append(Task(names.canonical_name(target), target, on_leader=on_leader))
            return target

        return decorate(fun) if fun is not None else decorate

    def service(self, service: Any) -> Any:
        """Start ``service`` (a ``mode.Service`` class or instance) with each worker, stop it
        after; a class is instantiated without arguments."""
        self.services.append(service)
        return service

    # -- commands and pages ---------------------------------------------------------------

    def command(
        self, *params: Option | Argument, name: str | None = None, base: Any = None, **_: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Add ``python app.py <name> ...`` (and ``streams-app -A module <name>``)."""

        def decorate(fun: Callable[..., Any]) -> Callable[..., Any]:
            label = name or names.unwrap(fun).__name__
            self.commands[label] = Command(label, fun, tuple(params), fun.__doc__ or "")
            return fun

        return decorate

    def table_route(self, table: _Table, **options: Any) -> Callable[[Any], Any]:
        return routed("table", table, **options)

    def topic_route(self, topic: Topic, **options: Any) -> Callable[[Any], Any]:
        return routed("topic", topic, **options)

    # -- while running --------------------------------------------------------------------

    @property
    def rebalancing(self) -> bool:
        runtime = current_runtime.get()
        return bool(runtime is not None and runtime.rebalancing)

    @property
    def should_stop(self) -> bool:
        runtime = current_runtime.get()
        return bool(runtime is not None and runtime.should_stop)

    async def sleep(self, seconds: float) -> None:
        """Sleep, waking early when the worker stops (Faust's ``app.sleep``)."""
        runtime = current_runtime.get()
        if runtime is None:
            await asyncio.sleep(seconds)
        else:
            await runtime.sleep(seconds)

    def is_leader(self) -> bool:
        runtime = current_runtime.get()
        return bool(runtime is not None and runtime.is_leader())

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

    def main(self, argv: Sequence[str] | None = None) -> NoReturn:
        """The command line for this app: ``python app.py worker -l info``, ``send``, and the
        app's own ``@app.command`` commands (Faust's ``app.main()``)."""
        from streams_app.cli.main import main_for_app

        raise SystemExit(main_for_app(self, argv))

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
