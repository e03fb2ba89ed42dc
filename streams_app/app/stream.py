"""Stream: what an agent iterates over, with Faust's operators.

The runtime hands records to a stream through an inbox; the agent pulls them with
``async for``. Pulling does not suspend while the inbox holds records, so an agent works through
a whole fetched batch in one go without an event-loop round trip per record. When the inbox is
empty the stream marks itself *settled* and waits.

The worker commits only when every stream is *idle*: settled with nothing half done. Two states
are settled but not idle, and let the worker go on fetching without committing:

- **parked**: the agent waits for an RPC reply (``ask``) in the middle of a record;
- **holding**: ``take()`` holds values it has not yielded yet. When a commit is due the worker
  asks holding streams to *flush*: ``take`` yields what it holds (fewer than ``max_``), the
  agent processes it, and only then does the commit include those records. So ``take(n)`` yields
  at most ``n`` values, and never holds a value across a commit.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from streams_app.aio import Flag, within
from streams_app.topology.contract import Event, TopicPartitionView, current_event

if TYPE_CHECKING:
    from streams_app.app.channel import Channel
    from streams_app.app.topic import Topic

Processor = Callable[[Any], Any]
#: A processor's way of saying "drop this value" (``filter``).
SKIP: Any = type("Skip", (), {"__repr__": lambda self: "SKIP"})()


class StreamOwner(Protocol):
    """The runtime's side of a stream: what ``group_by`` and ``through`` ask it to do."""

    def regroup(
        self,
        stream: Stream,
        key: Callable[[Any], Any] | None,
        *,
        name: str | None,
        partitions: int | None,
        topic: Topic | None = None,
    ) -> Stream: ...

    def rejoin(self, stream: Stream, how: str, other: Any, options: dict[str, Any]) -> Stream: ...


class _Core:
    """The inbox and state one agent instance's streams share (derived streams included)."""

    __slots__ = (
        "current",
        "failed",
        "flush_requested",
        "holding",
        "inbox",
        "parked",
        "settled",
        "started",
        "wakeup",
    )

    def __init__(self) -> None:
        self.inbox: deque[Event] = deque()
        self.settled = Flag()
        self.wakeup = Flag()
        self.started = False
        self.parked = 0
        self.holding = False
        self.flush_requested = False
        self.failed = False
        #: The record the agent works on now (None while it waits): the runtime names it when
        #: the agent takes too long (processing_timeout).
        self.current: Event | None = None


