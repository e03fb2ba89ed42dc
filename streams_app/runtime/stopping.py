"""A stop that ends in bounded time, whatever an agent or the cluster is doing.

A graceful stop (SIGTERM, ``Worker.request_stop``) lets the loop finish the batch in progress
and commit it. An agent that never finishes (issue 35, item 2) used to keep the worker from
ever stopping, and a broker that is away made closing the clients hang. So:

1. **The loop** gets ``shutdown_timeout`` seconds from the stop request to end by itself. Then
   it is cancelled: the agents are cancelled with it, and the shutdown aborts the open
   transaction (nothing of the batch is committed; it is processed again after the restart).
2. **The shutdown** (final commit or abort, closing agents, timers, services and clients) gets
   ``shutdown_timeout`` seconds too. Then it is cancelled, and what is local is closed anyway:
   the tables' stores, the state directory's lock, the web server. Whatever the broker did not
   get is uncommitted, and ``read_committed`` readers never see it.

So a worker stops within two ``shutdown_timeout`` (20 s by default) plus a few seconds for
agents that take their cancellation slowly (``streams_app.aio.cancel_and_wait``). The CLI adds a
hard bound for an agent that blocks the event loop itself (``cli/worker.py``).

A condition found outside the loop that must end the worker (a missing input topic, a deleted
changelog: ``runtime/topic_watch.py``) stops it the same way, with :meth:`StopControl.fail`: the
error is raised from ``Worker.run`` once the loop has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

from streams_app.aio import cancel_and_wait

log = logging.getLogger(__name__)


class StopControl:
    def __init__(self, stop: asyncio.Event, timeout: float) -> None:
        self._stop = stop
        self.timeout = timeout
        #: Why the worker must stop (raised by :meth:`raise_failure`), None: a plain stop.
        self.failure: BaseException | None = None
        #: The loop did not end within the timeout and was cancelled.
        self.cancelled_loop = False
        self._background: dict[str, asyncio.Task[Any]] = {}

    def fail(self, error: BaseException) -> None:
        """Stop the worker with ``error`` (the first one wins)."""
        if self.failure is None:
            self.failure = error
        self._stop.set()

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    def background(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` while the worker runs; it is cancelled when the worker shuts down. An
        error it raises stops the worker."""
        task = asyncio.ensure_future(coro)
        task.add_done_callback(self._ended)
        self._background[name] = task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            self.fail(error)

    async def run_loop(self, loop: Coroutine[Any, Any, None]) -> None:
        """Run the worker's loop; once a stop is requested, give it ``timeout`` seconds to end,
        then cancel it. Raises what the loop raised."""
        task = asyncio.ensure_future(loop)
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                done, _ = await asyncio.wait({task}, timeout=self.timeout)
                if not done:
                    self.cancelled_loop = True
                    log.warning(
                        "the batch in progress did not finish within shutdown_timeout (%gs) of "
                        "the stop (an agent still busy?): cancelling it; its transaction is "
                        "aborted, and it is processed again after a restart",
                        self.timeout,
                    )
                    await cancel_and_wait({"the worker's loop": task})
                    return
            task.result()
        finally:
            stopping.cancel()
            if not task.done():  # we were cancelled ourselves: so is the loop
                await cancel_and_wait({"the worker's loop": task})

    async def shutdown(
        self,
        shutdown: Coroutine[Any, Any, None],
        close_local: Callable[[], Awaitable[None]],
        *,
        failed: bool = False,
    ) -> None:
        """Run the worker's shutdown within ``timeout``; if it does not end in time, cancel it
        and close what is local (``close_local``) anyway. ``failed``: the worker is stopping
        on an error, which an error of the shutdown (a full disk fails both) must not hide."""
        if self._background:
            await cancel_and_wait(self._background)
            self._background.clear()
        task = asyncio.ensure_future(shutdown)
        done, _ = await asyncio.wait({task}, timeout=self.timeout)
        if done:
            try:
                task.result()
            except Exception as exc:
                if not failed:
                    raise
                # The worker's own error says what is wrong (a full disk fails both).
                log.info("closing the worker after its error failed too: %s", exc)
                await close_local()
            return
        log.warning(
            "closing the worker took longer than shutdown_timeout (%gs; the broker away?): "
            "leaving its connections, closing its local state",
            self.timeout,
        )
        await cancel_and_wait({"the worker's shutdown": task})
        await close_local()


class _Closeable(Protocol):
    def close(self) -> None: ...


class _Stoppable(Protocol):
    async def stop(self) -> None: ...


async def close_local(
    stores: Iterable[_Closeable], directory: _Closeable | None, web: _Stoppable | None
) -> None:
    """Close the stores (their writes reach RocksDB, or are replayed from the changelog at the
    next start), release the state directory, stop the web server; each whatever the others
    do."""
    for store in stores:
        try:
            store.close()
        except Exception as exc:  # only on the way out after an error, which says why
            log.info("closing a store failed: %s", exc)
    if directory is not None:
        directory.close()
    if web is not None:
        with contextlib.suppress(Exception):
            await web.stop()
