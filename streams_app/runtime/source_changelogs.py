"""Input topics that restore a store, checked as the broker has them when the worker starts.

A table built from a topic declared compacted, and a stream-stream join's buffer declared with
``changelog="input"``, restore from their input topic instead of a changelog of their own
(docs/joins.md). The declaration is checked against what the app *declares* of the topic; a
topic that exists already keeps the settings it was made with. If those differ, a restore
silently brings back less than was there:

- a table's source that is not compacted loses, at its retention, keys the table holds;
- a buffer's input that is compacted, or keeps records less long than the buffer does, loses
  records a later partner would have met.

Kafka Streams' source-topic optimisation leaves this to the operator and restores what is left.
Here the worker stops before anything is consumed, naming the topic, its setting and the fix.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from streams_app.app.joins import why_not_input
from streams_app.errors import ConfigError
from streams_app.topology.description import STREAM_STREAM

if TYPE_CHECKING:
    from streams_app.app.app import App

#: The topic settings the check reads.
RESTORE_KEYS = ("cleanup.policy", "retention.ms", "retention.bytes")


def restoring_topics(app: App) -> set[str]:
    """The input topics some store restores from."""
    topics = {source for _, source in _compacted_sources(app)}
    for join in app.joins.values():
        if join.kind == STREAM_STREAM:
            topics.update(s.source.name for s in join.stores.values() if s.source is not None)
    return topics


def check_source_changelogs(app: App, configs: Mapping[str, Mapping[str, str]]) -> None:
    """Raise :class:`ConfigError` for the first store whose input topic, as ``configs`` (the
    broker's settings of each topic, by name) has it, cannot restore it. A topic missing from
    ``configs`` (not described: no right to, or the model) is not checked."""
    for name, source in sorted(_compacted_sources(app)):
        policy = configs.get(source, {}).get("cleanup.policy")
        if policy is not None and "compact" not in policy:
            raise ConfigError(
                f"cleanup.policy of topic {source!r}",
                f"the topic is {policy!r} on the broker, but table {name!r} restores from it as "
                "its changelog (the app declares it compacted): a restore would lose every key "
                "older than the topic's retention",
                f"make the topic compacted (kafka-configs.sh --alter --entity-type topics "
                f"--entity-name {source} --add-config cleanup.policy=compact), or drop "
                "cleanup.policy from its declaration so the table keeps a changelog of its own",
            )
    for name, join in sorted(app.joins.items()):
        if join.kind != STREAM_STREAM:
            continue
        assert join.before_ms is not None and join.after_ms is not None
        retention = join.before_ms + join.after_ms + (join.grace_ms or 0)
        for role, other in (("left", join.right_topic), ("right", join.left_topic)):
            store = join.stores.get(role)
            if store is None or store.source is None or store.source.name not in configs:
                continue
            reason = why_not_input(
                join.how, role, store.source, other, retention, configs[store.source.name]
            )
            if reason is not None:
                raise ConfigError(
                    f"changelog='input' of join {name!r}",
                    f"its {role} buffer restores from its input, and on the broker {reason}",
                    "change the topic's settings (kafka-configs.sh --alter --entity-type topics "
                    f"--entity-name {store.source.name}), or drop changelog='input' so the "
                    "buffer keeps a changelog of its own",
                )


def _compacted_sources(app: App) -> Iterator[tuple[str, str]]:
    """(table, source topic) of each table restored from a source declared compacted. A
    GlobalTable restores from its source whatever the app declares of it (every worker reads
    it whole): only a table that restores from it *because* it is declared compacted is
    checked."""
    for name, table in app.tables.items():
        source = table.source
        if (
            source is not None
            and table.changelog_is_source
            and "compact" in str(source.config.get("cleanup.policy", ""))
        ):
            yield name, source.name
