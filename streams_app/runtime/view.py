"""What other packages read of a running worker: a narrow, read-only view.

The worker's web server (``runtime/web``), the test harness (``testing/driver.py``), the CLI
and the benchmarks watch a worker: is it started, ready, what does it own, what did it commit.
They read it through :class:`WorkerView` (which ``runtime.worker.Worker`` implements), never
through the worker's modules: what start made is :attr:`WorkerView.parts`, None until the worker
has started (or after a start that failed part-way), so a reader asks once, not per
collaborator.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.faust_settings import AppSettings
    from streams_app.runtime.measured_commit import MeasuredCommitter
    from streams_app.runtime.metrics import WorkerMetrics
    from streams_app.runtime.producer import StreamsProducer
    from streams_app.runtime.punctuator import Punctuator
    from streams_app.runtime.reconnect import Reconnect
    from streams_app.runtime.replicas import Replicas
    from streams_app.runtime.task_manager import TaskManager
    from streams_app.runtime.topic_watch import TopicWatch
    from streams_app.runtime.watchdog import Watchdog
    from streams_app.state.base import Store
    from streams_app.state.budget import StateMemory
    from streams_app.state.directory import StateDirectory
    from streams_app.topology.contract import Runtime
    from streams_app.topology.plan import TopologyPlan
    from streams_app.transport.base import ConsumerClient, Transport


class StartedView(Protocol):
    """What a started worker's collaborators are (read them, do not drive them)."""

    @property
    def plan(self) -> TopologyPlan: ...

    @property
    def tasks(self) -> TaskManager: ...

    @property
    def consumer(self) -> ConsumerClient: ...

    @property
    def producer(self) -> StreamsProducer: ...

    @property
    def committer(self) -> MeasuredCommitter: ...

    @property
    def replicas(self) -> Replicas: ...

    @property
    def directory(self) -> StateDirectory: ...


class WorkerView(Protocol):
    """A worker, as its web server, the test harness, the CLI and the benchmarks see it."""

    @property
    def app(self) -> App: ...

    @property
    def conf(self) -> AppSettings: ...

    @property
    def transport(self) -> Transport: ...

    @property
    def runtime(self) -> Runtime:
        """What topology code calls (the web server runs app pages with it)."""
        ...

    @property
    def started(self) -> asyncio.Event: ...

    @property
    def stopped(self) -> asyncio.Event: ...

    @property
    def stop_requested(self) -> bool: ...

    @property
    def error(self) -> BaseException | None: ...

    @property
    def parts(self) -> StartedView | None:
        """What start made; None until then (or after a start that failed part-way)."""
        ...

    @property
    def plan(self) -> TopologyPlan | None: ...

    @property
    def replicas(self) -> Replicas | None: ...

    @property
    def stores(self) -> Mapping[str, Store]: ...

    @property
    def metrics(self) -> WorkerMetrics: ...

    @property
    def memory(self) -> StateMemory: ...

    @property
    def punctuator(self) -> Punctuator: ...

    @property
    def records_processed(self) -> int: ...

    @property
    def transactions_committed(self) -> int: ...

    @property
    def web_url(self) -> str | None: ...

    @property
    def timer_due(self) -> Mapping[str, float]:
        """Timer name -> when it is next due (the clock's monotonic seconds)."""
        ...

    # What /ready, /health and /metrics read of the worker's safeguards (runtime/health.py).

    @property
    def watchdog(self) -> Watchdog:
        """The processing timeout: which agents are busy and for how long, timeouts so far."""
        ...

    @property
    def reconnect(self) -> Reconnect:
        """Whether the producer is being started again through an outage, and since when."""
        ...

    @property
    def topic_watch(self) -> TopicWatch | None:
        """Which input topics are missing, and since when (None until started)."""
        ...

    def agents_idle(self) -> bool:
        """Every agent waits for input (none has a record in hand)."""
        ...
