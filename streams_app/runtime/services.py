"""Tasks and services: started with the worker, beside its agents, outside any transaction.

``@app.task`` functions start once the worker has subscribed (``on_leader`` ones once this
worker first becomes the leader); a task that raises is logged and not restarted, and the
worker goes on. ``app.service(...)`` objects (``mode.Service`` classes or instances, or
anything with async ``start``/``stop``) start before the worker subscribes and stop after it.
What tasks and services send goes through a plain idempotent producer (at-least-once).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import TYPE_CHECKING, Any

from streams_app.aio import cancel_and_wait
from streams_app.app import background

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.background import Task

log = logging.getLogger(__name__)


class Services:
    def __init__(self, app: App) -> None:
        self.app = app
        self.tasks: dict[str, asyncio.Task[Any]] = {}
        self.started_services: list[Any] = []
        self.failed: dict[str, BaseException] = {}

    async def start_services(self) -> None:
        for declared in self.app.services:
            service = declared() if inspect.isclass(declared) else declared
            start = getattr(service, "start", None)
            if start is None:
                raise TypeError(f"app.service({declared!r}): it has no start() method")
            result = start()
            if inspect.isawaitable(result):
                await result
            self.started_services.append(service)

    def start_tasks(self, *, leader: bool) -> None:
        for task in self.app.tasks:
            if task.name in self.tasks or (task.on_leader and not leader):
                continue
            self.tasks[task.name] = asyncio.ensure_future(self._run(task))

    async def _run(self, task: Task) -> None:
        try:
            await background.call(task.fun, self.app)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed[task.name] = exc
            log.exception("task %s failed (it is not restarted)", task.name)

    async def stop(self) -> None:
        tasks, self.tasks = self.tasks, {}
        await cancel_and_wait({f"task {name}": task for name, task in tasks.items()})
        for service in reversed(self.started_services):
            stop = getattr(service, "stop", None)
            if stop is None:
                continue
            try:
                result = stop()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("stopping service %r failed", service)
        self.started_services.clear()
