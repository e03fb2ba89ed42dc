"""The contract between the app layer and the runtime: what topology code sees while it runs.

It sits below both :mod:`streams_app.app` (which declares a topology and whose objects call this
contract at run time) and :mod:`streams_app.runtime` (which implements it), so that neither
imports the other for it: ``app -> topology <- runtime``. The commit path
(``runtime/commit.py``, ``producer.py``, ``dead_letters.py``, ``task.py``) needs only the types
here (:class:`SendFuture`, :class:`Event`), never the app layer.

The app layer *declares* a topology; the runtime *executes* it. Code inside an agent or a timer
still needs the running worker (``topic.send`` joins its transaction, ``table[key]`` reads the
partition of the task that owns the record being processed). It reaches it through three context
variables, never by importing the runtime:

- :data:`current_runtime` holds the running worker as a :class:`Runtime` (set for the worker's
  whole run, so timers and agents see it);
- :data:`current_event` holds the record being processed, whose :attr:`Event.task` is a
  :class:`TaskScope` (the task that owns it, and its pending table writes);
- :data:`current_task` holds the task a stream-time timer, an ``on_leader`` timer (the leader's
  task) or a window-close callback runs for, when there is no record (so tables and sends
  still reach that task's transaction).

The runtime sees the app's topics, tables and channels through :class:`TopicLike`,
:class:`TableLike` and :class:`ChannelLike`: the few members it uses, which
:class:`~streams_app.app.topic.Topic`, :class:`~streams_app.app.table.Table` and
:class:`~streams_app.app.channel.Channel` have.

Agents run as asyncio tasks, so a ``ContextVar`` set by the stream when it hands out a record is
visible to everything the agent awaits while processing it, and to nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from streams_app.transport.base import RecordMetadataLike

if TYPE_CHECKING:
    from streams_app.codecs import Codec
    from streams_app.state.base import PartitionTransaction

Headers = Sequence[tuple[str, bytes]] | Mapping[str, bytes]


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


class TopicLike(Protocol):
    """A topic as the runtime uses it (:class:`~streams_app.app.topic.Topic` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def key_codec(self) -> Codec: ...

    @property
    def value_codec(self) -> Codec: ...

    @property
    def partitions(self) -> int | None: ...

    @property
    def replicas(self) -> int | None: ...

    @property
    def config(self) -> Mapping[str, str]: ...

    def encode(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]: ...

    def encode_results(self, results: Sequence[Collected]) -> list[ResultRow]: ...

    def encode_sourced_run(
        self, results: Sequence[Collected], header: str, fmt: bytes, raw_keys: bool
    ) -> list[SourcedRow]: ...

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        timestamp: float | None = None,
        headers: Headers | None = None,
    ) -> SendFuture: ...


class ChannelLike(Protocol):
    """An in-process channel as the runtime routes it (by name)."""

    @property
    def name(self) -> str: ...


class WindowedState(Protocol):
    """One task's windows of one windowed table, as the commit sees them: the observed stream
    time it carries in the offsets' metadata (``app.windowed.WindowedTableState`` is one)."""

    observed: int


class TableLike(Protocol):
    """A table as the runtime uses it (:class:`~streams_app.app.table.Table` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> int | None: ...

    @property
    def is_global(self) -> bool: ...

    @property
    def key_codec(self) -> Codec: ...

    @property
    def value_codec(self) -> Codec: ...

    @property
    def read_cache(self) -> bool:
        """Whether its committed values go through the worker's read cache (False for stores
        read only by range scans, where caching them would cost and never serve)."""
        ...

    @property
    def scan_cache(self) -> bool:
        """Whether its range scans may keep what they read in the worker's read cache (the
        stream-stream join buffers: :class:`~streams_app.state.join_windows.JoinWindowTransaction`
        caches a key's entries per segment)."""
        ...

    def open_windowed(self, tx: PartitionTransaction, observed: int) -> WindowedState: ...

    def partition_key_bytes(self, key: Any) -> bytes:
        """The bytes Kafka's partitioner hashes for records carrying ``key`` (where the
        table's row for ``key`` lives)."""
        ...


