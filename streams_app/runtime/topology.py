"""TopologyPlan: the topics a worker needs, created and checked before anything is consumed.

At start the worker resolves every topic's partition count (creating missing topics with the
declared or default count), derives the internal topics (table changelogs, compacted; group_by
repartition topics; dead-letter topics; Faust's leader topic when ``on_leader`` timers or tasks
exist), groups input topics by partition count into co-partitioned task groups, and checks that
every table matches a group. Any mismatch stops the worker here, with the topic and the fix in
the message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streams_app.app import names
from streams_app.errors import TopologyError
from streams_app.runtime.stream_time import topic_stages
from streams_app.settings import Settings
from streams_app.transport.base import AdminClient, TopicSpec

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.runtime.actor import AgentRunner


@dataclass
class TopologyPlan:
    #: Topics the worker's consumer subscribes to (agent inputs and repartition topics).
    input_topics: list[str]
    #: Partition count of every topic the worker uses.
    partition_counts: dict[str, int]
    #: Partition count -> task group index (input topics only).
    groups: dict[int, int]
    #: Table name -> changelog topic.
    changelog_topics: dict[str, str]
    #: Task group -> tables whose partitions live in that group's tasks.
    tables_by_group: dict[int, list[str]] = field(default_factory=dict)
    #: Source topic -> dead-letter topic.
    dead_letter_topics: dict[str, str] = field(default_factory=dict)
    #: Table name -> its partition count.
    table_partitions: dict[str, int] = field(default_factory=dict)
    #: Faust's leader topic (one partition; its owner runs ``on_leader`` timers), if used.
    leader_topic: str | None = None
    #: Input topic -> its stage: 0 read from outside, +1 per group_by hop (runtime.stream_time).
    stages: dict[str, int] = field(default_factory=dict)


def dead_letter_topic(settings: Settings, topic: str) -> str:
    return settings.dead_letter_topic.replace("{topic}", topic)


def _runs_anything(app: App) -> bool:
    return bool(app.agents or app.timers or app.tasks or app.services or app.pages)


def _wants_leader(app: App) -> bool:
    if getattr(app.conf, "topic_disable_leader", False):
        return False
    return any(t.on_leader for t in app.timers) or any(t.on_leader for t in app.tasks)


async def plan_topology(
    app: App, runner: AgentRunner, admin: AdminClient, conf: Settings | None = None
) -> TopologyPlan:
    """``conf``: the worker's settings (the app's, with the worker's overrides applied)."""
    conf = conf or app.conf
    inputs = sorted(runner.source_topics())
    leader = names.leader_topic(conf.id) if _wants_leader(app) else None
    if not inputs and leader is None and not _runs_anything(app):
        raise TopologyError(
            f"app {app.id!r} has nothing to run: no agent, timer, task, service or page"
        )
    if leader is not None:
        inputs.append(leader)
    # No inputs (timers, tasks, services and channels only): a worker that joins no consumer
    # group (runtime/no_inputs.py).

    declared = dict(app.topics)
    names_needed = set(declared) | {t.changelog_topic_name for t in app.tables.values()}
    names_needed |= {dead_letter_topic(conf, name) for name in inputs if name != leader}
    if leader is not None:
        names_needed.add(leader)
    existing = await admin.partition_counts(sorted(names_needed))
    counts: dict[str, int] = {}
    to_create: list[TopicSpec] = []

    def want(
        name: str,
        partitions: int,
        configs: dict[str, str] | None = None,
        replicas: int | None = None,
    ) -> None:
        if name in existing:
            counts[name] = existing[name]
            return
        counts[name] = partitions
        to_create.append(
            TopicSpec(name, partitions, replicas or conf.topic_replication_factor, configs or {})
        )

    # 1. Declared, non-internal topics: declared count, else the default.
    for name, topic in declared.items():
        if topic.internal:
            continue
        want(name, topic.partitions or conf.topic_partitions, topic.config, topic.replicas)
        if topic.partitions and name in existing and existing[name] != topic.partitions:
            raise TopologyError(
                f"topic {name!r} exists with {existing[name]} partitions but the topology "
                f"declares {topic.partitions}: change partitions= to {existing[name]} or "
                "recreate the topic"
            )
    # 2. Repartition topics: as many partitions as declared, else the worker's
    # topic_partitions (as Faust); an existing one keeps its count.
    for name in runner.repartition_sources:
        topic = declared[name]
        want(name, topic.partitions or conf.topic_partitions, topic.config, topic.replicas)
    if leader is not None:
        want(leader, 1)

    groups = {count: index for index, count in enumerate(sorted({counts[t] for t in inputs}))}
    data_counts = sorted({counts[t] for t in inputs if t != leader})

    # 3. Tables: co-partitioned with a task group; changelogs compacted, one partition each.
    changelogs: dict[str, str] = {}
    tables_by_group: dict[int, list[str]] = {}
    table_partitions: dict[str, int] = {}
    for table in app.tables.values():
        partitions = table.partitions
        if partitions is None:
            if len(data_counts) == 1:
                partitions = data_counts[0]
            elif conf.topic_partitions in data_counts or table.is_global:
                partitions = conf.topic_partitions  # Faust's default for a table
            elif not data_counts:
                raise TopologyError(
                    f"table {table.name!r} is updated by no agent: the app reads no topic, and "
                    "a table is written while processing the records of a topic (its "
                    "partitions are that topic's). Add the agent that updates it"
                )
            else:
                raise TopologyError(
                    f"table {table.name!r} does not say its partition count and the input "
                    f"topics have several ({data_counts}): pass partitions= to app.Table "
                    "(equal to the partition count of the topic that updates it)"
                )
            table.partitions = partitions
        if partitions not in groups and not table.is_global:
            raise TopologyError(
                f"table {table.name!r} has {partitions} partitions but no input topic does "
                f"(input topics have {sorted(groups)}): tables are co-partitioned with the "
                "topics that update them"
            )
        changelog = table.changelog_topic_name
        if changelog in existing and existing[changelog] != partitions:
            raise TopologyError(
                f"changelog topic {changelog!r} has {existing[changelog]} partitions, table "
                f"{table.name!r} has {partitions}: they must match"
            )
        want(changelog, partitions, {"cleanup.policy": "compact"})
        changelogs[table.name] = changelog
        table_partitions[table.name] = partitions
        if partitions in groups:
            tables_by_group.setdefault(groups[partitions], []).append(table.name)

    # 4. Dead-letter topics, one per input topic, same partitioning (keeps source order).
    dead_letters: dict[str, str] = {}
    for name in inputs:
        if name == leader:
            continue
        dlq = dead_letter_topic(conf, name)
        dead_letters[name] = dlq
        if dlq not in counts:
            want(dlq, counts[name])

    missing = [spec for spec in to_create if spec.name not in existing]
    if missing:
        if not getattr(conf, "topic_allow_declare", True):
            raise TopologyError(
                f"topics {sorted(s.name for s in missing)} do not exist and topic_allow_declare "
                "is off: create them, or turn topic_allow_declare on"
            )
        await admin.create_topics(_unique(missing))
    return TopologyPlan(
        input_topics=inputs,
        partition_counts=counts,
        groups=groups,
        changelog_topics=changelogs,
        tables_by_group=tables_by_group,
        dead_letter_topics=dead_letters,
        table_partitions=table_partitions,
        leader_topic=leader,
        stages=_stages(inputs, runner.repartition_sources, leader),
    )


def _stages(
    inputs: list[str], repartition_sources: Mapping[str, str], leader: str | None
) -> dict[str, int]:
    """The leader topic is a stage of its own: it carries no records to order with the data."""
    stages = topic_stages(inputs, repartition_sources)
    if leader is not None:
        stages[leader] = -1
    return stages


def _unique(specs: Iterable[TopicSpec]) -> list[TopicSpec]:
    seen: dict[str, TopicSpec] = {}
    for spec in specs:
        seen.setdefault(spec.name, spec)
    return list(seen.values())
