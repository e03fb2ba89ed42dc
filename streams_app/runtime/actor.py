"""Actors: the running instances of agents, and where each consumed record goes.

Each agent runs ``concurrency`` actors; an actor is one asyncio task running the agent's
function over its own :class:`~streams_app.app.stream.Stream`. A record of partition ``p`` goes
to actor ``p % concurrency``, so per-partition order holds. ``group_by`` turns an actor's source
subscription into a *forwarder* (re-key, send to the repartition topic, inside the transaction)
and subscribes the actor to the repartition topic instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from streams_app.app.context import Event, current_event, current_runtime
from streams_app.app.stream import Stream

if TYPE_CHECKING:
    from streams_app.app.agent import Agent
    from streams_app.app.app import App
    from streams_app.app.topic import Topic

log = logging.getLogger(__name__)

SendFn = Callable[..., Awaitable[Any]]


class Actor:
    def __init__(self, runner: AgentRunner, agent: Agent, index: int) -> None:
        self.runner = runner
        self.agent = agent
        self.index = index
        self.source = Stream(self, agent.channel.name)
        self.input = self.source
        self.task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self.failed_event: Event | None = None
        self.returned = False

    @property
    def name(self) -> str:
        return f"{self.agent.short_name}[{self.index}]"

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"agent:{self.name}")

    async def _run(self) -> None:
        try:
            result = self.agent.fun(self.source)
            if self.agent.is_generator:
                async for value in result:  # type: ignore[union-attr]
                    await self.agent.deliver_to_sinks(value)
            else:
                await result  # type: ignore[misc]
            self.returned = True
            log.warning("agent %s returned: its records are no longer processed", self.name)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.error = exc
            self.failed_event = current_event.get()
            self.input.mark_failed()
        finally:
            self.input.mark_idle()

    async def cancel(self) -> None:
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def regroup(
        self,
        stream: Stream,
        key: Callable[[Any], Any],
        *,
        name: str | None,
        partitions: int | None,
    ) -> Stream:
        return self.runner.regroup(self, stream, key, name=name, partitions=partitions)


class Forwarder:
    """The first half of a ``group_by``: re-key each record and send it to the repartition topic."""

    def __init__(self, key: Callable[[Any], Any], target: Topic, source: Topic) -> None:
        self.key = key
        self.target = target
        self.source = source

    async def forward(self, event: Event) -> None:
        runtime = current_runtime.get()
        assert runtime is not None
        # The record keeps its time across the hop (as Kafka Streams' repartition topics do):
        # windows after a group_by see the source's timestamps, not the time of the hop.
        await runtime.send(
            self.target,
            key=self.key(event.value),
            value=event.value,
            timestamp=event.timestamp / 1000,
        )


class AgentRunner:
    """Owns every actor of a worker and the topic -> consumer routing."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.actors: list[Actor] = []
        # topic -> agent -> its actors on that topic (a record of partition p goes to
        # actors[p % len(actors)] of every agent); topic -> forwarders (group_by)
        self.routes: dict[str, dict[str, list[Actor]]] = {}
        self.forwarders: dict[str, list[Forwarder]] = {}
        self._forwarder_keys: set[tuple[str, str]] = set()
        self.repartition_sources: dict[str, str] = {}  # repartition topic -> source topic

    def start(self) -> None:
        for agent in self.app.agents:
            for index in range(agent.concurrency):
                actor = Actor(self, agent, index)
                self.actors.append(actor)
                self._route(agent.channel.name, actor)
                actor.start()

    async def wait_started(self, timeout: float) -> None:
        """Wait until every actor reached its first ``async for`` (group_by calls done)."""

        async def all_idle() -> None:
            # An actor's input may change while we wait (group_by swaps it), so look again.
            while busy := [a for a in self.actors if not a.input.idle]:
                await asyncio.gather(*(a.input.wait_idle() for a in busy))

        try:
            await asyncio.wait_for(all_idle(), timeout)
        except TimeoutError:
            stuck = [a.name for a in self.actors if not a.input.idle]
            raise RuntimeError(
                f"agents {stuck} did not start iterating their stream within {timeout:.0f}s"
            ) from None
        self.raise_errors_at_start()

    def raise_errors_at_start(self) -> None:
        for actor in self.actors:
            if actor.error is not None:
                raise RuntimeError(f"agent {actor.name} failed at start: {actor.error!r}") from (
                    actor.error
                )

    def regroup(
        self,
        actor: Actor,
        stream: Stream,
        key: Callable[[Any], Any],
        *,
        name: str | None,
        partitions: int | None,
    ) -> Stream:
        label = name or getattr(key, "__name__", None)
        if not label or label == "<lambda>":
            raise ValueError("group_by(key) with a lambda needs name=...")
        agent = actor.agent
        topic_name = f"{self.app.id}-{agent.short_name}-{label}-repartition"
        source = agent.channel
        target = self.app.topics.get(topic_name) or self.app.topic(
            topic_name,
            key_serializer="json",
            value_serializer=source.value_codec,
            partitions=partitions,
            internal=True,
        )
        if (source.name, topic_name) not in self._forwarder_keys:
            self._forwarder_keys.add((source.name, topic_name))
            self.forwarders.setdefault(source.name, []).append(Forwarder(key, target, source))
            self.repartition_sources[topic_name] = source.name
        # The actor stops receiving the source topic and reads the repartition topic instead.
        by_agent = self.routes.get(source.name, {})
        actors = by_agent.get(agent.short_name, [])
        if actor in actors:
            actors.remove(actor)
            if not actors:
                by_agent.pop(agent.short_name)
            if not by_agent:
                self.routes.pop(source.name, None)
        regrouped = Stream(actor, topic_name)
        actor.input = regrouped
        stream.mark_idle()  # the source stream is fed no more: nothing will ever be pending
        self._route(topic_name, actor)
        return regrouped

    def _route(self, topic: str, actor: Actor) -> None:
        actors = self.routes.setdefault(topic, {}).setdefault(actor.agent.short_name, [])
        actors.append(actor)
        actors.sort(key=lambda a: a.index)

    def source_topics(self) -> set[str]:
        return set(self.routes) | set(self.forwarders)

    def actor_lists(self, topic: str) -> list[list[Actor]]:
        """For each agent reading ``topic``, its actors (pick ``[partition % len]``)."""
        return list(self.routes.get(topic, {}).values())

    def failed(self) -> Iterator[Actor]:
        return (a for a in self.actors if a.error is not None)

    async def wait_idle(self) -> None:
        busy = [a.input.wait_idle() for a in self.actors if not a.input.idle]
        if busy:
            await asyncio.gather(*busy)

    def clear_inboxes(self) -> None:
        for actor in self.actors:
            actor.input.clear()

    async def restart(self) -> None:
        """Start every actor afresh (after an abort: local variables may hold aborted work)."""
        await self.stop()
        self.routes.clear()
        self.actors.clear()
        self.start()
        await self.wait_started(timeout=30.0)

    async def stop(self) -> None:
        await asyncio.gather(*(a.cancel() for a in self.actors))
