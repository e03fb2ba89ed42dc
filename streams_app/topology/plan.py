"""The planner: a topology description plus broker metadata -> the plan a worker runs. Pure.

:func:`plan_topology` does no I/O: it takes the partition counts of the topics that exist
(:func:`topics_to_look_up` says which to ask for) and returns the :class:`TopologyPlan`: every
topic's partition count, the topics to create, the input topics grouped into co-partitioned task
groups, each table's partition count and group, the dead-letter and leader topics. Whatever does
not fit (a table whose partition count no input topic has, a changelog or a topic whose existing
count differs from the declared one) is refused here, with the topic and the fix in the message.
The admin calls before and after it are ``streams_app.runtime.provision``'s.

The rules, as Faust and Kafka Streams have them:

- a declared topic gets its declared partition count, else the worker's ``topic_partitions``;
  an existing one keeps its count (a declared count that differs is an error);
- a repartition topic (``group_by``) likewise, and it is an input of its own;
- input topics with the same partition count form one task group: task ``(group, p)`` owns
  partition ``p`` of each (groups are numbered in partition-count order);
- a table has its declared partition count, else the one count its input topics share (else the
  worker's ``topic_partitions``, else an error); a non-global table must share a group's count
  (its partitions live in that group's tasks); its changelog is compacted, with as many
  partitions;
- a table built from a topic has its source's partition count, and the source is an input of
  that group (a GlobalTable's source is read by every worker, outside the group); when its
  changelog is its source topic, no changelog is created;
- a join's inputs must be co-partitioned (same partition count), except a GlobalTable's and a
  foreign-key join's; the stores a join keeps have its left input's count (they live in its
  tasks); a foreign-key join's subscription topic has the right table's count, its response
  topic the left's;
- each input topic has a dead-letter topic with as many partitions (source order is kept);
- the leader topic (one partition) exists when something runs on the leader only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams_app.errors import TopologyError
from streams_app.settings import Settings
from streams_app.topology import names
from streams_app.topology.description import TopologyDescription
from streams_app.transport.base import TopicSpec


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
    #: Topics that do not exist yet, to create before anything is consumed.
    to_create: list[TopicSpec] = field(default_factory=list)

    def group_topics(self, group: int) -> list[str]:
        """The input topics of task group ``group``, in stage order."""
        count = next(c for c, g in self.groups.items() if g == group)
        members = [t for t in self.input_topics if self.partition_counts[t] == count]
        return sorted(members, key=lambda t: (self.stages.get(t, 0), t))

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (the description's companion in ``topology --json``)."""
        return {
            "input_topics": list(self.input_topics),
            "partition_counts": dict(sorted(self.partition_counts.items())),
            "task_groups": [
                {
                    "group": group,
                    "partitions": count,
                    "topics": self.group_topics(group),
                    "tables": sorted(self.tables_by_group.get(group, ())),
                }
                for count, group in sorted(self.groups.items(), key=lambda item: item[1])
            ],
            "changelog_topics": dict(sorted(self.changelog_topics.items())),
            "table_partitions": dict(sorted(self.table_partitions.items())),
            "dead_letter_topics": dict(sorted(self.dead_letter_topics.items())),
            "leader_topic": self.leader_topic,
            "stages": dict(sorted(self.stages.items())),
            "to_create": [
                {
                    "name": s.name,
                    "partitions": s.partitions,
                    "replication_factor": s.replication_factor,
                    "config": dict(sorted(s.configs.items())),
                }
                for s in self.to_create
            ],
        }


def dead_letter_topic(settings: Settings, topic: str) -> str:
    return settings.dead_letter_topic.replace("{topic}", topic)


def leader_topic(description: TopologyDescription, conf: Settings) -> str | None:
    """Faust's leader topic, when something runs on the leader only (and it is not disabled)."""
    if getattr(conf, "topic_disable_leader", False) or not description.wants_leader:
        return None
    return names.leader_topic(conf.id)


def input_topics(description: TopologyDescription, conf: Settings) -> list[str]:
    """What the worker subscribes to: the description's sources, then the leader topic."""
    inputs = description.source_topics
    leader = leader_topic(description, conf)
    if not inputs and leader is None and not description.runs_anything:
        raise TopologyError(
            f"app {description.app_id!r} has nothing to run: no agent, timer, task, service or page"
        )
    if leader is not None:
        inputs.append(leader)
    # No inputs (timers, tasks, services and channels only): a worker that joins no consumer
    # group (runtime/no_inputs.py).
    return inputs


def topics_to_look_up(description: TopologyDescription, conf: Settings) -> list[str]:
    """The topics whose partition counts :func:`plan_topology` needs from the broker."""
    inputs = input_topics(description, conf)
    leader = leader_topic(description, conf)
    wanted = {t.name for t in description.topics} | {t.changelog for t in description.tables}
    wanted |= {dead_letter_topic(conf, name) for name in inputs if name != leader}
    if leader is not None:
        wanted.add(leader)
    return sorted(wanted)


