"""Agent: an ``async def f(stream)`` that processes a topic, Faust-style."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from streams_app.app.context import current_event
from streams_app.app.topic import Topic

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.context import SendFuture
    from streams_app.app.stream import Stream

AgentFun: TypeAlias = Callable[["Stream"], Awaitable[Any] | AsyncIterator[Any]]
Sink: TypeAlias = "Topic | Agent | Callable[[Any], Any]"


class Agent:
    """A processing function bound to an input topic.

    ``concurrency`` runs several instances of the function; each instance owns a fixed share of
    the partitions (partition % concurrency), so records of one partition are still processed
    in order. A function that ``yield``s sends each yielded value to every sink (a topic, another
    agent, or a callable) under the key of the record being processed, inside the transaction.
    """

    def __init__(
        self,
        app: App,
        fun: AgentFun,
        channel: Topic,
        *,
        name: str | None = None,
        concurrency: int = 1,
        sink: Sequence[Sink] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("agent concurrency must be at least 1")
        self.app = app
        self.fun = fun
        self.channel = channel
        self.name = name or f"{fun.__module__}.{fun.__qualname__}"
        self.short_name = name or fun.__name__
        self.concurrency = concurrency
        self.sinks: list[Sink] = list(sink or ())
        self.is_generator = inspect.isasyncgenfunction(fun)

    def __call__(self, stream: Stream) -> Awaitable[Any] | AsyncIterator[Any]:
        return self.fun(stream)

    async def send(self, *, key: Any = None, value: Any = None, headers: Any = None) -> SendFuture:
        """Send to this agent's input topic (inside the transaction when in a worker)."""
        return await self.channel.send(key=key, value=value, headers=headers)

    async def deliver_to_sinks(self, value: Any) -> None:
        event = current_event.get()
        key = event.key if event is not None else None
        for sink in self.sinks:
            if isinstance(sink, Topic):
                await sink.send(key=key, value=value)
            elif isinstance(sink, Agent):
                await sink.channel.send(key=key, value=value)
            else:
                result = sink(value)
                if inspect.isawaitable(result):
                    await result

    def __repr__(self) -> str:
        return f"<Agent {self.name} on {self.channel.name}>"
