"""TopologyPlan: the topics a worker needs, created and checked before anything is consumed.

At start the worker resolves every topic's partition count (creating missing topics with the
declared or default count), derives the internal topics (table changelogs, compacted; group_by
repartition topics; dead-letter topics), groups input topics by partition count into
co-partitioned task groups, and checks that every table matches a group. Any mismatch stops the
worker here, with the topic and the fix in the message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
    #: Input topic -> its stage: 0 read from outside, +1 per group_by hop (runtime.stream_time).
    stages: dict[str, int] = field(default_factory=dict)


def dead_letter_topic(settings: Settings, topic: str) -> str:
    return settings.dead_letter_topic.replace("{topic}", topic)


async def plan_topology(
    app: App, runner: AgentRunner, admin: AdminClient, conf: Settings | None = None
) -> TopologyPlan:
    """``conf``: the worker's settings (the app's, with the worker's overrides applied)."""
    conf = conf or app.conf
    inputs = sorted(runner.source_topics())
    if not inputs:
        raise TopologyError(f"app {app.id!r} has no agents: nothing to consume")

    declared = dict(app.topics)
    names = set(declared) | {t.changelog_topic for t in app.tables.values()}
    names |= {dead_letter_topic(conf, name) for name in inputs}
    existing = await admin.partition_counts(sorted(names))
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
    # 2. Repartition topics: as many partitions as their source unless declared.
    for name, source in runner.repartition_sources.items():
        topic = declared[name]
        want(name, topic.partitions or counts[source], topic.config, topic.replicas)

    groups = {count: index for index, count in enumerate(sorted({counts[t] for t in inputs}))}

    # 3. Tables: co-partitioned with a task group; changelogs compacted, one partition each.
    changelogs: dict[str, str] = {}
    tables_by_group: dict[int, list[str]] = {}
    for table in app.tables.values():
        partitions = table.partitions
        if partitions is None:
            if len(groups) != 1:
                raise TopologyError(
                    f"table {table.name!r} does not say its partition count and the input "
                    f"topics have several ({sorted(groups)}): pass partitions= to app.Table "
                    "(equal to the partition count of the topic that updates it)"
                )
            partitions = next(iter(groups))
            table.partitions = partitions
        if partitions not in groups:
            raise TopologyError(
                f"table {table.name!r} has {partitions} partitions but no input topic does "
                f"(input topics have {sorted(groups)}): tables are co-partitioned with the "
                "topics that update them"
            )
        changelog = table.changelog_topic
        if changelog in existing and existing[changelog] != partitions:
            raise TopologyError(
                f"changelog topic {changelog!r} has {existing[changelog]} partitions, table "
                f"{table.name!r} has {partitions}: they must match"
            )
        want(changelog, partitions, {"cleanup.policy": "compact"})
        changelogs[table.name] = changelog
        tables_by_group.setdefault(groups[partitions], []).append(table.name)

    # 4. Dead-letter topics, one per input topic, same partitioning (keeps source order).
    dead_letters: dict[str, str] = {}
    for name in inputs:
        dlq = dead_letter_topic(conf, name)
        dead_letters[name] = dlq
        if dlq not in counts:
            want(dlq, counts[name])

    missing = [spec for spec in to_create if spec.name not in existing]
    if missing:
        await admin.create_topics(_unique(missing))
    return TopologyPlan(
        input_topics=inputs,
        partition_counts=counts,
        groups=groups,
        changelog_topics=changelogs,
        tables_by_group=tables_by_group,
        dead_letter_topics=dead_letters,
        stages=topic_stages(inputs, runner.repartition_sources),
    )


def _unique(specs: Iterable[TopicSpec]) -> list[TopicSpec]:
    seen: dict[str, TopicSpec] = {}
    for spec in specs:
        seen.setdefault(spec.name, spec)
    return list(seen.values())
