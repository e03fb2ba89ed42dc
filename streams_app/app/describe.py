"""From an App's declarations to its :class:`~streams_app.topology.description.TopologyDescription`.

The app layer owns this step because only it knows its objects (topics and their codecs,
agents and their sinks, windowed tables); what comes out is plain frozen data that the planner
and the runtime read, and that ``streams-app topology`` prints. Nothing here writes into the
App except the repartition topics the trace declares (through ``App.declare_repartition``, as a
running worker's agents do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams_app.app.background import Crontab
from streams_app.app.channel import Channel
from streams_app.app.joins import Join, JoinedStream, JoinedTable, JoinStore
from streams_app.app.set_table import SetTable
from streams_app.app.topic import Topic
from streams_app.app.windows import SessionWindows, SlidingWindows, TimeWindows, Windows
from streams_app.topology import names
from streams_app.topology.description import (
    AgentDecl,
    JoinDecl,
    SinkDecl,
    TableDecl,
    TaskDecl,
    TimerDecl,
    TopicDecl,
    TopologyDescription,
)

if TYPE_CHECKING:
    from streams_app.app.agent import Agent
    from streams_app.app.app import App
    from streams_app.app.table import Table


def describe(app: App, trace_notes: dict[str, str | None] | None = None) -> TopologyDescription:
    """The description of what ``app`` declares now (its repartition topics included once its
    agents have been traced, or run by a worker up to their first ``async for``)."""
    notes = trace_notes or {}
    repartitions = tuple(sorted(app.repartitions.values(), key=lambda r: (r.source, r.topic)))
    return TopologyDescription(
        app_id=app.conf.id,
        topics=tuple(_topic(t) for _, t in sorted(app.topics.items())),
        agents=tuple(
            sorted(
                (_agent(a, app, notes.get(a.name)) for a in app.agents),
                key=lambda a: a.name,
            )
        ),
        repartitions=repartitions,
        tables=tuple(
            sorted(
                [*(_table(t) for t in app.tables.values()), *map(_store, app.join_stores())],
                key=lambda t: t.name,
            )
        ),
        timers=tuple(sorted((_timer(t) for t in app.timers), key=lambda t: t.name)),
        tasks=tuple(
            sorted((TaskDecl(t.name, t.on_leader) for t in app.tasks), key=lambda t: t.name)
        ),
        channels=tuple(sorted(c.name for c in _channels(app))),
        sinks=tuple(SinkDecl(s.name, s.topic.name) for _, s in sorted(app.sinks.items())),
        pages=tuple(sorted(p.path for p in app.pages)),
        services=tuple(sorted(_service_name(s) for s in app.services)),
        joins=tuple(_join(j, app) for _, j in sorted(app.joins.items())),
    )


def _service_name(service: Any) -> str:
    """A service (a class or an instance) by its class's name."""
    cls = service if isinstance(service, type) else type(service)
    return f"{cls.__module__}.{cls.__qualname__}"


def codec_name(codec: Any) -> str:
    """``json``, ``raw:str``, ``record:Order``: the codec's name, without an untyped ``:None``
    or a repeated part (a typed JSON codec of ``int`` is ``json:int``)."""
    parts: list[str] = []
    for part in str(getattr(codec, "name", None) or type(codec).__name__).split(":"):
        if part != "None" and (not parts or parts[-1] != part):
            parts.append(part)
    return ":".join(parts)


def _topic(topic: Topic) -> TopicDecl:
    fun = topic.timestamp_fn
    return TopicDecl(
        name=topic.name,
        key_codec=codec_name(topic.key_codec),
        value_codec=codec_name(topic.value_codec),
        partitions=topic.partitions,
        replicas=topic.replicas,
        config=tuple(sorted(topic.config.items())),
        internal=topic.internal,
        timestamp_fn=None if fun is None else getattr(fun, "__name__", type(fun).__name__),
        follows=topic.follows,
    )


def _agent(agent: Agent, app: App, note: str | None) -> AgentDecl:
    source = agent.channel.name
    reads = source
    hops = {r.source: r.topic for r in app.repartitions.values() if r.agent == agent.name}
    seen = {reads}
    while reads in hops and hops[reads] not in seen:  # group_by after group_by
        reads = hops[reads]
        seen.add(reads)
    joined = app.agent_joins.get(agent.name)  # stream.join inside the agent
    if joined is not None:
        reads = joined
    on_join = joined is not None or isinstance(agent.channel, (JoinedStream, JoinedTable))
    return AgentDecl(
        name=agent.name,
        source=source,
        on_channel=isinstance(agent.channel, Channel),
        on_join=on_join,
        reads=reads,
        concurrency=agent.concurrency,
        isolated_partitions=agent.isolated_partitions,
        sinks=tuple(_sink(s) for s in agent.sinks),
        trace_note=note,
    )


