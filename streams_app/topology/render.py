"""The text of ``streams-app -A module topology``: a description and its plan, for people.

Shaped like Kafka Streams' ``Topology#describe()``: sub-topologies, each source topic with
``-->`` to what reads it (agents, ``group_by`` forwarders and the repartition topic they write),
the tables whose partitions live in the sub-topology's tasks, then the topics the app writes,
its internal topics, and the rest (timers, tasks, channels, pages, database sinks).

A sub-topology here is a *task group*: the input topics with one partition count. Task ``G_P``
owns partition ``P`` of each of them and of each table of the group (so a ``group_by`` topic
with as many partitions as its source is in the same sub-topology, one *stage* further), where
Kafka Streams would start a new sub-topology at every repartition topic.
"""

from __future__ import annotations

from streams_app.topology.description import AgentDecl, TopicDecl, TopologyDescription
from streams_app.topology.plan import TopologyPlan


def format_topology(
    description: TopologyDescription,
    plan: TopologyPlan | None,
    *,
    planned_on: str,
    refused: str | None = None,
) -> str:
    """``planned_on``: what broker metadata the plan saw (``a cluster without these topics``,
    ``127.0.0.1:9092``); ``refused``: the planner's error, when it refused the topology."""
    d = description
    lines = [f"Topology of app {d.app_id!r}"]
    if plan is not None:
        lines.append(f"  (planned on {planned_on})")
        lines.extend(_sub_topologies(d, plan))
    else:
        lines.append(f"  Plan refused (on {planned_on}): {refused}")
        lines.extend(_sources_unplanned(d))
    channel_agents = [a for a in d.agents if a.on_channel]
    if channel_agents:
        lines.append("Channels (in-process, no Kafka, outside the transaction):")
        for agent in channel_agents:
            lines.append(f"  Channel: {agent.source}")
            lines.append(f"    --> {_agent(agent)}")
    lines.extend(_tables(d, plan))
    lines.extend(_written(d, plan))
    lines.extend(_internal(d, plan))
    lines.extend(_others(d))
    notes = [a for a in d.agents if a.trace_note]
    if notes:
        lines.append("Not traced to their first `async for`:")
        lines.extend(f"  {a.name}: {a.trace_note}" for a in notes)
    return "\n".join(lines)


def _sub_topologies(d: TopologyDescription, plan: TopologyPlan) -> list[str]:
    lines: list[str] = []
    for count, group in sorted(plan.groups.items(), key=lambda item: item[1]):
        lines.append(
            f"  Sub-topology: {group} (tasks {group}_0..{group}_{count - 1}: input topics with "
            f"{count} partition{'s' if count != 1 else ''})"
        )
        for topic in plan.group_topics(group):
            lines.extend(_source(d, plan, topic))
        tables = plan.tables_by_group.get(group, [])
        if tables:
            lines.append(f"    Tables (a partition in each task): {', '.join(sorted(tables))}")
    return lines


def _sources_unplanned(d: TopologyDescription) -> list[str]:
    lines = ["  Sources:"]
    for topic in d.source_topics:
        lines.extend(_source(d, None, topic))
    return lines


def _source(d: TopologyDescription, plan: TopologyPlan | None, topic: str) -> list[str]:
    stage = f", stage {plan.stages.get(topic, 0)}" if plan is not None else ""
    if plan is not None and topic == plan.leader_topic:
        return [f"    Source: {topic} (leader election: its owner runs on_leader timers and tasks)"]
    declared = d.topic(topic)
    lines = [f"    Source: {topic} ({_codecs(declared)}{_time(declared)}{stage})"]
    for agent in d.readers(topic):
        lines.append(f"      --> {_agent(agent)}")
    for hop in d.forwarded_from(topic):
        via = f"group_by {hop.key}" if hop.kind == "group_by" else "through"
        lines.append(f"      --> {via} (agent {hop.agent}) --> repartition topic {hop.topic}")
    return lines


def _agent(agent: AgentDecl) -> str:
    if agent.isolated_partitions:
        runs = "one instance per partition"
    else:
        runs = f"{agent.concurrency} instance{'s' if agent.concurrency != 1 else ''}"
    sinks = f"; sinks: {', '.join(agent.sinks)}" if agent.sinks else ""
    return f"agent {agent.name} ({runs}{sinks})"


