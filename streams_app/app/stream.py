"""Stream: what an agent iterates over.

The runtime hands records to a stream through an inbox; the agent pulls them with
``async for``. Pulling does not suspend while the inbox holds records, so an agent works through
a whole fetched batch in one go without an event-loop round trip per record. When the inbox is
empty the stream marks itself *idle* and waits: an idle stream has finished every record handed
to it, which is the moment the runtime may commit.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from streams_app.app.context import Event, current_event


class StreamOwner(Protocol):
    """The runtime's side of a stream: what ``group_by`` asks it to do."""

    def regroup(
        self,
        stream: Stream,
        key: Callable[[Any], Any],
        *,
        name: str | None,
        partitions: int | None,
    ) -> Stream: ...


class Stream:
    """An agent's view of its input: values, ``items()`` or ``events()``."""

    def __init__(self, actor: StreamOwner, topic: str) -> None:
        self._actor = actor
        self.topic = topic
        self._inbox: deque[Event] = deque()
        self._idle = asyncio.Event()
        self._wakeup = asyncio.Event()
        self._started = False
        self._failed = False

    # -- what agents use ------------------------------------------------------------------

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> Any:
        return (await self._next_event()).value

    async def items(self) -> AsyncIterator[tuple[Any, Any]]:
        """``(key, value)`` pairs."""
        while True:
            event = await self._next_event()
            yield event.key, event.value

    async def events(self) -> AsyncIterator[Event]:
        """Whole events: key, value, headers, topic, partition, offset, timestamp."""
        while True:
            yield await self._next_event()

    def group_by(
        self,
        key: Callable[[Any], Any],
        *,
        name: str | None = None,
        partitions: int | None = None,
    ) -> Stream:
        """Re-key the stream through an internal repartition topic.

        Each record is sent, under its new key, to ``<app id>-<agent>-<name>-repartition``
        inside the worker's transaction; the returned stream reads that topic, so records with
        the same new key meet in the same task (and the same table partition). ``name`` is
        needed when ``key`` is a lambda.
        """
        if self._started:
            raise RuntimeError("group_by() must be called before iterating over the stream")
        return self._actor.regroup(self, key, name=name, partitions=partitions)

    @property
    def current_event(self) -> Event | None:
        return current_event.get()

    # -- what the runtime uses ------------------------------------------------------------

    async def _next_event(self) -> Event:
        self._started = True
        inbox = self._inbox
        while not inbox:
            current_event.set(None)
            self._wakeup.clear()
            self._idle.set()
            await self._wakeup.wait()
        event = inbox.popleft()
        current_event.set(event)
        return event

    def feed(self, event: Event) -> None:
        if self._failed:
            return  # nobody will take it: the failure aborts and this record comes round again
        self._inbox.append(event)
        if self._idle.is_set():
            self._idle.clear()
            self._wakeup.set()

    @property
    def idle(self) -> bool:
        return self._idle.is_set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def mark_idle(self) -> None:
        """The agent behind this stream stopped (returned or raised): nothing more will run."""
        self._idle.set()

    def mark_failed(self) -> None:
        """The agent behind this stream raised. It stays idle: records handed over after the
        failure (the dispatcher may still be feeding the batch) are dropped, since the failure
        aborts the transaction and rewinds to before them."""
        self._failed = True
        self._inbox.clear()
        self._idle.set()

    def clear(self) -> None:
        """Drop records handed over but not yet processed (after an abort)."""
        self._inbox.clear()