def _sink(sink: Any) -> str:
    from streams_app.app.agent import Agent

    if isinstance(sink, Topic):
        return f"topic {sink.name}"
    if isinstance(sink, Agent):
        return f"agent {sink.name}"
    if isinstance(sink, Channel):
        return f"channel {sink.name}"
    return f"callable {names.canonical_name(sink)}"


def _table(table: Table) -> TableDecl:
    kind = "global" if table.is_global else "set" if isinstance(table, SetTable) else "table"
    return TableDecl(
        name=table.name,
        kind=kind,
        changelog=table.changelog_topic_name,
        key_codec=codec_name(table.key_codec),
        value_codec=codec_name(table.value_codec),
        partitions=table.partitions,
        window=None if table.window is None else window_text(table.window),
        emit_final=None if table.emit_final_topic is None else table.emit_final_topic.name,
        source=None if table.source is None else table.source.name,
        changelog_is_source=table.changelog_is_source,
        versioned_ms=table.versioned_ms,
        follows=None if table.source is None else table.source.name,
    )


def _store(store: JoinStore) -> TableDecl:
    return TableDecl(
        name=store.name,
        kind=store.kind,
        changelog=store.changelog_topic_name,
        key_codec=codec_name(store.key_codec),
        value_codec=codec_name(store.value_codec),
        follows=store.follows,
        owner=store.owner,
        changelog_is_source=store.changelog_is_source,
    )


def _join(join: Join, app: App) -> JoinDecl:
    outputs = [f"topic {t.name}" for t in join.sinks]
    for agent in app.agents:
        reads = app.agent_joins.get(agent.name)
        if reads == join.name or getattr(agent.channel, "name", None) == join.name:
            outputs.append(f"agent {agent.name}")
    return JoinDecl(
        name=join.name,
        kind=join.kind,
        how=join.how,
        left=join.left.name,
        right=join.right.name,
        left_topic=join.left_topic.name,
        right_topic=None if getattr(join.right, "is_global", False) else join.right_topic.name,
        reads=join.reads,
        key=join.key_name,
        before_ms=join.before_ms,
        after_ms=join.after_ms,
        grace_ms=join.grace_ms,
        idle_close_ms=join.idle_close_ms,
        joiner=None if join.joiner is None else names.canonical_name(join.joiner),
        stores=tuple(sorted(s.name for s in join.stores.values())),
        internal_topics=tuple(sorted(t.name for t in join.topics.values())),
        outputs=tuple(sorted(outputs)),
    )


def window_text(window: Windows) -> str:
    """``tumbling 1m grace 10s``, ``hopping 5m every 1m``, ``sliding 10s``, ``session gap 30m``."""
    if isinstance(window, TimeWindows):
        if window.tumbling:
            text = f"tumbling {_span(window.size_ms)}"
        else:
            text = f"hopping {_span(window.size_ms)} every {_span(window.step_ms)}"
    elif isinstance(window, SlidingWindows):
        text = f"sliding {_span(window.size_ms)}"
    elif isinstance(window, SessionWindows):
        text = f"session gap {_span(window.gap_ms)}"
    else:
        text = window.kind
    return f"{text} grace {_span(window.grace_ms)} retention {_span(window.retention_ms)}"


def _span(ms: int) -> str:
    """``1m``, ``5m30s``, ``250ms``."""
    if ms == 0:
        return "0s"
    text = ""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            text += f"{ms // size}{unit}"
            ms %= size
    return text + (f"{ms}ms" if ms else "")


def _timer(timer: Any) -> TimerDecl:
    if isinstance(timer, Crontab):
        return TimerDecl(timer.name, f"cron {timer.cron_format}", timer.on, timer.on_leader)
    return TimerDecl(timer.name, f"every {timer.interval:g}s", timer.on, timer.on_leader)


def _channels(app: App) -> list[Channel]:
    found = {c.name: c for c in app.channels}
    for agent in app.agents:
        if isinstance(agent.channel, Channel):
            found.setdefault(agent.channel.name, agent.channel)
    return list(found.values())