class Stream:
    """An agent's view of its input: values, ``items()``, ``events()``, and Faust's operators
    (``filter``, ``echo``, ``enumerate``, ``take``, ``through``, ``group_by``)."""

    def __init__(
        self,
        actor: StreamOwner,
        topic: str,
        *,
        _core: _Core | None = None,
        _processors: Iterable[Processor] = (),
    ) -> None:
        self._actor = actor
        self.topic = topic
        self._core = _core or _Core()
        self._processors: list[Processor] = list(_processors)
        #: The partitions whose records reach this stream (Faust's ``active_partitions``; set
        #: by the runtime on assignment).
        self.active_partitions: set[TopicPartitionView] = set()

    def __class_getitem__(cls, item: Any) -> type[Stream]:  # Faust's Stream[T] annotations
        return cls

    # -- iteration ------------------------------------------------------------------------

    def __aiter__(self) -> Stream:
        return self

    # The three loops below take an event that is already waiting without a coroutine
    # (:meth:`_waiting`), and skip :meth:`_process` when there are no processors: the worker
    # hands records over a batch at a time, so almost every record is already waiting. Two
    # coroutines per record cost about 3% of a counting worker's CPU
    # (benchmarks/stream_iteration.py). The two loops agents use most take it inline (the
    # body of :meth:`_waiting`): a call fewer per record.

    async def __anext__(self) -> Any:
        processors = self._processors
        core = self._core
        inbox = core.inbox
        while True:
            if inbox:
                core.started = True
                event = core.current = inbox.popleft()
                current_event.set(event)
            else:
                event = await self._next_event()
            if not processors:
                return event.value
            value = await self._process(event.value)
            if value is not SKIP:
                return value

    async def items(self) -> AsyncIterator[tuple[Any, Any]]:
        """``(key, value)`` pairs."""
        processors = self._processors
        core = self._core
        inbox = core.inbox
        while True:
            if inbox:
                core.started = True
                event = core.current = inbox.popleft()
                current_event.set(event)
            else:
                event = await self._next_event()
            if not processors:
                yield event.key, event.value
                continue
            value = await self._process(event.value)
            if value is not SKIP:
                yield event.key, value

    async def events(self) -> AsyncIterator[Event]:
        """Whole events: key, value, headers, topic, partition, offset, timestamp, message."""
        processors = self._processors
        while True:
            event = self._waiting()
            if event is None:
                event = await self._next_event()
            if not processors or await self._process(event.value) is not SKIP:
                yield event

    async def enumerate(self, start: int = 0) -> AsyncIterator[tuple[int, Any]]:
        """``(index, value)`` pairs, as Faust's ``stream.enumerate()``."""
        index = start
        async for value in self:
            yield index, value
            index += 1

    async def take(self, max_: int, within: float | None = None) -> AsyncIterator[list[Any]]:
        """Lists of up to ``max_`` values: yielded when ``max_`` are gathered, when ``within``
        seconds have passed since the first of them, or when the worker commits (so that no
        value is held across a commit)."""
        if max_ < 1:
            raise ValueError("take(max_) needs max_ >= 1")
        loop = asyncio.get_running_loop()
        buffer: list[Any] = []
        deadline: float | None = None
        while True:
            event = await self._next_event(
                holding=bool(buffer), deadline=deadline if buffer else None
            )
            if event is not None:
                value = await self._process(event.value)
                if value is not SKIP:
                    if not buffer and within is not None:
                        deadline = loop.time() + within
                    buffer.append(value)
                if len(buffer) < max_:
                    continue
            if buffer:
                out, buffer, deadline = buffer, [], None
                yield out

    # -- derived streams ------------------------------------------------------------------

    def filter(self, fun: Callable[[Any], Any]) -> Stream:
        """Only the values for which ``fun`` (sync or async) is true."""

        async def keep(value: Any) -> Any:
            result = fun(value)
            if inspect.isawaitable(result):
                result = await result
            return value if result else SKIP

        return self._derive(keep)

    def echo(self, *channels: Topic | Channel | str) -> Stream:
        """Send every value to ``channels`` too (inside the transaction), then pass it on.

        Under the input record's key, as sinks do (Faust sends ``key=None``): a copy keeps its
        input's partition number and order, and stays usable with tables downstream."""

        async def forward(value: Any) -> Any:
            event = current_event.get()
            key = event.key if event is not None else None
            for channel in channels:
                target = self._actor_topic(channel)
                await target.send(key=key, value=value)
            return value

        return self._derive(forward)

    def add_processor(self, fun: Processor) -> None:
        """Faust's ``add_processor``: ``fun(value)`` replaces each value (sync or async)."""
        self._processors.append(fun)

    def group_by(
        self,
        key: Any,
        *,
        name: str | None = None,
        partitions: int | None = None,
        topic: Topic | None = None,
    ) -> Stream:
        """Re-key the stream through an internal repartition topic.

        Each record is forwarded, its original value bytes under the new key, to the
        repartition topic inside the worker's transaction; the returned stream reads that
        topic, so records with the same new key meet in the same task (and table partition).
        ``key`` is a function or a model field (``Withdrawal.country``); a lambda needs
        ``name=``. The topic is Faust's ``<agent>-<source>-<name>-repartition``.
        """
        if self._core.started:
            raise RuntimeError("group_by() must be called before iterating over the stream")
        if hasattr(key, "ident") and hasattr(key, "getattr"):  # a model field descriptor
            descriptor = key
            name = name or descriptor.ident  # Faust names the topic after Model.field

            def key(value: Any) -> Any:
                return descriptor.getattr(value)

        elif not callable(key):
            raise TypeError("group_by(key): key must be a function or a model field")
        return self._actor.regroup(self, key, name=name, partitions=partitions, topic=topic)

    def through(self, channel: Topic | str) -> Stream:
        """Forward every record to ``channel`` and continue with the stream reading it."""
        if self._core.started:
            raise RuntimeError("through() must be called before iterating over the stream")
        target = self._actor_topic(channel)
        return self._actor.regroup(self, None, name=None, partitions=None, topic=target)

    # -- joins (declared here before the first ``async for``, as group_by; docs/joins.md) -----

    def join(self, other: Any, *fields: Any, **options: Any) -> Stream:
        """The stream of this stream's records joined with ``other`` (a table built from a
        topic, a GlobalTable, or a topic for a windowed join): ``topic.join``'s join, declared
        from inside the agent. Its values are the results (``Joined(left, right)`` or the
        ``joiner=``'s)."""
        return self._join("inner", other, fields, options)

    inner_join = join

    def left_join(self, other: Any, *fields: Any, **options: Any) -> Stream:
        """As :meth:`join`, a left join (``topic.left_join``)."""
        return self._join("left", other, fields, options)

    def outer_join(self, other: Any, *fields: Any, **options: Any) -> Stream:
        """As :meth:`join`, an outer stream-stream join (``topic.outer_join``)."""
        return self._join("outer", other, fields, options)

    def _join(
        self, how: str, other: Any, fields: tuple[Any, ...], options: dict[str, Any]
    ) -> Stream:
        from streams_app.app.joins import JoinWindows

        if len(fields) == 1 and isinstance(fields[0], JoinWindows):
            options = {**options, "windows": fields[0]}  # stream.join(other, JoinWindows(...))
        elif fields:
            raise TypeError(
                "join() takes the other side as its only positional argument; Faust's fields "
                "(stream.join(Order.customer_id, ...)) are key=/foreign_key= here"
            )
        if self._core.started:
            raise RuntimeError("join() must be called before iterating over the stream")
        if self._processors:
            raise RuntimeError(
                "join() joins the topic's records: call it before filter()/echo() and the like"
            )
        return self._actor.rejoin(self, how, other, options)

    def noack(self) -> Stream:
        """Faust's ``noack()``: offsets here commit with the transaction, nothing to change."""
        return self

    async def ack(self, event: Event) -> bool:
        return True

    @property
    def current_event(self) -> Event | None:
        return current_event.get()

    # -- what the runtime uses ------------------------------------------------------------

    async def _process(self, value: Any) -> Any:
        for fun in self._processors:
            value = fun(value)
            if inspect.isawaitable(value):
                value = await value
            if value is SKIP:
                return SKIP
        return value

    def _derive(self, processor: Processor) -> Stream:
        derived = type(self)(
            self._actor, self.topic, _core=self._core, _processors=[*self._processors, processor]
        )
        derived.active_partitions = self.active_partitions
        return derived

    def _actor_topic(self, channel: Any) -> Any:
        if isinstance(channel, str):
            from streams_app.topology.contract import current_runtime

            runtime = current_runtime.get()
            if runtime is None:
                raise RuntimeError("a topic name needs a running worker; pass app.topic(name)")
            return runtime.topic(channel)
        return getattr(channel, "channel", channel)  # an agent: its topic

    @property
    def processors(self) -> list[Processor]:
        return list(self._processors)

    async def _next_event(self, *, holding: bool = False, deadline: float | None = None) -> Event:
        """The next event; with ``holding``, None when the worker asks for a flush or the
        ``deadline`` (loop time) passes while waiting."""
        core = self._core
        core.started = True
        inbox = core.inbox
        while not inbox:
            current_event.set(None)
            core.current = None
            if holding and (core.flush_requested or _passed(deadline)):
                core.flush_requested = False
                return None  # type: ignore[return-value]
            core.holding = holding
            core.wakeup.clear()
            core.settled.set()
            if deadline is None:
                await core.wakeup.wait()
            else:
                timeout = max(0.0, deadline - asyncio.get_running_loop().time())
                try:
                    await within(core.wakeup.wait(), timeout)
                except TimeoutError:
                    core.settled.clear()  # about to yield what it holds: busy again
                    core.holding = False
                    return None  # type: ignore[return-value]
            core.holding = False
        event = core.current = inbox.popleft()
        current_event.set(event)
        return event

    def _waiting(self) -> Event | None:
        """The next event if one is already waiting, as :meth:`_next_event` would return it;
        None when the caller must await :meth:`_next_event`."""
        core = self._core
        if not core.inbox:
            return None
        core.started = True
        event = core.current = core.inbox.popleft()
        current_event.set(event)
        return event

    def feed(self, event: Event) -> None:
        core = self._core
        if core.failed:
            return  # nobody will take it: the failure aborts and this record comes round again
        core.inbox.append(event)
        if core.settled.is_set() and not core.parked:
            core.settled.clear()
        core.wakeup.set()

    def feed_all(self, events: list[Event]) -> None:
        """:meth:`feed` for a run of events, in order: one wake-up instead of one per event."""
        core = self._core
        if core.failed:
            return
        core.inbox.extend(events)
        if core.settled.is_set() and not core.parked:
            core.settled.clear()
        core.wakeup.set()

    def request_flush(self) -> bool:
        """Ask a holding ``take`` to yield what it holds; False if it holds nothing."""
        core = self._core
        if not core.holding:
            return False
        core.flush_requested = True
        core.holding = False
        core.settled.clear()
        core.wakeup.set()
        return True

    def park(self) -> None:
        """The agent waits for something the worker must keep running for (an RPC reply)."""
        core = self._core
        core.parked += 1
        core.settled.set()

    def unpark(self) -> None:
        core = self._core
        core.parked -= 1
        if not core.parked:
            core.settled.clear()  # busy again until it next waits for input

    @property
    def idle(self) -> bool:
        """Finished everything handed to it: nothing pending, parked or held."""
        core = self._core
        return core.settled.is_set() and not core.inbox and not core.parked and not core.holding

    @property
    def settled(self) -> bool:
        return self._core.settled.is_set()

    @property
    def in_hand(self) -> Event | None:
        """The record the agent took last and has not finished with (None: it waits)."""
        core = self._core
        return None if core.settled.is_set() and not core.parked else core.current

    @property
    def pending(self) -> int:
        """Records handed over and not pulled yet."""
        return len(self._core.inbox)

    @property
    def parked(self) -> bool:
        return bool(self._core.parked)

    @property
    def holding(self) -> bool:
        return self._core.holding

    async def wait_settled(self) -> None:
        await self._core.settled.wait()

    wait_idle = wait_settled

    async def settled_within(self, timeout: float) -> bool:
        """:meth:`wait_settled` for at most ``timeout`` seconds: False if still busy then."""
        return await self._core.settled.wait(timeout)

    def mark_idle(self) -> None:
        """The agent behind this stream stopped (returned or raised): nothing more will run."""
        core = self._core
        core.parked = 0
        core.holding = False
        core.settled.set()

    def mark_failed(self) -> None:
        """The agent behind this stream raised. It stays settled: records handed over after the
        failure (the dispatcher may still be feeding the batch) are dropped, since the failure
        aborts the transaction and rewinds to before them."""
        core = self._core
        core.failed = True
        core.inbox.clear()
        core.parked = 0
        core.holding = False
        core.settled.set()

    def clear(self) -> None:
        """Drop records handed over but not yet processed (after an abort)."""
        self._core.inbox.clear()


def _passed(deadline: float | None) -> bool:
    return deadline is not None and asyncio.get_running_loop().time() >= deadline


AwaitableValue = Awaitable[Any]
