"""Where running code stands with the worker's transaction (runtime-private context).

Agents and timers run *inside* processing: what they send joins the worker's transaction, and
the worker commits only once they have finished (or it aborts them). Everything else, tasks,
services, signal receivers, pages, commands, runs *outside*: its sends go through a plain
idempotent producer, so an abort of processing never takes them back.

:data:`in_processing` tells the two apart; :data:`current_parkable` is what an RPC ``ask``
parks while it waits for the reply (the agent's stream, or the running timer), so the worker
keeps fetching and processing meanwhile instead of waiting for it.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol


class Parkable(Protocol):
    def park(self) -> None: ...

    def unpark(self) -> None: ...


in_processing: ContextVar[bool] = ContextVar("streams_app_in_processing", default=False)
current_parkable: ContextVar[Parkable | None] = ContextVar("streams_app_parkable", default=None)