class TaskScope(Protocol):
    """The task a record belongs to, as tables see it: its open transaction per table."""

    tables: dict[str, PartitionTransaction]

    #: True for the scope of a channel value put there from outside processing (by a timer, a
    #: task or a page): it owns no partition, so a table read there sees the committed state,
    #: as any read outside a record does, and a write is refused.
    outside_processing: bool

    def open_table(self, table: TableLike) -> PartitionTransaction: ...

    @property
    def partition(self) -> int:
        """The partition number of the task (of its input topics and of its tables)."""
        ...

    @property
    def stream_time(self) -> int:
        """The largest record timestamp the task has processed, in ms (-1: none yet)."""
        ...

    def windowed(self, table: TableLike) -> WindowedState:
        """The task's windows of a windowed ``table`` (opened on first use)."""
        ...

    def join_state(self, name: str, opener: Callable[[], Any]) -> Any:
        """The task's state ``name`` of a join or a versioned table (views over its stores,
        with in-memory hints): ``opener()`` makes it on first use; dropped at every abort, as
        :meth:`windowed`'s."""
        ...

    def record_late(self, event: Event, table: TableLike) -> None:
        """``event`` was late for every window of ``table`` it belongs to: count it, and
        dead-letter it if the table says so (at the end of the batch, in the transaction)."""
        ...


