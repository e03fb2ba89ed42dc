"""A :class:`~streams_app.runtime.commit.Committer` that times its commits and counts failures.

Kept out of the commit protocol itself: ``commit.py`` says what a commit does, this says how
long it took and why it failed, for ``/metrics`` (``streams_app_commit_seconds``,
``streams_app_commit_failures_total{cause}``). One ``perf_counter`` pair per commit (ten a
second under exactly-once) costs nothing next to the commit's round trips.
"""

from __future__ import annotations

import time
from typing import Any

from streams_app.runtime.commit import Committer, Meanwhile
from streams_app.runtime.metrics import WorkerMetrics


class MeasuredCommitter(Committer):
    def __init__(self, *args: Any, metrics: WorkerMetrics, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.metrics = metrics

    async def commit(self, meanwhile: Meanwhile | None = None) -> bool:
        started = time.perf_counter()
        try:
            committed = await super().commit(meanwhile)
        except Exception as exc:
            self.metrics.commit_failed(exc)
            raise
        if committed:
            self.metrics.commit_seconds.observe(time.perf_counter() - started)
        return committed
