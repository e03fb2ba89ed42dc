"""Agent: an ``async def f(stream)`` that processes a topic or a channel, Faust-style.

An agent declared without a topic owns one, named as Faust names it (``<app id>-<module>.<f>``),
so ``agent.send`` and the RPC calls (``ask``, ``map``, ``join``, ``kvmap``) reach it through
Kafka. A generator agent's yielded values go to its sinks and, when the record being processed
is an RPC request, back to the caller as the reply.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from streams_app.app.channel import Channel
from streams_app.app.topic import Topic
from streams_app.topology import names
from streams_app.topology.contract import current_event, current_runtime

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.stream import Stream
    from streams_app.topology.contract import SendFuture

AgentFun: TypeAlias = Callable[["Stream"], Awaitable[Any] | AsyncIterator[Any]]
Sink: TypeAlias = "Topic | Channel | Agent | Callable[[Any], Any]"


class Agent:
    """A processing function bound to an input topic (or an in-process channel).

    ``concurrency`` runs several instances of the function; each instance owns a fixed share of
    the partitions (partition % concurrency), so records of one partition are still processed
    in order. ``isolated_partitions=True`` runs one instance per partition instead (Faust's
    option; ``stream.active_partitions`` then holds that one partition). A function that
    ``yield``s sends each yielded value to every sink (a topic, a channel, another agent, or a
    callable) under the key of the record being processed, inside the transaction.
    """

    def __init__(
        self,
        app: App,
        fun: AgentFun,
        channel: Topic | Channel | None,
        *,
        name: str | None = None,
        concurrency: int = 1,
        sink: Sequence[Sink] | None = None,
        isolated_partitions: bool = False,
        key_type: Any = None,
        value_type: Any = None,
        use_reply_headers: bool = True,
        help: str | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("agent concurrency must be at least 1")
        if isolated_partitions and concurrency > 1:
            raise ValueError("isolated_partitions=True runs one instance per partition already")
        self.app = app
        self.fun = fun
        self.name = name or names.canonical_name(fun)
        self.short_name = name or getattr(names.unwrap(fun), "__name__", self.name)
        if channel is None:
            channel = app.topic(
                names.agent_topic(app.conf.id, self.name),
                key_type=key_type,
                value_type=value_type,
                has_prefix=True,
            )
        self.channel: Topic | Channel = channel
        self.concurrency = concurrency
        self.isolated_partitions = isolated_partitions
        self.sinks: list[Sink] = list(sink or ())
        self.use_reply_headers = use_reply_headers
        self.help = help or inspect.getdoc(names.unwrap(fun)) or ""

    @property
    def is_generator(self) -> bool:
        return inspect.isasyncgenfunction(names.unwrap(self.fun))

    @property
    def topic(self) -> Topic:
        if not isinstance(self.channel, Topic):
            raise TypeError(f"agent {self.name} reads a channel, not a topic")
        return self.channel

    def __call__(self, stream: Stream) -> Awaitable[Any] | AsyncIterator[Any]:
        return self.fun(stream)

    # -- sending ------------------------------------------------------------------------------

    async def send(
        self,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        timestamp: float | None = None,
        headers: Any = None,
        reply_to: str | Topic | Agent | None = None,
        correlation_id: str | None = None,
        **options: Any,
    ) -> SendFuture | None:
        """Send to this agent's topic (inside the transaction while processing, as
        ``Topic.send``), or hand the value to it through its channel."""
        if reply_to is not None:
            raise NotImplementedError("agent.send(reply_to=...): use agent.ask() for replies")
        if isinstance(self.channel, Channel):
            await self.channel.send(key=key, value=value, headers=headers)
            return None
        return await self.channel.send(
            key=key, value=value, partition=partition, timestamp=timestamp, headers=headers
        )

    async def cast(self, value: Any = None, *, key: Any = None, **options: Any) -> None:
        """Send without waiting for a reply (Faust's ``cast``: the value may be positional)."""
        await self.send(key=key, value=value, **options)

    # -- RPC ----------------------------------------------------------------------------------

    async def ask(
        self,
        value: Any = None,
        *,
        key: Any = None,
        partition: int | None = None,
        timestamp: float | None = None,
        headers: Any = None,
        reply_to: str | Topic | Agent | None = None,
        correlation_id: str | None = None,
    ) -> Any:
        """Send ``value`` to the agent and wait for what it yields in reply.

        The request is sent *outside* the transaction (the reply could never come if the
        request waited for our commit, and the worker commits only when this call returns);
        the reply is sent inside the replying agent's transaction, so it reflects committed
        work only. See docs/migrating-from-faust.md for what is exactly-once.
        """
        runtime = current_runtime.get()
        if runtime is None:
            raise RuntimeError(f"{self.name}.ask() needs a running worker or an app command")
        return await runtime.ask(
            self.topic,
            key=key,
            value=value,
            partition=partition,
            headers=headers,
            timestamp=timestamp,
            reply_to=_topic_name(reply_to),
            correlation_id=correlation_id,
        )

    async def join(
        self,
        values: Iterable[Any] | AsyncIterable[Any],
        key: Any = None,
        reply_to: str | Topic | Agent | None = None,
    ) -> list[Any]:
        """Ask for every value at once; the replies in the order of ``values``."""
        items = [(key, value) async for value in _aiter(values)]
        return await self.kvjoin(items, reply_to=reply_to)

    async def kvjoin(
        self,
        items: Iterable[tuple[Any, Any]] | AsyncIterable[tuple[Any, Any]],
        reply_to: str | Topic | Agent | None = None,
    ) -> list[Any]:
        pairs = [pair async for pair in _aiter(items)]
        return list(
            await asyncio.gather(*(self.ask(v, key=k, reply_to=reply_to) for k, v in pairs))
        )

    async def map(
        self,
        values: Iterable[Any] | AsyncIterable[Any],
        key: Any = None,
        reply_to: str | Topic | Agent | None = None,
    ) -> AsyncIterator[Any]:
        """Ask for every value at once; the replies as they arrive (unordered, as Faust)."""
        async for reply in self.kvmap(
            [(key, value) async for value in _aiter(values)], reply_to=reply_to
        ):
            yield reply

    async def kvmap(
        self,
        items: Iterable[tuple[Any, Any]] | AsyncIterable[tuple[Any, Any]],
        reply_to: str | Topic | Agent | None = None,
    ) -> AsyncIterator[Any]:
        pairs = [pair async for pair in _aiter(items)]
        pending = [asyncio.ensure_future(self.ask(v, key=k, reply_to=reply_to)) for k, v in pairs]
        try:
            for next_done in asyncio.as_completed(pending):
                yield await next_done
        finally:
            for future in pending:
                future.cancel()

    # -- sinks --------------------------------------------------------------------------------

    async def deliver_to_sinks(self, value: Any) -> None:
        event = current_event.get()
        key = event.key if event is not None else None
        for sink in self.sinks:
            if isinstance(sink, (Topic, Channel, Agent)):
                await sink.send(key=key, value=value)
            else:
                result = sink(value)
                if inspect.isawaitable(result):
                    await result

    def __repr__(self) -> str:
        return f"<Agent {self.name} on {getattr(self.channel, 'name', self.channel)}>"


def _topic_name(target: str | Topic | Agent | None) -> str | None:
    if target is None or isinstance(target, str):
        return target
    if isinstance(target, Agent):
        return target.topic.name
    return target.name


async def _aiter(values: Iterable[Any] | AsyncIterable[Any]) -> AsyncIterator[Any]:
    if isinstance(values, AsyncIterable):
        async for value in values:
            yield value
    else:
        for value in values:
            yield value