class Runtime(Protocol):
    """The running worker (or a command's client), as topology code sees it."""

    async def send(
        self,
        topic: TopicLike,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> SendFuture:
        """Send: inside the worker's transaction while processing a record or running a timer,
        else through a plain idempotent producer (tasks, services, pages, commands)."""

    def send_nowait(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: float | None,
    ) -> SendFuture | None:
        """Send encoded bytes when it can complete without awaiting anything (the common case
        inside a transaction), else None: then the caller awaits :meth:`send_encoded` with the
        same bytes (``Topic.send`` encodes once)."""

    def send_run_nowait(self, topic: str, rows: Sequence[ResultRow]) -> int:
        """Send a run of encoded results, each as the send of its record (``event``: lineage
        headers) would be, in order, without awaiting: how many of them, from the first, went
        (the caller sends the rest with :meth:`send`). A join sends its results this way,
        a run of input records at a time: the checks of :meth:`send_nowait` are made once."""

    def send_results_nowait(
        self, topic: TopicLike, results: Sequence[Collected], raw_keys: bool
    ) -> int:
        """:meth:`send_run_nowait` of the results of *one run of one partition's records*,
        each with the record it came of, encoded here (``topic``'s codecs) together with their
        lineage header in one pass (``raw_keys``: each result's key is its record's, sent as
        the record's own key bytes, which the topic's key codec would give again). How many
        of them, from the first, went; the caller sends the rest as after
        :meth:`send_run_nowait`."""

    async def send_encoded(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        partition: int | None,
        timestamp: float | None,
    ) -> SendFuture:
        """:meth:`send` of bytes already encoded with the topic's codecs."""

    def send_soon(
        self,
        topic: TopicLike,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> None:
        """Send without awaiting (from synchronous callbacks); it joins the same transaction
        as :meth:`send` would, before the next commit."""

    async def forward(
        self, topic: TopicLike, event: Event, *, key: Any = None, partition: int | None = None
    ) -> SendFuture:
        """Send ``event``'s original value bytes to ``topic`` under ``key`` (group_by)."""

    def table_items(self, table: TableLike) -> Iterator[tuple[Any, Any]]:
        """Committed items of every partition of ``table`` this worker holds."""

    def table_lookup(self, table: TableLike, key: Any) -> Any:
        """``key``'s committed value in the partitions of ``table`` this worker holds (or
        ``MISSING``): a read outside of any record (pages, tasks, timers)."""

    def global_lookup(self, table: TableLike, key: Any) -> Any:
        """A global table's committed value for ``key`` from any partition (or ``MISSING``)."""

    async def declare(self, topic: TopicLike) -> None:
        """Create ``topic`` if it does not exist."""

    async def ask(
        self,
        topic: TopicLike,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        headers: Headers | None = None,
        timestamp: float | None = None,
        reply_to: str | None = None,
        correlation_id: str | None = None,
    ) -> Any:
        """RPC: send a request to an agent's topic and wait for its reply."""

    async def channel_send(
        self,
        channel: ChannelLike,
        *,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
    ) -> None:
        """Hand a value to the agents reading an in-process channel."""

    @property
    def rebalancing(self) -> bool:
        """Partitions are being reassigned (between revocation and the end of restore)."""

    @property
    def should_stop(self) -> bool:
        """The worker was asked to stop."""

    async def sleep(self, seconds: float) -> None:
        """Sleep, returning early when the worker stops."""

    def is_leader(self) -> bool:
        """This worker holds the leader partition (``on_leader`` timers run here)."""

    def topic(self, name: str) -> TopicLike:
        """The app's topic called ``name`` (declared on first use)."""

    def wall_time(self) -> float:
        """Wall-clock seconds since the epoch, from the worker's clock (tests move it)."""


#: What a lookup returns when a key is absent (``None`` may be a stored value).
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


class TopicPartitionView(NamedTuple):
    """Faust's ``TP``: (topic, partition)."""

    topic: str
    partition: int


class Event:
    """A consumed record, decoded, with where it came from.

    ``timestamp`` is the record's time in ms: the Kafka timestamp, or what the topic's
    ``timestamp_fn`` took from the value.
    """

    __slots__ = (
        "asks",
        "correlation_id",
        "headers",
        "key",
        "offset",
        "partition",
        "raw_key",
        "raw_value",
        "reply_to",
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
        reply_to: str | None = None,
        correlation_id: str | None = None,
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
        #: Set when the record is an agent RPC request (``ask``): where the reply goes.
        self.reply_to = reply_to
        self.correlation_id = correlation_id
        #: RPC requests made while processing this record (their correlation ids count them).
        self.asks = 0

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @property
    def message(self) -> Message:
        """Faust's ``event.message``: the record as consumed (raw key and value, tp, offset)."""
        return Message(self)

    async def send(
        self,
        channel: TopicLike | str,
        key: Any = None,
        value: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
    ) -> SendFuture:
        """Faust's ``event.send``: send to ``channel`` (a topic or its name)."""
        topic = _as_topic(self, channel)
        return await topic.send(key=key, value=value, headers=headers, partition=partition)

    async def forward(
        self,
        channel: TopicLike | str,
        key: Any = None,
        partition: int | None = None,
    ) -> SendFuture:
        """Faust's ``event.forward``: the original value bytes to ``channel``."""
        runtime = current_runtime.get()
        if runtime is None:
            raise RuntimeError("event.forward() needs a running worker")
        topic = _as_topic(self, channel)
        return await runtime.forward(
            topic, self, key=self.key if key is None else key, partition=partition
        )

    def __repr__(self) -> str:  # no key or value: they may be personal data
        return f"<Event {self.topic}[{self.partition}]@{self.offset}>"


def _as_topic(event: Event, channel: TopicLike | str) -> TopicLike:
    if not isinstance(channel, str):
        return channel
    runtime = current_runtime.get()
    if runtime is None:
        raise RuntimeError("event.send/forward to a topic name needs a running worker")
    return runtime.topic(channel)


class Message:
    """The consumed record behind an event, as Faust's ``Message``: raw bytes and coordinates."""

    __slots__ = ("_event",)

    def __init__(self, event: Event) -> None:
        self._event = event

    @property
    def topic(self) -> str:
        return self._event.topic

    @property
    def partition(self) -> int:
        return self._event.partition

    @property
    def offset(self) -> int:
        return self._event.offset

    @property
    def tp(self) -> TopicPartitionView:
        return TopicPartitionView(self._event.topic, self._event.partition)

    @property
    def timestamp(self) -> float:
        """Seconds since the epoch, as Faust's ``message.timestamp``."""
        return self._event.timestamp / 1000.0

    @property
    def key(self) -> bytes | None:
        return self._event.raw_key

    @property
    def value(self) -> bytes | None:
        return self._event.raw_value

    @property
    def headers(self) -> tuple[tuple[str, bytes], ...]:
        return self._event.headers

    def __repr__(self) -> str:
        return f"<Message {self.topic}[{self.partition}]@{self.offset}>"


current_event: ContextVar[Event | None] = ContextVar("streams_app_current_event", default=None)

#: One result of :meth:`Runtime.send_run_nowait`: key and value encoded, the timestamp (ms),
#: and the record it came of (its lineage headers; None: of no record).
ResultRow = tuple[bytes | None, bytes | None, int, Event | None]
#: A result a run collected before sending (a join's): ``(task, key, value, timestamp_ms,
#: trigger)``, the key and value decoded; :meth:`TopicLike.encode_results` makes its row.
Collected = tuple[TaskScope, Any, Any, int, Event | None]
#: A result as :meth:`TopicLike.encode_sourced_run` makes it, ready for the producer's batch:
#: key and value encoded, its one header (where it came from), the timestamp (ms).
SourcedRow = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int]
current_task: ContextVar[TaskScope | None] = ContextVar("streams_app_current_task", default=None)
current_runtime: ContextVar[Runtime | None] = ContextVar("streams_app_runtime", default=None)