def _codecs(topic: TopicDecl | None) -> str:
    if topic is None:
        return "not declared"
    return f"key {topic.key_codec}, value {topic.value_codec}"


def _time(topic: TopicDecl | None) -> str:
    if topic is None or topic.timestamp_fn is None:
        return ""
    return f", time from {topic.timestamp_fn}"


def _partitions(plan: TopologyPlan | None, name: str, declared: int | None) -> str:
    if plan is not None and name in plan.partition_counts:
        count = plan.partition_counts[name]
    elif declared is not None:
        count = declared
    else:
        return "partitions: the worker's topic_partitions"
    return f"{count} partition{'s' if count != 1 else ''}"


def _tables(d: TopologyDescription, plan: TopologyPlan | None) -> list[str]:
    if not d.tables:
        return []
    lines = ["Tables:"]
    for table in d.tables:
        count = plan.table_partitions.get(table.name) if plan is not None else table.partitions
        parts = [
            table.kind if table.window is None else f"windowed {table.kind} ({table.window})",
            f"{count} partitions" if count is not None else "partitions from its input topics",
            f"key {table.key_codec}, value {table.value_codec}",
            f"changelog {table.changelog}",
        ]
        if table.partitions is None and count is not None:
            parts[1] += " (derived)"
        if table.is_global:
            parts.append("every worker holds every partition")
        if table.emit_final:
            parts.append(f"final values of closed windows to {table.emit_final}")
        lines.append(f"  {table.name}: {'; '.join(parts)}")
    return lines


def _written(d: TopologyDescription, plan: TopologyPlan | None) -> list[str]:
    """Declared topics no agent reads: what the app writes (send, echo, sinks, emit_final)."""
    read = set(d.source_topics)
    written = [t for t in d.topics if t.name not in read and not t.internal]
    if not written:
        return []
    lines = ["Topics written (declared, read by no agent of this app):"]
    for topic in written:
        partitions = _partitions(plan, topic.name, topic.partitions)
        lines.append(f"  {topic.name} ({_codecs(topic)}; {partitions})")
    return lines


def _internal(d: TopologyDescription, plan: TopologyPlan | None) -> list[str]:
    rows: list[tuple[str, str]] = []
    for hop in d.repartitions:
        rows.append((hop.topic, f"repartition of {hop.source} ({hop.kind}, agent {hop.agent})"))
    for table in d.tables:
        rows.append((table.changelog, f"changelog of table {table.name}, compacted"))
    if plan is not None:
        for source, dlq in sorted(plan.dead_letter_topics.items()):
            rows.append((dlq, f"dead letters of {source}"))
        if plan.leader_topic is not None:
            rows.append((plan.leader_topic, "leader election"))
    if not rows:
        return []
    lines = ["Internal topics:"]
    for name, what in rows:
        declared = d.topic(name)
        partitions = _partitions(plan, name, declared.partitions if declared else None)
        lines.append(f"  {name}: {what}; {partitions}")
    if plan is not None:
        created = sorted(s.name for s in plan.to_create)
        if created:
            lines.append(f"Topics to create ({len(created)}): {', '.join(created)}")
        else:
            lines.append("Topics to create: none (all exist)")
    return lines


def _others(d: TopologyDescription) -> list[str]:
    lines: list[str] = []
    if d.timers:
        lines.append("Timers:")
        for timer in d.timers:
            leader = ", on the leader" if timer.on_leader else ""
            lines.append(f"  {timer.name}: {timer.schedule} ({timer.on}{leader})")
    if d.tasks:
        lines.append("Tasks (outside processing):")
        for task in d.tasks:
            lines.append(f"  {task.name}{' (on the leader)' if task.on_leader else ''}")
    if d.sinks:
        lines.append("Database sinks (`streams-app sink NAME`):")
        lines.extend(f"  {sink.name}: {sink.topic} -> PostgreSQL" for sink in d.sinks)
    if d.pages:
        lines.append(f"Web pages: {', '.join(d.pages)}")
    if d.services:
        lines.append(f"Services: {', '.join(d.services)}")
    return lines
