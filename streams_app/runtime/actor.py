"""Actors: the running instances of agents, and where each consumed record goes.

Each agent runs ``concurrency`` actors (``isolated_partitions``: one per partition of its
topic); an actor is one asyncio task running the agent's function over its own
:class:`~streams_app.app.stream.Stream`. A record of partition ``p`` goes to actor
``p % len(actors)``, so per-partition order holds. Agents on an in-process channel get what is
sent to the channel. ``group_by``/``through`` turn an actor's source subscription into a
*forwarder* (the original value bytes, under the new key, to the repartition topic, inside the
transaction) and subscribe the actor to that topic instead.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from streams_app.aio import cancel_and_wait, within
from streams_app.app.stream import SKIP, Processor, Stream
from streams_app.runtime.scope import current_parkable, in_processing
from streams_app.topology.contract import Event, TopicPartitionView, current_event, current_runtime

if TYPE_CHECKING:
    from streams_app.app.agent import Agent
    from streams_app.app.app import App
    from streams_app.app.topic import Topic

log = logging.getLogger(__name__)

SendFn = Callable[..., Awaitable[Any]]
#: Sends an RPC reply for ``event`` (the worker's): ``await reply(event, value)``.
Replier = Callable[[Event, Any], Awaitable[None]]

current_actor: ContextVar[Actor | None] = ContextVar("streams_app_actor", default=None)


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
        in_processing.set(True)
        current_actor.set(self)
        current_parkable.set(self)
        try:
            result: Any = self.agent.fun(self.source)
            if inspect.isasyncgen(result) or (
                hasattr(result, "__aiter__") and not inspect.isawaitable(result)
            ):
                replier = self.runner.replier
                async for value in result:
                    event = current_event.get()
                    if event is not None and event.reply_to and replier is not None:
                        await replier(event, value)
                    await self.agent.deliver_to_sinks(value)
            else:
                await result
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

    # Parkable: an ask() parks whichever stream the actor reads now.
    def park(self) -> None:
        self.input.park()

    def unpark(self) -> None:
        self.input.unpark()

    async def cancel(self) -> None:
        task, self.task = self.task, None
        if task is not None and not task.done():
            await cancel_and_wait({f"agent {self.name}": task})

    def regroup(
        self,
        stream: Stream,
        key: Callable[[Any], Any] | None,
        *,
        name: str | None,
        partitions: int | None,
        topic: Topic | None = None,
    ) -> Stream:
        return self.runner.regroup(self, stream, key, name=name, partitions=partitions, topic=topic)

    def rejoin(self, stream: Stream, how: str, other: Any, options: dict[str, Any]) -> Stream:
        return self.runner.rejoin(self, stream, how, other, options)


class Feeder(Protocol):
    """What the dispatcher hands each record of a topic to, besides the agents, in the
    record's transaction (``current_event`` set) and in its task's timestamp order: a
    ``group_by`` forwarder, a table built from the topic, a join reading it.

    A feeder may also have ``forward_nowait(event) -> Awaitable[None] | None``: the same
    work, done without a coroutine as far as it goes, returning what is left to await (None:
    done). The dispatcher then calls it instead of :meth:`forward`: a coroutine per record
    costs about as much as a join's lookup.

    And ``forward_run(events) -> Awaitable[None] | None``: a run of one partition's records
    at once (``current_event`` set by the feeder, record by record), which the dispatcher
    uses when the feeder is the topic's only one and no agent is busy: a join then sends its
    results a run at a time (``JoinProcessor.run``)."""

    #: Names it in a failure (``group_by:<topic>``, ``table:<name>``, ``join:<name>``).
    label: str

    async def forward(self, event: Event) -> None: ...


class Forwarder:
    """The first half of a ``group_by``/``through``: the stream's processors (``filter``...),
    the new key, and the original value bytes to the target topic."""

    def __init__(
        self,
        key: Callable[[Any], Any] | None,
        target: Topic,
        source: Topic,
        processors: list[Processor],
    ) -> None:
        self.key = key
        self.target = target
        self.source = source
        self.processors = processors
        self.label = f"group_by:{target.name}"

    async def forward(self, event: Event) -> None:
        runtime = current_runtime.get()
        assert runtime is not None
        value = event.value
        for fun in self.processors:
            value = fun(value)
            if inspect.isawaitable(value):
                value = await value
            if value is SKIP:
                return
        new_key = None
        if self.key is not None:
            new_key = self.key(value)
            if inspect.isawaitable(new_key):
                new_key = await new_key
        # The record keeps its bytes (Faust's raw repartition) and its time across the hop (as
        # Kafka Streams' repartition topics do): windows after a group_by see the source's
        # timestamps, not the time of the hop.
        await runtime.forward(self.target, event, key=new_key)


class AgentRunner:
    """Owns every actor of a worker and the topic (or channel) -> actor routing."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.actors: list[Actor] = []
        # topic or channel name -> agent -> its actors (a record of partition p goes to
        # actors[p % len(actors)] of every agent); topic -> forwarders (group_by, through)
        self.routes: dict[str, dict[str, list[Actor]]] = {}
        self.forwarders: dict[str, list[Feeder]] = {}
        self._forwarder_keys: set[tuple[str, str]] = set()
        #: Partition count of each topic, once the topology is planned (isolated_partitions).
        self.partition_counts: dict[str, int] = {}
        self.replier: Replier | None = None
        self._round_robin = itertools.count()

    def start(self) -> None:
        for agent in self.app.agents:
            count = agent.concurrency
            if agent.isolated_partitions:
                count = self.partition_counts.get(agent.channel.name, 1)
            for index in range(count):
                actor = Actor(self, agent, index)
                self.actors.append(actor)
                self._route(agent.channel.name, actor)
                actor.start()

    async def wait_started(self, timeout: float) -> None:
        """Wait until every actor reached its first ``async for`` (group_by calls done)."""

        async def all_settled() -> None:
            # An actor's input may change while we wait (group_by swaps it), so look again.
            while busy := [a for a in self.actors if not a.input.settled]:
                await asyncio.gather(*(a.input.wait_settled() for a in busy))

        try:
            await within(all_settled(), timeout)
        except TimeoutError:
            stuck = [a.name for a in self.actors if not a.input.settled]
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
        key: Callable[[Any], Any] | None,
        *,
        name: str | None,
        partitions: int | None,
        topic: Topic | None = None,
    ) -> Stream:
        agent = actor.agent
        # The app declares the repartition topic (the same one a trace of the agent declared).
        target = self.app.declare_repartition(
            agent, stream.topic, key, name=name, partitions=partitions, topic=topic
        )
        source = self.app.topics[stream.topic]
        if (source.name, target.name) not in self._forwarder_keys:
            self._forwarder_keys.add((source.name, target.name))
            self.forwarders.setdefault(source.name, []).append(
                Forwarder(key, target, source, stream.processors)
            )
        return self._reroute(actor, stream, target.name)

    def rejoin(
        self, actor: Actor, stream: Stream, how: str, other: Any, options: dict[str, Any]
    ) -> Stream:
        """``stream.join(...)`` in an actor: the app declares the join (as a trace of the agent
        did); the actor reads the join's results instead of the topic."""
        joined = self.app.declare_stream_join(actor.agent, stream.topic, how, other, options)
        return self._reroute(actor, stream, joined.name)

    def _reroute(self, actor: Actor, stream: Stream, target: str) -> Stream:
        """The actor stops receiving ``stream``'s topic and reads ``target`` instead."""
        agent = actor.agent
        by_agent = self.routes.get(stream.topic, {})
        actors = by_agent.get(agent.name, [])
        if actor in actors:
            actors.remove(actor)
            if not actors:
                by_agent.pop(agent.name)
            if not by_agent:
                self.routes.pop(stream.topic, None)
        rerouted = Stream(actor, target)
        actor.input = rerouted
        stream.mark_idle()  # the source stream is fed no more: nothing will ever be pending
        self._route(target, actor)
        return rerouted

    def _route(self, topic: str, actor: Actor) -> None:
        actors = self.routes.setdefault(topic, {}).setdefault(actor.agent.name, [])
        actors.append(actor)
        actors.sort(key=lambda a: a.index)

    def actor_lists(self, topic: str) -> list[list[Actor]]:
        """For each agent reading ``topic``, its actors (pick ``[partition % len]``)."""
        routes = self.routes.get(topic)  # called per join result: most have no reader
        return list(routes.values()) if routes else []

    def channel_targets(self, channel: str) -> list[Actor]:
        """One actor of every agent reading ``channel`` (round robin over its instances)."""
        turn = next(self._round_robin)
        return [actors[turn % len(actors)] for actors in self.routes.get(channel, {}).values()]

    def assign(self, partitions: set[tuple[str, int]]) -> None:
        """Tell each actor's streams which partitions reach them (``active_partitions``)."""
        for by_agent in self.routes.values():
            for actors in by_agent.values():
                for actor in actors:
                    topic = actor.input.topic
                    mine = {
                        TopicPartitionView(t, p)
                        for t, p in partitions
                        if t == topic and p % len(actors) == actor.index % len(actors)
                    }
                    actor.input.active_partitions.clear()
                    actor.input.active_partitions.update(mine)
                    if actor.source is not actor.input:
                        actor.source.active_partitions.clear()
                        actor.source.active_partitions.update(mine)

    def failed(self) -> Iterator[Actor]:
        return (a for a in self.actors if a.error is not None)

    async def wait_settled(self) -> None:
        """Until every actor waits for input, or is parked (an RPC), or holds a ``take``."""
        busy = [a.input.wait_settled() for a in self.actors if not a.input.settled]
        if len(busy) == 1:
            await busy[0]  # the usual case: no task for gather to wrap it in
        elif busy:
            await asyncio.gather(*busy)

    wait_idle = wait_settled

    def all_idle(self) -> bool:
        return all(a.task is None or a.task.done() or a.input.idle for a in self.actors)

    def holding(self) -> list[Actor]:
        return [a for a in self.actors if a.input.holding]

    def flush_held(self) -> bool:
        flushed = False
        for actor in self.actors:
            flushed |= actor.input.request_flush()
        return flushed

    def any_parked(self) -> bool:
        return any(a.input.parked for a in self.actors)

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