def plan_topology(
    description: TopologyDescription, existing: Mapping[str, int], conf: Settings
) -> TopologyPlan:
    """The plan for ``description`` on a cluster where the topics in ``existing`` exist with
    those partition counts. ``conf``: the worker's settings (the app's, with the worker's
    overrides applied). Raises :class:`TopologyError` for what cannot work."""
    inputs = input_topics(description, conf)
    leader = leader_topic(description, conf)
    counts: dict[str, int] = {}
    to_create: list[TopicSpec] = []

    def want(
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        replicas: int | None = None,
    ) -> None:
        if name in existing:
            counts[name] = existing[name]
            return
        counts[name] = partitions
        to_create.append(
            TopicSpec(
                name, partitions, replicas or conf.topic_replication_factor, dict(configs or {})
            )
        )

    # 1. Declared, non-internal topics: declared count, else the default.
    for topic in description.topics:
        if topic.internal:
            continue
        name = topic.name
        want(name, topic.partitions or conf.topic_partitions, dict(topic.config), topic.replicas)
        if topic.partitions and name in existing and existing[name] != topic.partitions:
            raise TopologyError(
                f"topic {name!r} exists with {existing[name]} partitions but the topology "
                f"declares {topic.partitions}: change partitions= to {existing[name]} or "
                "recreate the topic"
            )
    # 2. Repartition topics: as many partitions as declared, else the worker's
    # topic_partitions (as Faust); an existing one keeps its count.
    for name in description.repartition_sources:
        declared = description.topic(name)
        if declared is None:
            raise TopologyError(f"repartition topic {name!r} is not declared")  # a bug
        want(
            name,
            declared.partitions or conf.topic_partitions,
            dict(declared.config),
            declared.replicas,
        )
    # 2b. Internal topics partitioned like another topic (a foreign-key join's).
    for topic in description.topics:
        if topic.internal and topic.follows is not None:
            want(topic.name, _count(counts, topic.follows, f"topic {topic.name!r}"))
    if leader is not None:
        want(leader, 1)
    _check_copartitioned(description, counts)

    groups = {count: index for index, count in enumerate(sorted({counts[t] for t in inputs}))}
    data_counts = sorted({counts[t] for t in inputs if t != leader})

    # 3. Tables: co-partitioned with a task group; changelogs compacted, one partition each.
    changelogs: dict[str, str] = {}
    globals_: set[str] = set()
    tables_by_group: dict[int, list[str]] = {}
    table_partitions: dict[str, int] = {}
    for table in description.tables:
        partitions = table.partitions
        if table.follows is not None:
            follows = _count(counts, table.follows, f"table {table.name!r}")
            if partitions is not None and partitions != follows:
                raise TopologyError(
                    f"table {table.name!r} declares {partitions} partitions but is built from "
                    f"{table.follows!r}, which has {follows}: drop partitions= (a table built "
                    "from a topic has the topic's partitions)"
                )
            partitions = follows
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
        if partitions not in groups and not table.is_global:
            raise TopologyError(
                f"table {table.name!r} has {partitions} partitions but no input topic does "
                f"(input topics have {sorted(groups)}): tables are co-partitioned with the "
                "topics that update them"
            )
        changelog = table.changelog
        if changelog in existing and existing[changelog] != partitions:
            raise TopologyError(
                f"changelog topic {changelog!r} has {existing[changelog]} partitions, table "
                f"{table.name!r} has {partitions}: they must match"
            )
        if not table.changelog_is_source and not (table.is_global and table.source):
            want(changelog, partitions, {"cleanup.policy": "compact"})
        if not table.is_global:
            sharing = [t for t, c in changelogs.items() if c == changelog and t not in globals_]
            if sharing:
                raise TopologyError(
                    f"topic {changelog!r} would be the changelog of both {sharing[0]!r} and "
                    f"{table.name!r}: a changelog restores one store (a join declared with "
                    "changelog='input' needs an input no table is built from and no other such "
                    "join reads)"
                )
        else:
            globals_.add(table.name)
        changelogs[table.name] = changelog
        table_partitions[table.name] = partitions
        if table.is_global and table.source is not None:
            continue  # every worker reads its source outside the group (runtime/global_tables)
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

    missing = _unique(spec for spec in to_create if spec.name not in existing)
    if missing and not getattr(conf, "topic_allow_declare", True):
        raise TopologyError(
            f"topics {sorted(s.name for s in missing)} do not exist and topic_allow_declare "
            "is off: create them, or turn topic_allow_declare on"
        )
    return TopologyPlan(
        input_topics=inputs,
        partition_counts=counts,
        groups=groups,
        changelog_topics=changelogs,
        tables_by_group=tables_by_group,
        dead_letter_topics=dead_letters,
        table_partitions=table_partitions,
        leader_topic=leader,
        stages=_stages(inputs, description.repartition_sources, leader),
        to_create=missing,
    )


def _count(counts: Mapping[str, int], topic: str, what: str) -> int:
    if topic not in counts:
        raise TopologyError(f"{what} follows topic {topic!r}, which the app does not declare")
    return counts[topic]


def _check_copartitioned(description: TopologyDescription, counts: Mapping[str, int]) -> None:
    """The two inputs of a stream-table, stream-stream or table-table join meet in one task: the
    same partition count (and the same keys in the same partitions, which only the producers
    can ensure)."""
    for join in description.joins:
        if not join.copartitioned or join.right_topic is None:
            continue
        left = counts.get(join.left_topic)
        right = counts.get(join.right_topic)
        if left is None or right is None or left == right:
            continue
        raise TopologyError(
            f"join {join.name!r} ({join.kind}) reads {join.left_topic!r} with {left} partitions "
            f"and {join.right_topic!r} with {right}: the two inputs of a {join.kind} join must be "
            "co-partitioned (same partition count, each key in the same partition). Re-key the "
            f"stream side with group_by(..., partitions={right}) and join the regrouped stream, "
            "or recreate one topic with the other's count"
        )


def topic_stages(inputs: list[str], repartition_sources: Mapping[str, str]) -> dict[str, int]:
    """0 for the topics the app reads; a ``group_by`` topic is one more than its source."""
    stages: dict[str, int] = {}

    def stage(topic: str, seen: frozenset[str] = frozenset()) -> int:
        if topic in stages:
            return stages[topic]
        source = repartition_sources.get(topic)
        value = 0 if source is None or source in seen else stage(source, seen | {topic}) + 1
        stages[topic] = value
        return value

    for topic in inputs:
        stage(topic)
    return stages


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
