"""The record being processed, as seen from inside an agent.

Tables and ``topic.send`` need to know which task the current record belongs to: a table write
goes to the task's partition of the table, and a send joins the worker's transaction with
lineage headers pointing at the record. Agents run as asyncio tasks, so a ``ContextVar`` set by
the stream when it hands out a record is visible to everything the agent awaits while
processing it, and to nothing else.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams_app.runtime.task import Task


class Event:
    """A consumed record, decoded, with where it came from."""

    __slots__ = (
        "headers",
        "key",
        "offset",
        "partition",
        "raw_key",
        "raw_value",
        "task",
        "timestamp",
        "topic",
        "value",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        key: Any,
        value: Any,
        headers: tuple[tuple[str, bytes], ...],
        raw_key: bytes | None,
        raw_value: bytes | None,
        task: Task,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers
        self.raw_key = raw_key
        self.raw_value = raw_value
        self.task = task

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def __repr__(self) -> str:  # no key or value: they may be personal data
        return f"<Event {self.topic}[{self.partition}]@{self.offset}>"


current_event: ContextVar[Event | None] = ContextVar("streams_app_current_event", default=None)
