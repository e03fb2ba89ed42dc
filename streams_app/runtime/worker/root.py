"""Worker: one process running a topology with one consumer, one producer and many tasks.

This module is the composition root and the lifecycle: it wires the worker's concerns together,
starts them in order, and stops them in order. The concerns are modules of their own:

- ``loop.py``: poll, process, run due timers, commit when due (and restore new tasks first);
- ``batch.py``: a fetched batch handed out in order, the agents waited for, retries alone;
- ``records.py``: one partition's records decoded into events for the agents;
- ``flow.py``: which partitions are paused and why, with the one reset;
- ``failures.py``: what an agent error, a failed transaction or a lost task undoes;
- ``collector.py``: every record sent, on its way to the right producer;
- ``facade.py``: the worker as topology code sees it (``contract.Runtime``);
- ``rebalance.py``: the consumer's rebalance callbacks;
- ``started.py``: what start makes, held together;
- ``safeguards.py``: what keeps the run dependable (a bounded stop, the processing timeout,
  outages, missing topics, disk errors).

The loop is deliberately plain: fetch a batch, hand each record to the agents that consume its
topic, wait until they have processed all of it, and commit when due. Everything that changes
ownership (rebalance callbacks) or undoes work (aborts) happens under one processing lock, so a
commit, a revocation and an abort never interleave.

Two things may keep an agent busy across batches without blocking the loop: an RPC ``ask``
waiting for its reply (the agent is *parked*, and the reply may come from this very worker), and
``take()`` holding values. The loop then keeps fetching and processing, and commits only once
every agent and timer is idle again (holding streams are asked to flush first).

What other packages read of a worker (``runtime/web``, the test driver, the CLI, the benchmarks)
is :class:`~streams_app.runtime.view.WorkerView`, which :class:`Worker` implements.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams_app.runtime import guarantees
from streams_app.runtime.actor import AgentRunner
from streams_app.runtime.broker_limits import (
    TOPIC_LIMIT_KEYS,
    check_broker_limits,
    check_topic_limits,
)
from streams_app.runtime.clock import Clock, SystemClock
from streams_app.runtime.dead_letters import DeadLetters
from streams_app.runtime.errors_policy import ErrorPolicy
from streams_app.runtime.gc_tuning import young_generation
from streams_app.runtime.global_tables import GlobalTables
from streams_app.runtime.joins.runtime import JoinRuntime
from streams_app.runtime.lag import running_lag
from streams_app.runtime.left_open_file import LEFT_OPEN_FILE, LeftOpenFile
from streams_app.runtime.measured_commit import MeasuredCommitter
from streams_app.runtime.metrics import WorkerMetrics
from streams_app.runtime.pacing import FetchPacer
from streams_app.runtime.partition_group import PartitionGroup
from streams_app.runtime.plain_producer import PlainProducer
from streams_app.runtime.producer import StreamsProducer
from streams_app.runtime.progress import CatchUpMonitor, RestoreProgress, interactive_stream
from streams_app.runtime.provision import provision
from streams_app.runtime.punctuator import Punctuator
from streams_app.runtime.reconnect import Reconnect
from streams_app.runtime.replicas import Replicas
from streams_app.runtime.rpc import RpcClient
from streams_app.runtime.services import Services
from streams_app.runtime.source_changelogs import (
    RESTORE_KEYS,
    check_source_changelogs,
    restoring_topics,
)
from streams_app.runtime.state_memory import log_state_memory
from streams_app.runtime.stopping import close_local
from streams_app.runtime.task import Task
from streams_app.runtime.task_manager import TaskManager
from streams_app.runtime.timers import TimerScheduler
from streams_app.runtime.topic_watch import TopicWatch
from streams_app.runtime.watchdog import Watchdog
from streams_app.runtime.web import WebServer
from streams_app.runtime.worker.collector import OutsideClients, RecordCollector
from streams_app.runtime.worker.facade import WorkerRuntime
from streams_app.runtime.worker.rebalance import RebalanceListener
from streams_app.runtime.worker.safeguards import Safeguards
from streams_app.runtime.worker.started import (
    Started,
    group_assignor,
    input_consumer,
    owns_changelog_partition,
    wire,
)
from streams_app.state.base import Store
from streams_app.state.budget import StateMemory
from streams_app.state.directory import StateDirectory
from streams_app.state.factory import open_store, rocksdb_options
from streams_app.topology.contract import TableLike, current_runtime
from streams_app.topology.description import TopologyDescription
from streams_app.topology.plan import TopologyPlan
from streams_app.transport.base import AdminClient, ConsumerClient, RecordLike, TopicPartition

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.faust_settings import AppSettings
    from streams_app.transport.base import Transport

log = logging.getLogger(__name__)


class Worker:
    """Runs an :class:`~streams_app.app.app.App` until stopped.

    ``overrides`` replace settings for this worker only (the CLI's ``--state-dir``, tests).
    """

    def __init__(
        self,
        app: App,
        *,
        transport: Transport | None = None,
        clock: Clock | None = None,
        **overrides: Any,
    ) -> None:
        self.app = app
        conf = app.conf.replace(**overrides) if overrides else app.conf
        conf.validate()
        self.conf: AppSettings = conf
        self.transport: Transport = transport or app.transport()
        self.clock: Clock = clock or SystemClock()
        self.clients = OutsideClients(self.transport, conf)
        self.collector = RecordCollector(conf, self.clients)
        #: What topology code calls while this worker runs (``current_runtime``).
        self.runtime = WorkerRuntime(self, self.collector)
        self.runner = AgentRunner(app)
        self.runner.replier = self.collector.reply
        self.policy = ErrorPolicy(conf)
        self.timers = TimerScheduler(
            app, self.clock, is_leader=self.is_leader, leader_scope=self._leader_task
        )
        self.punctuator = Punctuator(app, self.collector.send, self._dead_letter)
        self.services = Services(app)
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self.safeguards = Safeguards(conf, self._stop_requested)
        self.watchdog: Watchdog = self.safeguards.watchdog
        self.reconnect: Reconnect = self.safeguards.reconnect
        #: The processing lock: a batch, a commit, a revocation, a restore and an abort never
        #: interleave.
        self.lock = asyncio.Lock()
        #: Partitions are being reassigned (between revocation and the end of restore).
        self.rebalancing = False
        #: Sizes each poll to the commit deadline; idle, a poll waits up to one interval
        #: (5-100 ms).
        self.pacer = FetchPacer(
            conf.max_poll_records, max(5, min(100, int(conf.effective_commit_interval * 1000)))
        )
        self.error: BaseException | None = None
        #: The state memory budget: the read cache shared by every table and partition, and the
        #: uncommitted-writes budget. Their counters are the worker's state metrics.
        self.memory = StateMemory(conf.state_cache_max_bytes, conf.state_uncommitted_max_bytes)
        #: Table name -> its store (opened at start).
        self.stores: dict[str, Store] = {}
        #: What /metrics exports (plain counters; see runtime.metrics).
        self.metrics = WorkerMetrics()
        #: The web server (None: web_enabled is off, or not started yet).
        self.web: WebServer | None = None
        #: Tables built from topics and the join processors (made at start).
        self.joins: JoinRuntime | None = None
        self._parts: Started | None = None
        self._catch_up: asyncio.Task[None] | None = None

    # -- what start made ---------------------------------------------------------------------

    @property
    def parts(self) -> Started | None:
        """What start made (None before, or after a start that failed part-way)."""
        return self._parts

    def require_parts(self) -> Started:
        if self._parts is None:
            raise RuntimeError(f"worker {self.conf.id} is not started")
        return self._parts

    @property
    def consumer(self) -> ConsumerClient:
        return self.require_parts().consumer

    @property
    def producer(self) -> StreamsProducer:
        return self.require_parts().producer

    @property
    def tasks(self) -> TaskManager:
        return self.require_parts().tasks

    @property
    def committer(self) -> MeasuredCommitter:
        return self.require_parts().committer

    @property
    def dead_letters(self) -> DeadLetters:
        return self.require_parts().dead_letters

    @property
    def admin(self) -> AdminClient:
        return self.require_parts().admin

    @property
    def plan(self) -> TopologyPlan | None:
        return self._parts.plan if self._parts is not None else None

    @property
    def description(self) -> TopologyDescription | None:
        return self._parts.description if self._parts is not None else None

    @property
    def replicas(self) -> Replicas | None:
        """Standbys, warm-ups, fencing of departed members, probing (runtime/replicas.py)."""
        return self._parts.replicas if self._parts is not None else None

    @property
    def directory(self) -> StateDirectory | None:
        return self._parts.directory if self._parts is not None else None

    @property
    def dead_lettered(self) -> int:
        """Records committed to dead-letter topics so far."""
        return self._parts.dead_letters.committed_count if self._parts is not None else 0

    @property
    def records_processed(self) -> int:
        return self._parts.batch.records_processed if self._parts is not None else 0

    @property
    def processed_during_commit(self) -> int:
        """Of ``records_processed``, the ones processed while a commit was in flight."""
        return self._parts.batch.processed_during_commit if self._parts is not None else 0

    @property
    def transactions_committed(self) -> int:
        return self._parts.producer.transactions_committed if self._parts is not None else 0

    @property
    def plain(self) -> PlainProducer:
        return self.clients.plain

    @property
    def rpc(self) -> RpcClient:
        return self.clients.rpc

    @property
    def timer_due(self) -> dict[str, float]:
        """Timer name -> when it is next due (the test harness steps time to these)."""
        return self.timers.due

    @property
    def late_records(self) -> int:
        """Records a windowed table refused because their windows had closed."""
        return self.punctuator.late_records

    @property
    def web_url(self) -> str | None:
        """``http://host:port`` of this worker's web server (None when it has none)."""
        return self.web.url if self.web is not None else None

    @property
    def state_path(self) -> Path | None:
        return self.directory.path if self.directory else None

    @property
    def topic_watch(self) -> TopicWatch | None:
        return self.safeguards.topic_watch

    def agents_idle(self) -> bool:
        """Every agent waits for input (none has a record in hand, parked or not)."""
        return self.runner.all_idle()

    def table_items(self, table: TableLike) -> Iterator[tuple[Any, Any]]:
        """Committed items of every partition of ``table`` this worker holds."""
        return self.runtime.table_items(table)

    # -- lifecycle ------------------------------------------------------------------------

    async def run(self) -> None:
        """Start, process until :meth:`request_stop`, then stop cleanly (``safeguards.py``)."""
        token = current_runtime.set(self.runtime)
        try:
            with young_generation(self.conf.gc_young_threshold):
                await self.safeguards.run(
                    self.start,
                    lambda: self.require_parts().loop.run(),
                    self._shutdown,
                    lambda: close_local(self.stores.values(), self.directory, self.web),
                    self._failed,
                )
        finally:
            current_runtime.reset(token)
            self.stopped.set()

    def _failed(self, error: BaseException) -> None:
        self.error = error

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested.is_set()

    def request_stop(self) -> None:
        """Graceful stop: finish the batch, commit, close (SIGTERM does this), in bounded time."""
        self._stop_requested.set()

    def fail(self, error: BaseException) -> None:
        """Stop, then raise ``error`` from :meth:`run` (a condition found outside the loop)."""
        self.safeguards.fail(error)

    def request_commit(self) -> None:
        """Commit at the next quiescent point, whether or not ``commit_interval`` is up.

        Like Kafka Streams' ``ProcessorContext.commit()``. The test harness uses it to commit
        without moving its manual clock (which would also fire timers)."""
        if self._parts is not None:
            self._parts.committer.requested = True

    async def start(self) -> None:
        conf = self.conf
        log.info(
            "starting worker for %s (%s) on %s",
            conf.id,
            conf.processing_guarantee,
            self.transport.address,
        )
        # What a start that fails part-way closes again (last opened, first closed); once
        # started, _shutdown closes everything in its own order.
        opened = contextlib.AsyncExitStack()
        try:
            self._parts = await self._start_parts(opened)
        except BaseException:
            await opened.aclose()
            raise
        opened.pop_all()
        self.timers.start()
        await self.services.start_services()
        self._subscribe()
        self._catch_up = asyncio.ensure_future(self._catch_up_monitor().run())
        # Input topics and changelogs deleted while running (runtime/topic_watch.py).
        self.safeguards.watch_topics(self._parts.admin, self._parts.plan)
        self.started.set()
        self.services.start_tasks(leader=False)
        inputs = ", ".join(self._parts.plan.input_topics) or "none (no consumer group)"
        log.info("worker %s started; inputs %s", conf.id, inputs)

    async def _start_parts(self, opened: contextlib.AsyncExitStack) -> Started:
        conf = self.conf
        directory = StateDirectory(conf.state_dir, conf.id)
        opened.callback(directory.close)
        self.clients.process_id = directory.process_id
        if conf.group_instance_id is not None:
            log.info(
                "static group member %r: a restart within session_timeout (%ss) takes its "
                "tasks back without a rebalance",
                conf.group_instance_id,
                conf.session_timeout,
            )
        if conf.web_enabled:  # first: /health answers during start; a port in use stops us now
            self.web = WebServer(self)
            await self.web.start()  # stopped by _shutdown, whatever start got to
        admin = self.transport.admin()
        await admin.start()  # raises BrokerUnavailable naming the address
        opened.push_async_callback(_quietly, admin.close)
        self.clients.admin = admin
        if conf.exactly_once:
            await admin.check_exactly_once_support()
        limits = await admin.broker_limits()
        if limits is None:
            log.info("not allowed to describe broker configs: broker-side limits not checked")
        else:
            check_broker_limits(conf, limits)
        await self.app.on_worker_init.send()

        # Agents run up to their first `async for`, declaring group_by topics on the way; the
        # app is described then, planned against the broker's topics (missing ones created),
        # and its tables get their planned partition counts.
        self.runner.start()
        await self.runner.wait_started(timeout=30.0)
        description = self.app.describe(trace=False)
        # Tables built from topics and join processors, fed with the agents (runtime/joins).
        self.joins = JoinRuntime(self.app, self.runner)
        self.joins.build()
        plan = await provision(description, admin, conf)
        self.app.resolve_table_partitions(plan.table_partitions)
        written = [
            name
            for name in plan.partition_counts
            if name not in plan.input_topics or name.endswith("-repartition")
        ]
        # One DescribeConfigs: the topics we write against our batch sizes, and the inputs
        # some store restores from against what the store needs of them.
        restoring = restoring_topics(self.app)
        configs = await admin.topic_configs([*written, *restoring], TOPIC_LIMIT_KEYS + RESTORE_KEYS)
        check_topic_limits(conf, {t: configs[t] for t in written if t in configs})
        check_source_changelogs(self.app, {t: configs[t] for t in restoring if t in configs})
        if any(a.isolated_partitions for a in description.agents):
            # One actor per partition: now that the partition counts are known.
            self.runner.partition_counts = dict(plan.partition_counts)
            await self.runner.restart()
        options = rocksdb_options(conf)  # one block cache and memtable budget for all tables
        for table in description.tables:
            store = self.stores[table.name] = open_store(conf.store, directory, table.name, options)
            opened.callback(store.close)
        tasks = TaskManager(
            plan, self.stores, self.memory.cache, group_factory=self._partition_group
        )
        tasks.source_filters = self.joins.restore_filters()
        tasks.progress = RestoreProgress(
            self.metrics, conf.progress_interval, stream=interactive_stream(log)
        )
        tasks.local_offsets()  # opens local state now, not inside a group join
        assignor = group_assignor(conf, plan, directory, tasks, admin.end_offsets)
        replicas = Replicas(conf, self.transport, admin, tasks, assignor)
        opened.push_async_callback(_quietly, replicas.stop)
        if self.stores:
            log_state_memory(conf, plan, options)

        producer = StreamsProducer(
            self.transport,
            guarantees.producer_config(conf, directory.process_id),
            clock=self.clock,
            reconnect=self.safeguards.reconnect,  # outages: recreating it waits for the cluster
            # What a previous process here gave up and could not check yet: start() checks it.
            left_open_file=LeftOpenFile(directory.path / LEFT_OPEN_FILE),
        )
        await producer.start()  # exactly-once: fences our previous incarnation
        opened.push_async_callback(_quietly, producer.stop)
        dead_letters = DeadLetters(
            producer,
            plan.dead_letter_topics,
            plan.partition_counts,
            on_committed=self.metrics.dead_letter,
        )
        restore_consumer = self.transport.consumer(guarantees.restore_consumer_config(conf))
        await restore_consumer.start()
        opened.push_async_callback(_quietly, restore_consumer.stop)
        global_tables = None
        globals_ = [t for t in self.app.tables.values() if t.is_global]
        if globals_:
            global_tables = GlobalTables(
                globals_,
                self.stores,
                plan.changelog_topics,
                {t.name: plan.table_partitions[t.name] for t in globals_},
                owned=lambda tp: owns_changelog_partition(plan, tasks, tp),
            )
            opened.push_async_callback(_quietly, global_tables.stop)
            await global_tables.start(self.transport, admin, conf.id, conf.restore_timeout)
        consumer = input_consumer(self.transport, conf, plan, assignor, self.web_url)
        await consumer.start()
        opened.push_async_callback(_quietly, consumer.stop)
        committer = MeasuredCommitter(
            conf.processing_guarantee,
            producer,
            consumer,
            tasks,
            changelog_topic=lambda table: plan.changelog_topics[table],
            clear_inboxes=self.runner.clear_inboxes,
            clock=self.clock,
            uncommitted=self.memory.uncommitted,
            on_commit=self._on_commit,
            metrics=self.metrics,
        )
        self.collector.attach(producer, lambda: committer.group)
        return wire(
            self,
            directory=directory,
            description=description,
            plan=plan,
            admin=admin,
            producer=producer,
            dead_letters=dead_letters,
            restore_consumer=restore_consumer,
            consumer=consumer,
            tasks=tasks,
            committer=committer,
            replicas=replicas,
            global_tables=global_tables,
            stop=self._stop_requested,
            restore=self._restore,
            resubscribe=self._resubscribe,
        )

    def _subscribe(self) -> None:
        parts = self.require_parts()
        parts.consumer.subscribe(parts.plan.input_topics, RebalanceListener(self, parts))

    def _resubscribe(self) -> None:
        """Leave the group and join again (the tasks were dropped)."""
        self.require_parts().consumer.unsubscribe()
        self._subscribe()

    def _catch_up_monitor(self) -> CatchUpMonitor:
        consumer, tasks = self.consumer, self.tasks
        return CatchUpMonitor(
            lambda: running_lag(tasks, consumer),
            lambda: self.records_processed,
            lambda: self.metrics.rebalances,
            interval=self.conf.progress_interval,
            threshold=self.conf.max_poll_records,
            stream=interactive_stream(log),
        )

    async def _shutdown(self) -> None:
        await self.app.on_before_shutdown.send()
        await self.services.stop()
        if self._catch_up is not None:
            self._catch_up.cancel()
        parts = self._parts
        if parts is not None:
            async with self.lock:
                quiet = self.runner.all_idle() and not self.timers.busy
                if self.error is None and quiet:
                    try:
                        await self.collector.flush_soon()
                        await parts.committer.commit()
                    except Exception as exc:
                        log.warning("final commit failed (%s); aborting", type(exc).__name__)
                        await self._safe_abort(parts)
                else:
                    await self._safe_abort(parts)
                parts.tasks.close_all()
        await self.timers.cancel()
        await self.runner.stop()
        if parts is not None and parts.global_tables is not None:
            await parts.global_tables.stop()
        await self.clients.stop_rpc()
        if parts is not None:
            await parts.replicas.stop()
            for client in (parts.consumer, parts.restore_consumer):
                try:
                    await client.stop()
                except Exception as exc:
                    log.warning("closing a consumer failed: %s", type(exc).__name__)
            await parts.producer.stop()
        with contextlib.suppress(Exception):
            await self.clients.stop_plain()
        if parts is not None:
            with contextlib.suppress(Exception):
                await parts.admin.close()
            for store in self.stores.values():
                store.close()
            parts.directory.close()
        if self.web is not None:
            await self.web.stop()

    async def _safe_abort(self, parts: Started) -> None:
        try:
            await self.timers.cancel()
            await parts.committer.abort()
        except Exception as exc:
            log.warning("abort during shutdown failed: %s", type(exc).__name__)

    async def sleep_unless_stopped(self, seconds: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        stopper = asyncio.ensure_future(self._stop_requested.wait())
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for pending in (sleeper, stopper):
            pending.cancel()

    # -- restore, and the end of a rebalance ---------------------------------------------------

    async def _restore(self) -> None:
        parts = self.require_parts()
        tasks, consumer = parts.tasks, parts.consumer
        async with self.lock:
            restoring = tasks.restoring()
            if not restoring:
                return
            await tasks.restore(
                restoring, parts.restore_consumer, parts.admin, self.conf.restore_timeout
            )
            assigned = consumer.assignment()
            consumer.resume([tp for task in restoring for tp in task.partitions if tp in assigned])
            done = not tasks.restoring()
        if done and self.rebalancing:
            self.rebalancing = False
            self.services.start_tasks(leader=self.is_leader())
            await self.app.on_rebalance_complete.send()

    # -- what the collaborators made in __init__ call back --------------------------------------

    def is_leader(self) -> bool:
        """This worker holds the leader partition (``on_leader`` timers run here)."""
        return self._parts is not None and self._parts.is_leader()

    def _leader_task(self) -> Task | None:
        return self._parts.leader_task() if self._parts is not None else None

    async def _dead_letter(
        self, record: RecordLike, error: BaseException, agent: str | None, attempts: int = 0
    ) -> None:
        await self.require_parts().dispatcher.dead_letter(record, error, agent, attempts)

    def _partition_group(self, partitions: list[TopicPartition]) -> PartitionGroup:
        """Co-partitioned inputs in timestamp order (runtime.partition_group)."""
        return PartitionGroup(
            partitions,
            max_idle=self.conf.max_task_idle,
            lag=self._group_lag,
            limit=max(2 * self.conf.max_poll_records, 1000),
        )

    def _group_lag(self, tp: TopicPartition) -> int | None:
        return self.require_parts().flow.group_lag(tp)

    def _on_commit(self, committed: Mapping[TopicPartition, int]) -> None:
        self.policy.committed(committed)
        self.require_parts().dead_letters.committed()


async def _quietly(close: Callable[[], Awaitable[Any]]) -> None:
    """Close a client a failed start opened, whatever it raises (it may be what failed)."""
    try:
        await close()
    except Exception as exc:
        log.debug("closing after a failed start: %s", type(exc).__name__)
