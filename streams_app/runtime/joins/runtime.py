"""The joins of a worker: tables built from topics and join processors, wired to the runtime.

Built once per worker at start, after the agents' traces declared their joins
(:meth:`JoinRuntime.build`). It registers, per topic, the feeders the dispatcher hands each
record to after the agents (:attr:`~streams_app.runtime.actor.AgentRunner.forwarders`):
first the tables built from the topic (so a join reading the same record sees the table after
it), then the join processors reading it. It connects the processors that follow a table's
changes to the table's feeder, gives the task manager the restore filter of each table whose
changelog is its source topic, and runs the end-of-batch door of every table and processor
that has one (:meth:`after_batch`), in each running task's transaction.

Processors register by kind in :data:`PROCESSORS` (``register``); a join whose kind has no
processor stops the worker at start, naming it, rather than reading its inputs and emitting
nothing. Idle close (``idle_close=``) is driven by ``runtime/idle_close.py`` through each
processor's :meth:`~streams_app.runtime.joins.base.JoinProcessor.on_idle`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from streams_app.errors import TopologyError
from streams_app.runtime.joins.base import JoinProcessor, TaskContext
from streams_app.runtime.joins.sources import TableSource, restore_filter
from streams_app.runtime.punctuator import CallbackFailed

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.runtime.actor import AgentRunner
    from streams_app.runtime.task import Task
    from streams_app.state.restore import Accept

log = logging.getLogger(__name__)

#: JoinDecl kind -> the processor class that runs it.
PROCESSORS: dict[str, type[JoinProcessor]] = {}


def register(processor: type[JoinProcessor]) -> type[JoinProcessor]:
    """Class decorator: ``processor`` runs joins of its ``kind``."""
    PROCESSORS[processor.kind] = processor
    return processor


def _load_processors() -> None:
    # Importing a processor module registers it; here, so that the registry is complete
    # whichever module imported this one first.
    from streams_app.runtime.joins import (  # noqa: F401
        foreign_key,
        stream_stream,
        stream_table,
        table_table,
    )


class JoinRuntime:
    """The tables built from topics and the join processors of one worker (module doc)."""

    def __init__(self, app: App, runner: AgentRunner) -> None:
        self.app = app
        self.runner = runner
        #: Table name -> its feeder (tables built from topics, not GlobalTables).
        self.sources: dict[str, TableSource] = {}
        #: Join name -> its processor.
        self.processors: dict[str, JoinProcessor] = {}
        self._after_batch: list[TableSource | JoinProcessor] = []

    def build(self) -> None:
        """Make the feeders and processors, and register them with the agent runner. Called
        once, after the agents reached their first ``async for``."""
        _load_processors()
        app, runner = self.app, self.runner
        for table in app.tables.values():
            if table.source is None or table.is_global:
                continue
            source = self.sources[table.name] = TableSource(table)
            runner.forwarders.setdefault(table.source.name, []).insert(0, source)
            log.info(
                "table %s is built from topic %s; its changelog is %s",
                table.name,
                table.source.name,
                "that topic (declared compacted)"
                if table.changelog_is_source
                else f"{table.changelog_topic_name} (the source is not declared compacted, or the "
                "table is versioned)",
            )
        for name, join in sorted(app.joins.items()):
            kind = PROCESSORS.get(join.kind)
            if kind is None:
                raise TopologyError(
                    f"join {name!r}: {join.kind} joins are not available in this version "
                    f"(available: {', '.join(sorted(PROCESSORS)) or 'none'}); see docs/joins.md"
                )
            processor = self.processors[name] = kind(join, runner.actor_lists)
            for topic, feeder in processor.feeders():
                runner.forwarders.setdefault(topic, []).append(feeder)
            for table_name, listener in processor.table_listeners():
                self.sources[table_name].listeners.append(listener)
        self._after_batch = [
            *(s for s in self.sources.values() if s.has_after_batch),
            *(p for p in self.processors.values() if p.has_after_batch),
        ]

    def restore_filters(self) -> dict[str, Accept]:
        """Source topic -> what restore applies of its records, for the tables whose changelog
        is their source topic (``TaskManager.source_filters``)."""
        out = {
            table.source.name: restore_filter(table)
            for table in (s.table for s in self.sources.values())
            if table.source is not None and table.changelog_is_source
        }
        for processor in self.processors.values():
            out.update(processor.restore_filters())  # the plan lets one store have a topic
        return out

    @property
    def has_after_batch(self) -> bool:
        return bool(self._after_batch)

    async def after_batch(self, tasks: Iterable[Task]) -> None:
        """Each table's and processor's end-of-batch door, in each task's transaction."""
        doors = self._after_batch
        for task in tasks:
            with TaskContext(task):
                for door in doors:
                    try:
                        await door.after_batch(task)
                    except Exception as exc:
                        raise CallbackFailed(door.label, exc) from exc

    def idle_targets(self) -> list[JoinProcessor]:
        """The processors of joins declared with ``idle_close=``."""
        return [p for p in self.processors.values() if p.join.idle_close_ms is not None]
