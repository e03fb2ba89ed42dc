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
    #: The topic its stream reads in the end: ``source``, or the last repartition topic.
    reads: str = ""
    concurrency: int = 1
    isolated_partitions: bool = False
    #: Where a generator agent's yielded values go (``topic NAME``, ``agent NAME``, ...).
    sinks: tuple[str, ...] = ()
    #: Why the trace could not follow it to its first ``async for`` (None: it could, or it
    #: was not traced). Its ``group_by`` topics are then known only once a worker runs it.
    trace_note: str | None = None


@dataclass(frozen=True)
class TableDecl:
    """A table: plain, set, global, or windowed; changelog-backed."""

    name: str
    #: ``table``, ``set`` or ``global``.
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

    @property
    def is_global(self) -> bool:
        return self.kind == "global"


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
        """The topics a worker consumes: what agents read (after their group_by hops) and what
        their forwarders read, channels not included. Sorted."""
        read = {a.reads for a in self.agents if not a.on_channel}
        return sorted(read | {r.source for r in self.repartitions})

    @property
    def wants_leader(self) -> bool:
        """Whether something runs on the leader only (an ``on_leader`` timer or task)."""
        return any(t.on_leader for t in self.timers) or any(t.on_leader for t in self.tasks)

    @property
    def runs_anything(self) -> bool:
        """Whether a worker of this app has something to run: an agent, a timer, a task, a
        service or a page (Faust runs an app of timers and tasks alone)."""
        return bool(self.agents or self.timers or self.tasks or self.services or self.pages)

    def readers(self, topic: str) -> Iterator[AgentDecl]:
        """The agents whose stream reads ``topic`` in the end."""
        return (a for a in self.agents if a.reads == topic and not a.on_channel)

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
