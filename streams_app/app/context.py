"""What topology code sees while it runs, and the protocols the runtime implements for it.

The app layer *declares* a topology; the runtime *executes* it. Code inside an agent or a timer
still needs the running worker (``topic.send`` joins its transaction, ``table[key]`` reads the
partition of the task that owns the record being processed). It reaches it through two context
variables, never by importing the runtime:

- :data:`current_runtime` holds the running worker as a :class:`Runtime` (set for the worker's
  whole run, so timers and agents see it);
- :data:`current_event` holds the record being processed, whose :attr:`Event.task` is a
  :class:`TaskScope` (the task that owns it, and its pending table writes);
- :data:`current_task` holds the task a stream-time timer or a window-close callback runs for,
  when there is no record (so tables and sends still reach that task's transaction).

Agents run as asyncio tasks, so a ``ContextVar`` set by the stream when it hands out a record is
visible to everything the agent awaits while processing it, and to nothing else.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from streams_app.transport.base import RecordMetadataLike

if TYPE_CHECKING:
    from streams_app.app.table import Table
    from streams_app.app.topic import Topic
    from streams_app.app.windowed import WindowedTableState
    from streams_app.state.base import PartitionTransaction


class SendFuture(Protocol):
    """What a send returns: awaitable, and inspectable like an ``asyncio.Future``.

    It resolves to where the record landed once it is acknowledged (under exactly-once: when
    the transaction commits).
    """

    def done(self) -> bool: ...

    def cancelled(self) -> bool: ...

    def result(self) -> RecordMetadataLike: ...

    def exception(self) -> BaseException | None: ...

    def __await__(self) -> Generator[Any, None, RecordMetadataLike]: ...


class TaskScope(Protocol):
    """The task a record belongs to, as tables see it: its open transaction per table."""

    tables: dict[str, PartitionTransaction]

    def open_table(self, table: Table) -> PartitionTransaction: ...

    @property
    def partition(self) -> int:
        """The partition number of the task (of its input topics and of its tables)."""
        ...

    @property
    def stream_time(self) -> int:
        """The largest record timestamp the task has processed, in ms (-1: none yet)."""
        ...

    def windowed(self, table: Table) -> WindowedTableState:
        """The task's windows of a windowed ``table`` (opened on first use)."""
        ...

    def record_late(self, event: Event, table: Table) -> None:
        """``event`` was late for every window of ``table`` it belongs to: count it, and
        dead-letter it if the table says so (at the end of the batch, in the transaction)."""
        ...


class Runtime(Protocol):
    """The running worker, as topology code sees it."""

    async def send(
        self,
        topic: Topic,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> SendFuture:
        """Send inside the worker's transaction (with lineage headers while processing)."""

    def table_items(self, table: Table) -> Iterator[tuple[Any, Any]]:
        """Committed items of every partition of ``table`` this worker holds."""

    def wall_time(self) -> float:
        """Wall-clock seconds since the epoch, from the worker's clock (tests move it)."""


class Event:
    """A consumed record, decoded, with where it came from.

    ``timestamp`` is the record's time in ms: the Kafka timestamp, or what the topic's
    ``timestamp_fn`` took from the value.
    """

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
        task: TaskScope,
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
current_task: ContextVar[TaskScope | None] = ContextVar("streams_app_current_task", default=None)
current_runtime: ContextVar[Runtime | None] = ContextVar("streams_app_runtime", default=None)
