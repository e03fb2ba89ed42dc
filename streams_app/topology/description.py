"""TopologyDescription: everything an app declares, immutable, with no reference to live objects.

``App.describe()`` builds one (the app layer declares); the planner
(:mod:`streams_app.topology.plan`) turns one plus broker metadata into a plan, and the runtime
executes the two. Being plain frozen data, a description can be printed
(:mod:`streams_app.topology.render`, ``streams-app -A module topology``), turned into JSON for
tools, compared between two versions of an app, and planned in a unit test without a broker.

Kafka Streams' counterpart is ``TopologyDescription`` (``Topology#describe()``), built from what
the DSL put into its ``InternalTopologyBuilder``. Ours is built from the app's declarations plus
what its agents do before their first ``async for`` (``group_by``/``through``), which the app
layer finds by tracing them (``streams_app.app.trace``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

#: How a :class:`RepartitionDecl` came about.
GROUP_BY = "group_by"
THROUGH = "through"


@dataclass(frozen=True)
class TopicDecl:
    """A declared topic (``app.topic``, an agent's own topic, a repartition topic)."""

    name: str
    #: The codecs' names (``raw``, ``json``, ``str``, ``record:Order``, ...).
    key_codec: str
    value_codec: str
    #: Declared partition count and replication factor (None: the worker's defaults).
    partitions: int | None = None
    replicas: int | None = None
    #: Topic configs to create it with, sorted by name.
    config: tuple[tuple[str, str], ...] = ()
    #: Declared internal: a repartition topic (the app creates and owns it).
    internal: bool = False
    #: The name of the function that gives its records their time (None: Kafka's timestamp).
    timestamp_fn: str | None = None
    #: An internal topic whose partition count is another topic's (a foreign-key join's
    #: subscription and response topics: the right and the left table's source topics).
    follows: str | None = None


@dataclass(frozen=True)
class RepartitionDecl:
    """A ``group_by`` or ``through``: an agent's records of ``source`` forwarded (original value
    bytes, under a new key) to ``topic``, inside the transaction, and read from there."""

    topic: str
    source: str
    agent: str
    #: ``group_by`` or ``through``.
    kind: str = GROUP_BY
    #: The key function's name or the ``name=`` given (group_by).
    key: str | None = None


@dataclass(frozen=True)
class AgentDecl:
    """An agent: the topic (or in-process channel) it reads, and what it runs as."""

    name: str
    #: The topic or channel it is declared on.
    source: str
    #: True when ``source`` is an in-process channel (no Kafka, no partitions).
    on_channel: bool = False
    #: True when it reads the results of a join (``reads`` is the join's name, not a topic).
    on_join: bool = False
    #: The topic its stream reads in the end: ``source``, or the last repartition topic.
    reads: str = ""
    concurrency: int = 1
    isolated_partitions: bool = False
    #: Where a generator agent's yielded values go (``topic NAME``, ``agent NAME``, ...).
    sinks: tuple[str, ...] = ()
    #: Why the trace could not follow it to its first ``async for`` (None: it could, or it
    #: was not traced). Its ``group_by`` topics are then known only once a worker runs it.
    trace_note: str | None = None


#: TableDecl kinds of the stores a join or a table keeps for itself (not an app's tables).
JOIN_STORE = "join-store"
TIMES_STORE = "times"


@dataclass(frozen=True)
class TableDecl:
    """A table: plain, set, global, or windowed; changelog-backed. Also the state stores joins
    keep (kind ``join-store``: their buffers, subscriptions...) and the record times a table
    built from a topic keeps for its joins (kind ``times``): stores like tables, placed,
    changelogged and restored the same way."""

    name: str
    #: ``table``, ``set``, ``global``, ``join-store`` or ``times``.
    kind: str
    changelog: str
    key_codec: str
    value_codec: str
    #: Declared partition count (None: the planner derives it from the input topics).
    partitions: int | None = None
    #: ``tumbling 60s grace 10s``-like text for a windowed table (None: not windowed).
    window: str | None = None
    #: Topic receiving each window's final value when it closes (windowed tables).
    emit_final: str | None = None
    #: The topic it is built from (``app.Table(name, source=topic)``; None: agents write it).
    source: str | None = None
    #: Its changelog is its source topic (restored up to the committed offset on it).
    changelog_is_source: bool = False
    #: A versioned table's history retention, in ms (None: not versioned).
    versioned_ms: int | None = None
    #: The topic whose partition count it has (its source, or a join's input); None: derived
    #: from the input topics as for any table.
    follows: str | None = None
    #: The join or table that keeps this store (join stores and times stores).
    owner: str | None = None

    @property
    def is_global(self) -> bool:
        return self.kind == "global"

    @property
    def internal(self) -> bool:
        """A store a join or table keeps for itself, not a table the app declared."""
        return self.kind in (JOIN_STORE, TIMES_STORE)


#: JoinDecl kinds.
STREAM_TABLE = "stream-table"
STREAM_GLOBAL = "stream-global"
STREAM_STREAM = "stream-stream"
TABLE_TABLE = "table-table"
FOREIGN_KEY = "foreign-key"
#: Joins whose two inputs must be co-partitioned.
COPARTITIONED = (STREAM_TABLE, STREAM_STREAM, TABLE_TABLE)


@dataclass(frozen=True)
class JoinDecl:
    """A join: a node of the topology that reads its inputs in the tasks that own them and
    sends its results inside the transaction (docs/joins.md)."""

    #: Stable, from the inputs (``orders-left-join-customers``), or the ``name=`` given.
    name: str
    #: ``stream-table``, ``stream-global``, ``stream-stream``, ``table-table``, ``foreign-key``.
    kind: str
    #: ``inner``, ``left`` or ``outer``.
    how: str
    #: The left and right inputs: a topic (a stream side) or a table's name.
    left: str
    right: str
    #: The topics behind them (a table's source), whose partition counts the planner checks.
    left_topic: str
    right_topic: str | None
    #: The topics the join itself reads (its stream sides; a foreign-key join's internal
    #: topics); a table side is read by the table.
    reads: tuple[str, ...] = ()
    #: The GlobalTable key mapper's or the foreign-key extractor's name.
    key: str | None = None
    #: Stream-stream window and grace; versioned stream-table grace (ms).
    before_ms: int | None = None
    after_ms: int | None = None
    grace_ms: int | None = None
    #: Opt-in idle close (ms of wall clock with no input; docs/joins.md).
    idle_close_ms: int | None = None
    #: The joiner function's name (None: ``Joined(left, right)`` tuples).
    joiner: str | None = None
    #: The stores it keeps (TableDecls of kind ``join-store``).
    stores: tuple[str, ...] = ()
    #: Internal topics it writes and reads (foreign key: subscriptions, responses).
    internal_topics: tuple[str, ...] = ()
    #: Where its results go: ``topic NAME`` (``.to()``), ``agent NAME``.
    outputs: tuple[str, ...] = ()

    @property
    def copartitioned(self) -> bool:
        return self.kind in COPARTITIONED


@dataclass(frozen=True)
class TimerDecl:
    """A timer or a crontab."""

    name: str
    #: ``every 10s`` or ``cron */5 * * * *``.
    schedule: str
    #: ``wall_clock`` or ``stream_time``.
    on: str
    on_leader: bool = False


@dataclass(frozen=True)
class TaskDecl:
    """``@app.task``: started once with each worker (or on the leader), outside processing."""

    name: str
    on_leader: bool = False


@dataclass(frozen=True)
class SinkDecl:
    """A database sink (``@app.postgres_sink``): a topic landed in PostgreSQL."""

    name: str
    topic: str


@dataclass(frozen=True)
class TopologyDescription:
    """What an app declares. Everything is sorted, so two descriptions of the same app are
    equal, and their JSON is the same text."""

    app_id: str
    topics: tuple[TopicDecl, ...] = ()
    agents: tuple[AgentDecl, ...] = ()
    repartitions: tuple[RepartitionDecl, ...] = ()
    tables: tuple[TableDecl, ...] = ()
    timers: tuple[TimerDecl, ...] = ()
    tasks: tuple[TaskDecl, ...] = ()
    #: In-process channels (their internal names).
    channels: tuple[str, ...] = ()
    sinks: tuple[SinkDecl, ...] = ()
    #: Paths of the app's web pages.
    pages: tuple[str, ...] = ()
    #: The app's services (``app.service``), by class name.
    services: tuple[str, ...] = ()
    joins: tuple[JoinDecl, ...] = ()
    _topics: dict[str, TopicDecl] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self._topics.update((t.name, t) for t in self.topics)

    def topic(self, name: str) -> TopicDecl | None:
        return self._topics.get(name)

    @property
    def repartition_sources(self) -> dict[str, str]:
        """Repartition topic -> the topic forwarded to it."""
        return {r.topic: r.source for r in self.repartitions}

    @property
    def source_topics(self) -> list[str]:
        """The topics a worker consumes: what agents read (after their group_by hops), what
        their forwarders read, the sources of tables built from topics (a GlobalTable's is read
        outside the group) and what joins read; channels and join results not included.
        Sorted."""
        read = {a.reads for a in self.agents if not a.on_channel and not a.on_join}
        read |= {r.source for r in self.repartitions}
        read |= {t.source for t in self.tables if t.source is not None and not t.is_global}
        read |= {topic for j in self.joins for topic in j.reads}
        return sorted(read)

    @property
    def wants_leader(self) -> bool:
        """Whether something runs on the leader only (an ``on_leader`` timer or task)."""
        return any(t.on_leader for t in self.timers) or any(t.on_leader for t in self.tasks)

    @property
    def runs_anything(self) -> bool:
        """Whether a worker of this app has something to run: an agent, a timer, a task, a
        service, a page or a join (Faust runs an app of timers and tasks alone)."""
        return bool(
            self.agents or self.timers or self.tasks or self.services or self.pages or self.joins
        )

    def readers(self, topic: str) -> Iterator[AgentDecl]:
        """The agents whose stream reads ``topic`` (or a join's results) in the end."""
        return (a for a in self.agents if a.reads == topic and not a.on_channel)

    def join(self, name: str) -> JoinDecl | None:
        return next((j for j in self.joins if j.name == name), None)

    def joins_reading(self, topic: str) -> Iterator[JoinDecl]:
        """The joins ``topic``'s records trigger: those reading it, and the table joins of the
        tables built from it (a stream-table join's table side only answers lookups)."""
        tables = {t.name for t in self.tables if t.source == topic}
        return (
            j
            for j in self.joins
            if topic in j.reads
            or (j.kind in (TABLE_TABLE, FOREIGN_KEY) and {j.left, j.right} & tables)
        )

    def tables_from(self, topic: str) -> Iterator[TableDecl]:
        return (t for t in self.tables if t.source == topic)

    def forwarded_from(self, topic: str) -> Iterator[RepartitionDecl]:
        return (r for r in self.repartitions if r.source == topic)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON: lists and dicts of strings, numbers, booleans and None."""
        out = asdict(self)
        out.pop("_topics", None)
        for topic in out["topics"]:
            topic["config"] = dict(topic["config"])
        plain: dict[str, Any] = _lists(out)
        return plain


def _lists(value: Any) -> Any:
    """Tuples as lists, all the way down (what JSON gives back)."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value
