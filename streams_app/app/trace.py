"""Tracing agents: what each does before its first ``async for``, without a worker.

A Faust-style agent declares its ``group_by``/``through`` hops in its body, before it iterates
its stream (``async for view in stream.group_by(page_of)``). A description of the topology
needs those hops (their repartition topics are inputs of their own), so :func:`trace_agents`
runs each agent's function on a :class:`TracingStream` up to its first read, and no further:
the read raises :class:`StopTrace`, which ends the function there. ``group_by`` and ``through``
on the way declare their repartition topics through :meth:`App.declare_repartition`, exactly as
they do when a worker runs the agent.

No event loop is needed: the function is stepped once (``send(None)``). An agent that awaits
something before its first ``async for`` (a sleep, a send) cannot be followed; its trace note
says so, and a worker finds its hops when it runs it (the worker's description is made after
its agents reached their first ``async for``).
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streams_app.app.channel import Channel
from streams_app.app.stream import Stream

if TYPE_CHECKING:
    from streams_app.app.agent import Agent
    from streams_app.app.app import App
    from streams_app.app.topic import Topic


class StopTrace(BaseException):
    """Raised by a traced stream's first read: the agent got to its first ``async for``.

    A BaseException, so that the agent's own ``except Exception`` does not catch it."""


class TracingStream(Stream):
    """A stream that ends the agent at its first read."""

    def _waiting(self) -> Any:
        raise StopTrace

    async def _next_event(self, *, holding: bool = False, deadline: float | None = None) -> Any:
        raise StopTrace


class _Tracer:
    """The tracing stream's owner: ``group_by``/``through`` declare, as a worker's actor does."""

    def __init__(self, app: App, agent: Agent) -> None:
        self.app = app
        self.agent = agent

    def regroup(
        self,
        stream: Stream,
        key: Callable[[Any], Any] | None,
        *,
        name: str | None,
        partitions: int | None,
        topic: Topic | None = None,
    ) -> Stream:
        target = self.app.declare_repartition(
            self.agent, stream.topic, key, name=name, partitions=partitions, topic=topic
        )
        return TracingStream(self, target.name)


def trace_agents(app: App) -> dict[str, str | None]:
    """Run each agent up to its first ``async for``; agent name -> None when the trace got
    there (or the agent returned first), else why it could not."""
    notes: dict[str, str | None] = {}
    for agent in app.agents:
        stream = TracingStream(_Tracer(app, agent), agent.channel.name)
        # A copy of the context: whatever the agent sets on the way stays there.
        notes[agent.name] = contextvars.copy_context().run(_step, agent, stream)
    return notes


def _step(agent: Agent, stream: Stream) -> str | None:
    try:
        result: Any = agent.fun(stream)
    except Exception as exc:
        return f"calling it raised {type(exc).__name__}: {exc}"
    if inspect.isasyncgen(result) or (
        hasattr(result, "__anext__") and not inspect.isawaitable(result)
    ):
        awaitable = result.__anext__()
    elif inspect.iscoroutine(result):
        awaitable = result
    else:
        return "it is not an async function or an async generator"
    try:
        awaitable.send(None)
    except StopTrace:
        return None
    except (StopIteration, StopAsyncIteration):
        return None  # it returned without reading its stream
    except Exception as exc:
        if isinstance(agent.channel, Channel) and isinstance(exc, RuntimeError):
            return f"{exc}"
        return f"it raised {type(exc).__name__} before its first `async for`: {exc}"
    awaitable.close()
    return (
        "it awaits something before its first `async for`: its group_by topics are known once "
        "a worker runs it"
    )
