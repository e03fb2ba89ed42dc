"""Outages of any length: the worker's producer is started again until the cluster answers.

A worker never recreates its consumer, but it recreates its producer after every fatal
producer error and every failed transaction (``runtime/commit.py``). During an outage that
start cannot bootstrap, and used to end the worker with :class:`BrokerUnavailable` some 30 s
into the outage (issue 35, item 1). Here it is retried with a bounded backoff for as long as it
takes: the worker is not ready meanwhile (``runtime/health.py`` reads :attr:`since`), and
resumes by itself when the cluster is back, from its committed offsets, exactly once.

Only a worker that has reached the cluster once retries: at start, a broker that does not
answer is far more often a wrong address than an outage, and the worker stops naming it.

The operator sees the outage as today: one warning when the broker stops answering and one line
when it answers again (``streams_app/kafka/logs.py``); this module adds INFO lines only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from streams_app.errors import BrokerUnavailable

log = logging.getLogger(__name__)

#: The first wait between two attempts, and the longest (doubling in between).
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 10.0


class Reconnect:
    """Runs a client's start until it succeeds, as long as the broker is only unreachable."""

    def __init__(
        self, *, first_backoff: float = FIRST_BACKOFF_S, max_backoff: float = MAX_BACKOFF_S
    ) -> None:
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        #: ``time.monotonic()`` since which a start has been failing (None: not retrying).
        self.since: float | None = None
        #: Which client is waiting, and for which address (for /ready).
        self.waiting: str | None = None
        #: Starts that failed because the cluster was unreachable, all outages together.
        self.failures = 0

    async def start(self, what: str, start: Callable[[], Awaitable[None]]) -> None:
        """``await start()`` until it does not raise :class:`BrokerUnavailable`."""
        delay = self.first_backoff
        began: float | None = None
        while True:
            try:
                await start()
            except BrokerUnavailable as exc:
                self.failures += 1
                if began is None:
                    began = self.since = time.monotonic()
                    self.waiting = f"{what} cannot reach the cluster at {exc.address}"
                    log.info(
                        "%s cannot reach the cluster at %s: retrying until it answers (the "
                        "worker is not ready meanwhile)",
                        what,
                        exc.address,
                    )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff)
                continue
            break
        if began is not None:
            self.since = self.waiting = None
            log.info("%s reached the cluster again after %.0f s", what, time.monotonic() - began)
