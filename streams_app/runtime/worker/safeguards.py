"""Safeguards around a worker's run: what keeps it dependable when an agent, the cluster, a topic
or the disk misbehaves (issue 35). ``root.py`` runs the lifecycle through :meth:`Safeguards.run`;
each safeguard is a runtime module of its own, held here:

- a stop that ends in bounded time (``runtime/stopping.py``): once a stop is requested, the loop
  gets ``shutdown_timeout`` to end, and so does the shutdown, after which what is local (stores,
  the state directory's lock, the web server) is closed anyway;
- a condition found outside the loop that must end the worker (:meth:`Safeguards.fail`), raised
  from ``Worker.run`` once the loop has ended;
- the processing timeout (``runtime/watchdog.py``): ``batch.py`` waits for the agents through
  :attr:`Safeguards.watchdog`, and agents still busy past it fail their records;
- outages waited out (``runtime/reconnect.py``): the producer's restarts wait for the cluster;
- input topics and changelogs deleted under the running worker (``runtime/topic_watch.py``);
- a full, read-only or forbidden state directory named in one line (``state/disk.py``).

``/ready`` and ``/health`` read the watchdog, the reconnect and the topic watch
(``runtime/health.py``, through ``runtime/view.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from streams_app.runtime.reconnect import Reconnect
from streams_app.runtime.stopping import StopControl
from streams_app.runtime.topic_watch import TopicWatch
from streams_app.runtime.watchdog import Watchdog
from streams_app.settings import Settings
from streams_app.state.disk import disk_error
from streams_app.topology.plan import TopologyPlan
from streams_app.transport.base import AdminClient


class Safeguards:
    def __init__(self, conf: Settings, stop: asyncio.Event) -> None:
        self._conf = conf
        #: Restarts of the producer that wait out an outage.
        self.reconnect = Reconnect()
        self.watchdog = Watchdog(
            conf.effective_processing_timeout,
            conf.transaction_timeout if conf.exactly_once else None,
        )
        self.stopping = StopControl(stop, conf.shutdown_timeout)
        #: Watches the input topics and changelogs (None until the worker has started).
        self.topic_watch: TopicWatch | None = None

    async def run(
        self,
        start: Callable[[], Awaitable[None]],
        loop: Callable[[], Coroutine[Any, Any, None]],
        shutdown: Callable[[], Coroutine[Any, Any, None]],
        close_local: Callable[[], Awaitable[None]],
        failed: Callable[[BaseException], None],
    ) -> None:
        """Start, run the loop until a stop (bounded once one is requested), then shut down
        (bounded, with ``close_local`` when the shutdown does not end in time or fails after
        an error). ``failed`` is told what the worker fails with before the shutdown runs (so
        that it aborts rather than commits); a disk error is replaced by its one line."""
        error: BaseException | None = None
        try:
            await start()
            await self.stopping.run_loop(loop())
            self.stopping.raise_failure()
        except BaseException as exc:
            conf = self._conf
            error = disk_error(exc, conf.state_dir / conf.id) or exc
            failed(error)
            if error is not exc:
                raise error from exc
            raise
        finally:
            await self.stopping.shutdown(shutdown(), close_local, failed=error is not None)

    def fail(self, error: BaseException) -> None:
        """Stop, then raise ``error`` from the run (a condition found outside the loop)."""
        self.stopping.fail(error)

    def watch_topics(self, admin: AdminClient, plan: TopologyPlan) -> None:
        """Watch the input topics and changelogs of ``plan`` while the worker runs."""
        self.topic_watch = TopicWatch(
            admin,
            plan.input_topics,
            plan.changelog_topics,
            missing_timeout=self._conf.missing_topic_timeout,
            fail=self.fail,
        )
        self.stopping.background("topic watch", self.topic_watch.run())
