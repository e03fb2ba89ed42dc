"""Worker: one process running a topology with one consumer, one producer and many tasks.

The worker's loop is deliberately plain: fetch a batch, hand each record to the agents that
consume its topic, wait until they have processed all of it, and commit when due. Everything
that changes ownership (rebalance callbacks) or undoes work (aborts) happens under one processing
lock, so a commit, a revocation and an abort never interleave.

Two things may keep an agent busy across batches without blocking the loop: an RPC ``ask``
waiting for its reply (the agent is *parked*, and the reply may come from this very worker), and
``take()`` holding values. The loop then keeps fetching and processing, and commits only once
every agent and timer is idle again (holding streams are asked to flush first).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streams_app.app.context import (
    MISSING,
    Event,
    SendFuture,
    current_event,
    current_runtime,
)
from streams_app.app.faust_settings import AppSettings
from streams_app.codecs import DecodeError, TombstoneError
from streams_app.errors import InvalidTimestamp, WorkerStopped
from streams_app.runtime import guarantees, local_reads, rpc
from streams_app.runtime.actor import AgentRunner
from streams_app.runtime.assignor import StreamsAssignor
from streams_app.runtime.broker_limits import check_broker_limits, check_topic_limits
from streams_app.runtime.clock import Clock, SystemClock
from streams_app.runtime.collector import young_generation
from streams_app.runtime.commit import MIGRATED, PRODUCER_BROKEN, Meanwhile
from streams_app.runtime.dead_letters import DeadLetter, DeadLetters
from streams_app.runtime.errors_policy import Decision, ErrorPolicy, Failure, is_bad_record
from streams_app.runtime.global_tables import GlobalTables
from streams_app.runtime.lag import running_lag
from streams_app.runtime.measured_commit import MeasuredCommitter
from streams_app.runtime.metrics import WorkerMetrics
from streams_app.runtime.no_inputs import NoInputs
from streams_app.runtime.pacing import FetchPacer
from streams_app.runtime.partition_group import PartitionGroup
from streams_app.runtime.placement import PlacementConfig
from streams_app.runtime.plain_producer import PlainProducer
from streams_app.runtime.producer import StreamsProducer
from streams_app.runtime.progress import CatchUpMonitor, RestoreProgress, interactive_stream
from streams_app.runtime.punctuator import CallbackFailed, Punctuator
from streams_app.runtime.reconnect import Reconnect
from streams_app.runtime.replicas import Replicas
from streams_app.runtime.scope import current_parkable, in_processing
from streams_app.runtime.services import Services
from streams_app.runtime.state_memory import log_state_memory
from streams_app.runtime.stopping import StopControl, close_local
from streams_app.runtime.stream_time import decode_metadata
from streams_app.runtime.task import RUNNING, Task
from streams_app.runtime.task_manager import TaskManager
from streams_app.runtime.timers import TimerScheduler
from streams_app.runtime.topic_watch import TopicWatch
from streams_app.runtime.topology import TopologyPlan, plan_topology
from streams_app.runtime.watchdog import Watchdog
from streams_app.runtime.web import WebServer
from streams_app.settings import AT_MOST_ONCE, EXACTLY_ONCE_V2
from streams_app.state.base import Store
from streams_app.state.budget import StateMemory
from streams_app.state.directory import StateDirectory
from streams_app.state.disk import disk_error
from streams_app.state.factory import open_store, rocksdb_options
from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    RecordLike,
    TopicPartition,
    TopicSpec,
    Transport,
)
from streams_app.transport.errors import (
    GroupProtocolMismatchError,
    TransportError,
    is_record_rejected,
)

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.channel import Channel
    from streams_app.app.table import Table
    from streams_app.app.topic import Topic

log = logging.getLogger(__name__)

#: Records an agent parked on an RPC reply may have queued before its partition is held back.
BUSY_INBOX = 8
#: Records per slice processed while a commit is in flight (process_during_commit): each of
#: the commit's answers waits for at most one slice before the event loop gets to it. 32
#: beat 8 and 128 in interleaved runs (BENCHMARKS.md, "Processing while the commit is in
#: flight"); at 128 a commit took 2.5 times as long.
MEANWHILE_SLICE = 32
#: Processing busier than this share of the time since the last commit began: the worker is
#: saturated, and processes on while its commit is in flight (``_meanwhile``). A worker that
#: keeps up at half its capacity is busy about half the time; a saturated one 85-95%.
SATURATED = 0.7

H_SRC_TOPIC = "src_topic"
H_SRC_PARTITION = "src_partition"
H_SRC_OFFSET = "src_offset"
H_TXN_ID = "txn_id"
H_GENERATION = "generation"


def _nothing() -> None:
    pass


def _kafka_timestamp(record: RecordLike) -> int:
    return record.timestamp


class AgentFailed(Exception):
    """Agents failed on records of the batch being processed (one failure per record)."""

    def __init__(self, failures: list[Failure]) -> None:
        super().__init__("; ".join(f.describe() for f in failures))
        self.failures = failures


class _NoTables:
    """The task scope of channel values sent from outside processing: no table partition."""

    tables: dict[str, Any] = {}

    def open_table(self, table: Table) -> Any:
        from streams_app.errors import TopologyError

        raise TopologyError(
            f"table {table.name!r} was used by an agent reading a channel fed from outside "
            "processing: there is no partition to write; send to a topic instead"
        )


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
        #: (topic, partition) -> its src_topic and src_partition lineage headers, made once.
        self._lineage: dict[tuple[str, int], tuple[tuple[str, bytes], tuple[str, bytes]]] = {}
        #: The defaults: lineage headers only. A send without headers of its own then takes
        #: the short path of :meth:`_transactional_headers` (0.30 against 0.47 us a record).
        self._lineage_only = conf.lineage_headers and not conf.transaction_headers
        self.runner = AgentRunner(app)
        self.runner.replier = self._reply
        self.policy = ErrorPolicy(conf)
        #: Restarts of the producer that wait out an outage (runtime/reconnect.py).
        self.reconnect = Reconnect()
        self.watchdog = Watchdog(
            conf.effective_processing_timeout,
            conf.transaction_timeout if conf.exactly_once else None,
        )
        self.timers = TimerScheduler(
            app, self.clock, is_leader=self.is_leader, leader_scope=self._leader_task
        )
        self.punctuator = Punctuator(app, self.send, self._dead_letter)
        self.services = Services(app)
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self.stopping = StopControl(self._stop_requested, conf.shutdown_timeout)
        self._lock = asyncio.Lock()
        self._rebalancing = False
        self._foreign_warned = -1e9
        #: A commit is due but agents are busy (parked on RPC, or working through their
        #: inbox): busy agents get no new records until it happens.
        self._draining = False
        #: A poll made while a commit was in flight failed: the loop's next poll raises it,
        #: where the error would have come from without that poll.
        self._deferred_poll_error: BaseException | None = None
        #: Partitions paused because the agents they feed are busy (see ``_dispatch``).
        self._held: set[TopicPartition] = set()
        #: Of those, the ones holding a record to retry alone: they wait for every agent.
        self._held_for_retry: set[TopicPartition] = set()
        self._soon: list[tuple[bool, Topic, dict[str, Any]]] = []
        #: Partitions paused while a failed record of theirs backs off -> when they resume.
        self.backing_off: dict[TopicPartition, float] = {}
        self.records_processed = 0
        #: Of those, the ones processed while a commit was in flight (process_during_commit).
        self.processed_during_commit = 0
        #: Records handed to the agents since the last time they were all done.
        self._fed = 0
        #: Sizes each poll to the commit deadline; idle, a poll waits up to one interval
        #: (5-100 ms).
        self._pacer = FetchPacer(
            conf.max_poll_records, max(5, min(100, int(conf.effective_commit_interval * 1000)))
        )
        self.error: BaseException | None = None
        #: The state memory budget: the read cache shared by every table and partition, and the
        #: uncommitted-writes budget. Their counters are the worker's state metrics.
        self.memory = StateMemory(conf.state_cache_max_bytes, conf.state_uncommitted_max_bytes)
        # set in start()
        self.directory: StateDirectory | None = None
        self.plan: TopologyPlan | None = None
        self.stores: dict[str, Store] = {}
        self._admin: AdminClient | None = None
        self._consumer: ConsumerClient | None = None
        self._restore_consumer: ConsumerClient | None = None
        self._producer: StreamsProducer | None = None
        self._plain: PlainProducer | None = None
        self._rpc: rpc.RpcClient | None = None
        self._global: GlobalTables | None = None
        self._tasks: TaskManager | None = None
        self._committer: MeasuredCommitter | None = None
        self._dead_letters: DeadLetters | None = None
        #: Standbys, warm-ups, fencing of departed members, probing (runtime/replicas.py).
        self.replicas: Replicas | None = None
        #: What /metrics exports (plain counters; see runtime.metrics).
        self.metrics = WorkerMetrics()
        #: The web server (None: web_enabled is off, or not started yet).
        self.web: WebServer | None = None
        self._catch_up: asyncio.Task[None] | None = None
        self.topic_watch: TopicWatch | None = None

    # -- accessors (valid once started) ---------------------------------------------------

    @property
    def consumer(self) -> ConsumerClient:
        assert self._consumer is not None, "worker not started"
        return self._consumer

    @property
    def producer(self) -> StreamsProducer:
        assert self._producer is not None, "worker not started"
        return self._producer

    @property
    def tasks(self) -> TaskManager:
        assert self._tasks is not None, "worker not started"
        return self._tasks

    @property
    def committer(self) -> MeasuredCommitter:
        assert self._committer is not None, "worker not started"
        return self._committer

    @property
    def dead_letters(self) -> DeadLetters:
        assert self._dead_letters is not None, "worker not started"
        return self._dead_letters

    @property
    def dead_lettered(self) -> int:
        """Records committed to dead-letter topics so far."""
        return self._dead_letters.committed_count if self._dead_letters is not None else 0

    @property
    def admin(self) -> AdminClient:
        assert self._admin is not None, "worker not started"
        return self._admin

    @property
    def plain(self) -> PlainProducer:
        if self._plain is None:
            self._plain = PlainProducer(self.transport, f"{self.conf.id}-plain")
        return self._plain

    @property
    def rpc(self) -> rpc.RpcClient:
        if self._rpc is None:
            process = (
                self.directory.process_id if self.directory else rpc.RpcClient.new_correlation_id()
            )
            self._rpc = rpc.RpcClient(
                self.transport,
                self.plain,
                app_id=self.conf.id,
                reply_to=self.conf.reply_to or f"{self.conf.reply_to_prefix}{process}",
                replication_factor=self.conf.topic_replication_factor,
                reply_expires=self.conf.reply_expires,
            )
            if self._admin is not None:
                self._rpc.bind_admin(self._admin)
        return self._rpc

    @property
    def _timer_due(self) -> dict[str, float]:
        """Timer name -> when it is next due (the test harness steps time to these)."""
        return self.timers.due

    # -- lifecycle ------------------------------------------------------------------------

    async def run(self) -> None:
        """Start, process until :meth:`request_stop`, then stop cleanly."""
        token = current_runtime.set(self)
        try:
            with young_generation(self.conf.gc_young_threshold):
                try:
                    await self.start()
                    # Bounded once a stop is requested (runtime/stopping.py).
                    await self.stopping.run_loop(self._loop())
                    self.stopping.raise_failure()
                except BaseException as exc:
                    # A full, read-only or forbidden state directory: one line (state/disk.py).
                    self.error = disk_error(exc, self.conf.state_dir / self.conf.id) or exc
                    if self.error is not exc:
                        raise self.error from exc
                    raise
                finally:
                    await self.stopping.shutdown(
                        self._shutdown(),
                        lambda: close_local(self.stores.values(), self.directory, self.web),
                        failed=self.error is not None,
                    )
        finally:
            current_runtime.reset(token)
            self.stopped.set()

    @property
    def web_url(self) -> str | None:
        """``http://host:port`` of this worker's web server (None when it has none)."""
        return self.web.url if self.web is not None else None

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested.is_set()

    def request_stop(self) -> None:
        """Graceful stop: finish the current batch, commit, close (SIGTERM does this), within
        two ``shutdown_timeout`` (runtime/stopping.py)."""
        self._stop_requested.set()

    def fail(self, error: BaseException) -> None:
        """Stop, then raise ``error`` from :meth:`run` (a condition found outside the loop)."""
        self.stopping.fail(error)

    def request_commit(self) -> None:
        """Commit at the next quiescent point, whether or not ``commit_interval`` is up.

        Like Kafka Streams' ``ProcessorContext.commit()``. The test harness uses it to commit
        without moving its manual clock (which would also fire timers)."""
        if self._committer is not None:
            self._committer.requested = True

    async def start(self) -> None:
        conf = self.conf
        log.info(
            "starting worker for %s (%s) on %s",
            conf.id,
            conf.processing_guarantee,
            self.transport.address,
        )
        self.directory = StateDirectory(conf.state_dir, conf.id)
        if conf.group_instance_id is not None:
            log.info(
                "static group member %r: a restart within session_timeout (%ss) takes its "
                "tasks back without a rebalance",
                conf.group_instance_id,
                conf.session_timeout,
            )
        if conf.web_enabled:  # first: /health answers during start; a port in use stops us now
            self.web = WebServer(self)
            await self.web.start()
        admin = self.transport.admin()
        await admin.start()  # raises BrokerUnavailable naming the address
        self._admin = admin
        if conf.exactly_once:
            await admin.check_exactly_once_support()
        limits = await admin.broker_limits()
        if limits is None:
            log.info("not allowed to describe broker configs: broker-side limits not checked")
        else:
            check_broker_limits(conf, limits)
        await self.app.on_worker_init.send()

        # Agents run up to their first `async for`, declaring group_by topics on the way.
        self.runner.start()
        await self.runner.wait_started(timeout=30.0)
        self.plan = await plan_topology(self.app, self.runner, admin, conf)
        written = [
            name
            for name in self.plan.partition_counts
            if name not in self.plan.input_topics or name.endswith("-repartition")
        ]
        check_topic_limits(conf, await admin.topic_max_message_bytes(written))
        if any(a.isolated_partitions for a in self.app.agents):
            # One actor per partition: now that the partition counts are known.
            self.runner.partition_counts = dict(self.plan.partition_counts)
            await self.runner.restart()
        options = rocksdb_options(conf)  # one block cache and memtable budget for all tables
        for table in self.app.tables.values():
            self.stores[table.name] = open_store(conf.store, self.directory, table.name, options)
        self._tasks = TaskManager(
            self.plan, self.stores, self.memory.cache, group_factory=self._partition_group
        )
        self._tasks.progress = RestoreProgress(
            self.metrics, conf.progress_interval, stream=interactive_stream(log)
        )
        self._tasks.local_offsets()  # opens local state now, not inside a group join
        # The group's own assignor (runtime/assignor.py) runs whatever table_standby_replicas
        # is: with 0 it places no standbys, but its sticky, lag-aware placement (warm-ups
        # included) and the fencing of departed members' transactional ids serve every
        # failover: a new owner does not wait out a dead worker's transaction timeout. Range
        # is offered second, for a group that still has members of an older version.
        assignor = StreamsAssignor(
            self.plan,
            process_id=self.directory.process_id,
            transactional_id=(
                guarantees.transactional_id(conf, self.directory.process_id)
                if conf.exactly_once
                else None
            ),
            local_offsets=self._tasks.local_offsets,
            end_offsets=admin.end_offsets,
            placement=PlacementConfig(
                standby_replicas=conf.table_standby_replicas,
                acceptable_recovery_lag=conf.acceptable_recovery_lag,
                max_warmup_replicas=conf.max_warmup_replicas,
            ),
            probing_interval=conf.probing_rebalance_interval,
        )
        self.replicas = Replicas(conf, self.transport, admin, self._tasks, assignor)
        if self.stores:
            log_state_memory(conf, self.plan, options)

        self._producer = StreamsProducer(
            self.transport,
            guarantees.producer_config(conf, self.directory.process_id),
            clock=self.clock,
            reconnect=self.reconnect,  # outages: recreating it waits for the cluster
        )
        await self._producer.start()  # exactly-once: fences our previous incarnation
        self._dead_letters = DeadLetters(
            self._producer,
            self.plan.dead_letter_topics,
            self.plan.partition_counts,
            on_committed=self.metrics.dead_letter,
        )
        self._restore_consumer = self.transport.consumer(guarantees.restore_consumer_config(conf))
        await self._restore_consumer.start()
        global_tables = [t for t in self.app.tables.values() if t.is_global]
        if global_tables:
            plan = self.plan
            self._global = GlobalTables(
                global_tables,
                self.stores,
                plan.changelog_topics,
                {t.name: plan.table_partitions[t.name] for t in global_tables},
                owned=self._owns_changelog_partition,
            )
            await self._global.start(self.transport, admin, conf.id, conf.restore_timeout)
        self._consumer = (
            self.transport.consumer(
                dataclasses.replace(
                    guarantees.consumer_config(conf),
                    assignor=assignor,
                    application_server=self.web_url,
                )
            )
            if self.plan.input_topics
            else NoInputs()  # timers, tasks and channels only: no consumer group to join
        )
        await self._consumer.start()
        plan = self.plan
        self._committer = MeasuredCommitter(
            conf.processing_guarantee,
            self._producer,
            self._consumer,
            self._tasks,
            changelog_topic=lambda table: plan.changelog_topics[table],
            clear_inboxes=self.runner.clear_inboxes,
            clock=self.clock,
            uncommitted=self.memory.uncommitted,
            on_commit=self._on_commit,
            metrics=self.metrics,
        )
        self.timers.start()
        await self.services.start_services()
        self._consumer.subscribe(self.plan.input_topics, _RebalanceListener(self))
        self._catch_up = asyncio.ensure_future(self._catch_up_monitor().run())
        # Input topics and changelogs deleted while running (runtime/topic_watch.py).
        self.topic_watch = TopicWatch(
            admin,
            self.plan.input_topics,
            self.plan.changelog_topics,
            missing_timeout=conf.missing_topic_timeout,
            fail=self.fail,
        )
        self.stopping.background("topic watch", self.topic_watch.run())
        self.started.set()
        self.services.start_tasks(leader=False)
        inputs = ", ".join(self.plan.input_topics) or "none (no consumer group)"
        log.info("worker %s started; inputs %s", conf.id, inputs)

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
        if self._committer is not None and self._tasks is not None:
            async with self._lock:
                quiet = self.runner.all_idle() and not self.timers.busy
                if self.error is None and quiet:
                    try:
                        await self._flush_soon()
                        await self.committer.commit()
                    except Exception as exc:
                        log.warning("final commit failed (%s); aborting", type(exc).__name__)
                        await self._safe_abort()
                else:
                    await self._safe_abort()
                self.tasks.close_all()
        await self.timers.cancel()
        await self.runner.stop()
        if self._global is not None:
            await self._global.stop()
        if self._rpc is not None:
            await self._rpc.stop()
        if self.replicas is not None:
            await self.replicas.stop()
        for client in (self._consumer, self._restore_consumer):
            if client is not None:
                try:
                    await client.stop()
                except Exception as exc:
                    log.warning("closing a consumer failed: %s", type(exc).__name__)
        if self._producer is not None:
            await self._producer.stop()
        if self._plain is not None:
            with contextlib.suppress(Exception):
                await self._plain.stop()
        if self._admin is not None:
            with contextlib.suppress(Exception):
                await self._admin.close()
        for store in self.stores.values():
            store.close()
        if self.directory is not None:
            self.directory.close()
        if self.web is not None:
            await self.web.stop()

    async def _safe_abort(self) -> None:
        try:
            await self.timers.cancel()
            await self.committer.abort()
        except Exception as exc:
            log.warning("abort during shutdown failed: %s", type(exc).__name__)

    # -- the loop -------------------------------------------------------------------------

    async def _loop(self) -> None:
        conf = self.conf
        interval = conf.effective_commit_interval
        stop = self._stop_requested
        pacer = self._pacer
        ship_when_caught_up = conf.exactly_once and conf.producer_linger_ms is None
        while not stop.is_set():
            if self.backing_off:
                await self._resume_backed_off()
            if self.tasks.restoring():
                await self._restore()
                continue
            # Aimed at the commit deadline: a due commit is not held back by a long poll or a
            # big batch (runtime.pacing).
            timeout_ms, max_records = pacer.next_poll(
                self.committer.time_left(interval), draining=self._draining
            )
            waiting = self._buffered_wait()
            try:
                if self._deferred_poll_error is not None:
                    error, self._deferred_poll_error = self._deferred_poll_error, None
                    raise error
                batch = await self.consumer.getmany(
                    timeout_ms=timeout_ms if waiting is None else min(timeout_ms, waiting),
                    max_records=max_records,
                )
            except GroupProtocolMismatchError as exc:
                await self._wait_for_foreign_members(exc)
                continue
            async with self._lock:
                if self.timers.any_due() and not await self._run_due_timers():
                    continue
                if not batch and self.committer.due(interval, conf.commit_every):
                    # Idle: a trailing transaction marker may have moved the position.
                    await self._sync_positions(list(self.tasks.by_tp))
                await self._step(batch, interval)
                if ship_when_caught_up and self.producer.lingering and self._caught_up():
                    # Nothing more to process: the worker would only wait now, so what lingers
                    # for the commit goes out instead, and the commit has less to send
                    # (settings.effective_producer_linger_ms).
                    self.producer.send_lingering()

    async def _step(
        self, batch: Mapping[TopicPartition, Sequence[RecordLike]], interval: float
    ) -> None:
        committer = self.committer
        try:
            if batch or self._has_buffered():
                if self.conf.processing_guarantee == AT_MOST_ONCE:
                    await committer.commit_offsets_before_processing(self._batch_offsets(batch))
                await self._process(batch)
            else:
                await self._settle()
            await self._flush_soon()
            if committer.due(interval, self.conf.commit_every):
                if await self._quiescent():
                    self._draining = False
                    await committer.commit(self._meanwhile())
                else:
                    self._draining = True
            self._release_held()
        except AgentFailed as failed:
            await self._on_agent_failures(failed.failures)
        except MIGRATED as exc:
            self.dead_letters.aborted()
            await self._on_migrated(exc)
        except TransportError as exc:  # PRODUCER_BROKEN and any other transaction failure
            log.warning(
                "transaction failed (%s: %s): aborting and retrying", type(exc).__name__, exc
            )
            await self._undo(recreate_producer=True)
            # A dead letter refused goes again smaller (runtime/dead_letter_size.py); an output
            # refused for good stops the worker: committing again would fail the same way.
            smaller = self.dead_letters.raise_if_refused()
            if is_record_rejected(exc) and not smaller:
                raise WorkerStopped(
                    f"{exc}: the transaction cannot commit, and every retry would fail the same "
                    "way. Stopping; nothing of it was committed. Fix: raise the topic's "
                    "max.message.bytes (or make the record smaller); then restart"
                ) from exc
            await self.runner.restart()

    def _meanwhile(self) -> Meanwhile | None:
        """What this commit does while in flight (runtime.commit): under exactly-once, process
        on if the worker is saturated.

        Saturated: processing took most of the time since the last commit began, so records
        are waiting and every millisecond of the commit's waits is throughput lost. A worker
        with time to spare gains nothing (it processes those records after the commit anyway)
        and the slices would only delay the commit's answers, and with them every output's
        visibility: commits took 1-6 ms longer at half capacity (BENCHMARKS.md).
        """
        conf = self.conf
        if not conf.process_during_commit or conf.processing_guarantee != EXACTLY_ONCE_V2:
            return None
        cost = self._pacer.seconds_per_record
        committer = self.committer
        elapsed = self.clock.monotonic() - committer.last_commit
        if cost is None or committer.records_since_commit * cost < SATURATED * elapsed:
            return None
        return self._process_while_committing

    async def _process_while_committing(self, committing: asyncio.Future[None]) -> None:
        """Process records already fetched, in slices, until the commit in flight is done.

        It stops early when the fetched records run out (a slice comes back short), when a
        stop is requested, when the group starts to rebalance (a poll would wait for the new
        assignment), and before a record that failed before is due again: that one is retried
        in a transaction of its own, which needs a commit (``_commit_for_retry``), and none may
        begin while one is in flight. Agent failures propagate (the committer raises them once
        it is done).
        """
        self.dead_letters.seal()
        consumer = self.consumer
        stop = self._stop_requested
        while not committing.done() and not stop.is_set() and not self._retried_partitions():
            if not consumer.fetch_ready():
                return  # a rebalance is under way: its callbacks need the lock held here
            try:
                batch = await consumer.getmany(timeout_ms=0, max_records=MEANWHILE_SLICE)
            except Exception as exc:
                self._deferred_poll_error = exc
                return
            if not batch:
                return
            before = self.records_processed
            await self._process(batch, paced=False)
            self.processed_during_commit += self.records_processed - before
            if sum(map(len, batch.values())) < MEANWHILE_SLICE:
                return  # what was fetched is done

    def _release_held(self, *, all_: bool = False) -> None:
        """Resume partitions held back for busy agents once those agents are idle again (a
        partition also backing off after a failure stays paused until its time is up)."""
        if not self._held:
            return
        ready = []
        for tp in self._held:
            streams = [
                actors[tp.partition % len(actors)].input
                for actors in self.runner.actor_lists(tp.topic)
            ]
            if all_ or (
                all(s.idle for s in streams)
                and (tp not in self._held_for_retry or self.runner.all_idle())
            ):
                ready.append(tp)
        if ready:
            self._held.difference_update(ready)
            self._held_for_retry.difference_update(ready)
            assigned = self.consumer.assignment()
            self.consumer.resume(
                [tp for tp in ready if tp in assigned and tp not in self.backing_off]
            )

    async def _undo(self, *, recreate_producer: bool = False) -> None:
        """Abort the open transaction. The agents are stopped first: they may still be working
        on the batch (parked on an RPC reply, or mid-way) and would send into the transaction
        being aborted. The caller restarts them."""
        await self.runner.stop()
        self._release_held(all_=True)
        self._draining = False
        self._soon.clear()
        await self.timers.cancel()
        await self.committer.abort(recreate_producer=recreate_producer)

    async def _abort(self, *, recreate_producer: bool = False) -> None:
        await self._undo(recreate_producer=recreate_producer)
        self.dead_letters.aborted()
        await self.runner.restart()

    async def _wait_for_foreign_members(self, exc: GroupProtocolMismatchError) -> None:
        """Switching a group over from another framework: its last workers may still be in the
        group (stopping, or killed and not yet expired). Wait and rejoin, saying so."""
        now = self.clock.monotonic()
        if now - self._foreign_warned > 10.0:
            self._foreign_warned = now
            log.warning("%s: waiting for them to leave, then joining (stop them all)", exc)
        await self._sleep_unless_stopped(1.0)
        assert self.plan is not None
        async with self._lock:
            await self._abort()
            self.tasks.close_all()
            self.committer.group = None
            self.backing_off.clear()  # the rejoin pauses and resumes every partition itself
            self.consumer.unsubscribe()
            self.consumer.subscribe(self.plan.input_topics, _RebalanceListener(self))

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        stopper = asyncio.ensure_future(self._stop_requested.wait())
        await asyncio.wait({sleeper, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for pending in (sleeper, stopper):
            pending.cancel()

    async def _run_due_timers(self) -> bool:
        """Run timers whose time has come; what they send joins the open transaction.
        False when one failed (the failure has been handled)."""
        failed = await self.timers.run_due()
        for run in failed:
            assert run.error is not None
            await self._on_agent_failures([Failure.of(f"timer:{run.timer.name}", run.error, None)])
            return False
        return True

    async def _settle(self) -> None:
        """Wait until every agent and timer waits for input, is parked, or holds values; raise
        the agents' failures (one per record)."""
        # The processing timeout (runtime/watchdog.py): agents still busy past it fail.
        failures: dict[tuple[str, int, int] | None, Failure] = {}
        for failure in await self.watchdog.settle(self.runner):
            failures.setdefault(failure.position, failure)
        for actor in self.runner.failed():
            error = actor.error
            assert error is not None
            event = actor.failed_event
            if event is not None and event.offset < 0:
                event = None  # a channel value: not a record of a topic
            failure = Failure.of(actor.name, error, event)
            failures.setdefault(failure.position, failure)
        if failures:
            raise AgentFailed(list(failures.values()))
        for run in await self.timers.wait_settled():
            assert run.error is not None
            raise AgentFailed([Failure.of(f"timer:{run.timer.name}", run.error, None)])
        self.records_processed += self._fed
        self.committer.records_since_commit += self._fed
        self._fed = 0

    async def _quiescent(self) -> bool:
        """Everything handed out is fully processed (``take`` buffers flushed first)."""
        if self.runner.flush_held():
            await self._settle()
            await self._flush_soon()
        return self.runner.all_idle() and not self.timers.busy and not self._soon

    async def _commit_for_retry(self) -> bool:
        """Commit what came before a record that failed before, so that it is retried in a
        transaction of its own. False while agents are still busy (parked on an RPC reply):
        committing then would cover records they have not finished; the caller holds the
        retried record's partition back (:meth:`_hold`), and busy agents get no new records
        until the commit (as when a commit is due)."""
        await self._flush_soon()
        if not await self._quiescent():
            self._draining = True
            return False
        self._draining = False
        await self.committer.commit()
        return True

    def _hold(self, task: Task, tp: TopicPartition, offset: int, *, retry: bool = False) -> None:
        """Leave ``tp``'s records from ``offset`` on in Kafka, the partition paused until the
        agents it feeds are idle (:meth:`_release_held`). Paused, not merely rewound: fetched
        again at once, it would spin the loop without letting the agents' RPC requests out."""
        self.consumer.seek(tp, offset)
        self.consumer.pause([tp])
        self._held.add(tp)
        if retry:
            self._held_for_retry.add(tp)
        group = task.group_for(tp)
        if group is not None:
            group.drop(tp)  # its later records come again from the seek, in order

    def _batch_offsets(
        self, batch: Mapping[TopicPartition, Sequence[RecordLike]]
    ) -> dict[TopicPartition, int]:
        return {tp: records[-1].offset + 1 for tp, records in batch.items() if records}

    async def _process(
        self, batch: Mapping[TopicPartition, Sequence[RecordLike]], *, paced: bool = True
    ) -> None:
        """``paced``: the batch's cost per record teaches the poll pacer (not for the slices
        processed while a commit is in flight: the commit's answers interleave with them)."""
        started = time.perf_counter()
        processed_before = self.records_processed
        by_tp = self.tasks.by_tp
        self._fed = 0  # what an earlier, failed batch fed does not count
        retried = self._retried_partitions()
        held: list[tuple[Task, TopicPartition, Sequence[RecordLike]]] = []
        for tp, records in batch.items():
            task = by_tp.get(tp)
            if task is None or not records:
                continue  # revoked: the new owner processes them
            key = TopicPartition(tp[0], tp[1])
            if task.state != RUNNING:
                # Not restored yet (its partitions should be paused): fetch these again later.
                self.consumer.seek(key, task.offsets.get(key, records[0].offset))
                continue
            group = task.group_for(key)
            if group is not None:  # co-partitioned inputs: smallest timestamp first
                group.add(key, records, self._ordering_timestamp(task, key))
                continue
            if key in retried:
                index = self._first_retry(key, records)
                if index is not None:
                    await self._dispatch(task, key, records[:index])
                    held.append((task, key, records[index:]))
                    continue
            await self._dispatch(task, key, records)
        if self._has_buffered():
            await self._process_buffered()
        await self._settle()
        for task, key, records in held:
            # A record that failed before is tried again in a transaction of its own, so that
            # if it fails again its abort takes nothing else with it: commit first.
            if not await self._commit_for_retry():
                self._hold(task, key, records[0].offset, retry=True)
                continue
            await self._dispatch(task, key, records[:1])
            await self._settle()
            await self._dispatch(task, key, records[1:])
            await self._settle()
        if not self.punctuator.idle:
            try:
                await self.punctuator.after_batch(self.tasks.running())
            except CallbackFailed as exc:
                failure = Failure.of(exc.what, exc.error, None, replayed=True)
                raise AgentFailed([failure]) from exc
        await self._sync_positions(batch)
        took = time.perf_counter() - started
        self.metrics.batch_seconds.observe(took)
        if paced:
            self._pacer.observe(self.records_processed - processed_before, took)

    def _retried_partitions(self) -> set[TopicPartition]:
        attempts = self.policy.attempts
        if not attempts or self.conf.processing_guarantee == AT_MOST_ONCE:
            return set()
        poisoned = self.policy.poisoned
        return {TopicPartition(p[0], p[1]) for p in attempts if p not in poisoned}

    def _first_retry(self, tp: TopicPartition, records: Sequence[RecordLike]) -> int | None:
        """Index of the first record of ``records`` that failed before (and is to be retried)."""
        attempts, poisoned = self.policy.attempts, self.policy.poisoned
        expected = self.tasks.by_tp[tp].offsets.get(tp, 0)
        for index, record in enumerate(records):
            position = (tp.topic, tp.partition, record.offset)
            if record.offset >= expected and position in attempts and position not in poisoned:
                return index
        return None

    # -- co-partitioned inputs in timestamp order (runtime.partition_group) ----------------

    def _partition_group(self, partitions: list[TopicPartition]) -> PartitionGroup:
        return PartitionGroup(
            partitions,
            max_idle=self.conf.max_task_idle,
            lag=self._group_lag,
            limit=max(2 * self.conf.max_poll_records, 1000),
        )

    def _caught_up(self) -> bool:
        """Every record on the broker, as of the last fetch responses, has been processed (one
        not known yet counts as none). A worker working through a backlog is not."""
        lag = self.consumer.fetched_lag
        return not any(lag(tp) for tp in self.tasks.by_tp)

    def _group_lag(self, tp: TopicPartition) -> int | None:
        """A partition held back for busy agents (parked on an RPC reply) delivers nothing
        until they are free: the group must not wait for it, or the reply the agents wait for,
        on a co-partitioned topic, is never processed."""
        if tp in self._held:
            return 0
        return self.consumer.fetched_lag(tp)

    def _ordering_timestamp(self, task: Task, tp: TopicPartition) -> Any:
        topic = self.app.topics[tp.topic]
        if topic.timestamp_fn is None:
            return _kafka_timestamp
        load_value = topic.value_codec.loads

        def extracted(record: RecordLike) -> int:
            try:
                value = None if record.value is None else load_value(record.value)
                return topic.timestamp_of(record.timestamp, value, -1)
            except Exception:  # dead-lettered when dispatched; order it by Kafka's time
                return record.timestamp

        return extracted

    def _has_buffered(self) -> bool:
        if self._tasks is None:
            return False
        return any(group.buffered for task in self.tasks.running() for group in task.groups())

    def _buffered_wait(self) -> int | None:
        """How long the next poll may wait (ms) while buffered records wait on a task's idle
        deadline; None when nothing is buffered."""
        if not self._has_buffered():
            return None
        now = self.clock.monotonic()
        deadlines = [
            d
            for task in self.tasks.running()
            for group in task.groups()
            if (d := group.next_deadline()) is not None
        ]
        if not deadlines:
            return 5
        return max(1, min(100, int((min(deadlines) - now) * 1000) + 1))

    async def _process_buffered(self) -> None:
        """Process each ready group's records, smallest timestamp first. Between runs from
        different partitions, wait until the agents are idle: the records of two topics go to
        different agents, which must see them in that order too."""
        now = self.clock.monotonic()
        retried = self._retried_partitions()
        for task in self.tasks.running():
            for group in task.groups():
                last: TopicPartition | None = None
                while group.ready(now):
                    tp, run = group.next_run()
                    if last is not None and tp != last:
                        await self._settle()
                    last = tp
                    if tp in retried:
                        await self._dispatch_retries_alone(task, tp, run)
                    else:
                        await self._dispatch(task, tp, run)
                # A partition backing off after a failure stays paused until its time is up.
                pause = group.to_pause()
                # One held back for busy agents waits for them (see _release_held).
                resume = [
                    tp
                    for tp in group.to_resume()
                    if tp not in self.backing_off and tp not in self._held
                ]
                if pause:
                    self.consumer.pause(pause)
                if resume:
                    self.consumer.resume(resume)

    async def _dispatch_retries_alone(
        self, task: Task, tp: TopicPartition, run: Sequence[RecordLike]
    ) -> None:
        """Dispatch a run in order, each record that failed before in a transaction of its
        own (what came before it is committed first), so that if it fails again its abort
        takes nothing else with it. For runs that must keep their order: a partition group's
        (ungrouped partitions hold their retried records until the batch is done instead)."""
        while run:
            index = self._first_retry(tp, run)
            if index is None:
                await self._dispatch(task, tp, run)
                return
            await self._dispatch(task, tp, run[:index])
            await self._settle()
            if not await self._commit_for_retry():
                self._hold(task, tp, run[index].offset, retry=True)
                return
            await self._dispatch(task, tp, run[index : index + 1])
            await self._settle()
            run = run[index + 1 :]

    async def _sync_positions(self, partitions: Iterable[TopicPartition]) -> None:
        """Step the next-offset-to-commit over transaction markers (KAFKA-6607).

        After the last record of a transaction at offset N the consumer's position is N+2, past
        the commit marker. Committing N+1 would leave the committed offset forever one short of
        the end offset; committing the position makes "committed == end" mean "all processed".
        Safe because every record the consumer returned below the position has been processed.
        """
        by_tp = self.tasks.by_tp
        for tp in partitions:
            task = by_tp.get(tp)
            if task is None or task.state != RUNNING:
                continue
            key = TopicPartition(tp[0], tp[1])
            if task.buffered(key):
                continue  # fetched, not processed: the position is past them
            position = await self.consumer.position(key)
            if position > task.offsets.get(key, position):
                task.offsets[key] = position

    async def _dispatch(self, task: Task, tp: TopicPartition, records: Sequence[RecordLike]) -> int:
        topic = self.app.topics[tp.topic]
        load_key, load_value = topic.key_codec.loads, topic.value_codec.loads
        from_payload = getattr(topic.value_codec, "from_payload", None)
        tombstones = topic.accepts_tombstones
        streams = [
            actors[tp.partition % len(actors)].input for actors in self.runner.actor_lists(tp.topic)
        ]
        forwarders = self.runner.forwarders.get(tp.topic, ())
        policy = self.policy
        poisoned = policy.poisoned
        offsets = task.offsets
        expected = offsets.get(tp, 0)
        count = 0
        # Busy agents (an RPC reply awaited, or a commit due) get at most a few more records:
        # the rest of the batch is left in Kafka, its partition paused, so the transaction
        # that must wait for those agents stays short. Every agent of the partition stops at
        # the same record, so none runs ahead of the offset that will be committed.
        limit = 0 if self._draining else (BUSY_INBOX if any(s.parked for s in streams) else None)
        # Stream time (runtime.stream_time): the record's time, and the partition's largest.
        timestamp_fn = topic.timestamp_fn
        times = task.partition_times
        partition_time = times.get(tp, -1)
        for record in records:
            offset = record.offset
            if offset < expected:
                continue  # fetched before a rewind or rebalance: already processed
            if limit is not None and any(not s.idle and s.pending >= limit for s in streams):
                self._hold(task, tp, offset)
                break
            if poisoned:
                failure = policy.poison_for(tp.topic, tp.partition, offset)
                if failure is not None:  # decided before the abort that brought it round
                    position = (tp.topic, tp.partition, offset)
                    await self._dead_letter(
                        record, failure.error, failure.agent, policy.attempts_of(position)
                    )
                    offsets[tp] = offset + 1
                    continue
            raw_key, raw_value = record.key, record.value
            headers = tuple(record.headers)
            reply_to = correlation_id = None
            try:
                key = None if raw_key is None else load_key(raw_key)
                if headers:
                    reply_to, correlation_id = rpc.request_headers(headers)
                envelope = (
                    rpc.unwrap_envelope(raw_value)
                    if raw_value is not None and reply_to is None and raw_value[:1] == b"{"
                    else None
                )
                if envelope is not None:
                    reply_to, correlation_id, payload = envelope
                    value = from_payload(payload) if from_payload is not None else payload
                elif raw_value is not None:
                    value = load_value(raw_value)
                elif tombstones:
                    value = None
                else:
                    raise TombstoneError(
                        f"a record without a value (tombstone) on {tp.topic}, whose values are "
                        "a Record model"
                    )
            except Exception as exc:  # a poison record: dead-letter it, never crash-loop
                error = exc if isinstance(exc, DecodeError) else DecodeError(str(exc))
                await self._dead_letter(record, error, None, 0)
                offsets[tp] = offset + 1
                continue
            timestamp = record.timestamp
            if timestamp_fn is not None or timestamp < 0:
                try:
                    timestamp = topic.timestamp_of(timestamp, value, partition_time)
                except InvalidTimestamp as exc:
                    await self._dead_letter(record, exc, None, 0)
                    offsets[tp] = offset + 1
                    continue
            if timestamp > partition_time:
                partition_time = times[tp] = timestamp
            event = Event(
                tp.topic,
                tp.partition,
                offset,
                timestamp,
                key,
                value,
                headers,
                raw_key,
                raw_value,
                task,
                reply_to,
                correlation_id,
            )
            for stream in streams:
                stream.feed(event)
            if forwarders:
                token = current_event.set(event)
                scope = in_processing.set(True)
                try:
                    for forwarder in forwarders:
                        await forwarder.forward(event)
                except Exception as exc:
                    name = f"group_by:{forwarder.target.name}"
                    raise AgentFailed([Failure.of(name, exc, event)]) from exc
                finally:
                    in_processing.reset(scope)
                    current_event.reset(token)
            offsets[tp] = offset + 1
            count += 1
        self._fed += count
        self.metrics.count_in(tp.topic, count)
        return count

    async def _dead_letter(
        self, record: RecordLike, error: BaseException, agent: str | None, attempts: int = 0
    ) -> None:
        await self.dead_letters.send(
            DeadLetter(
                record.topic,
                record.partition,
                record.offset,
                record.key,
                record.value,
                tuple(record.headers),
                error,
                agent,
                attempts,
            )
        )

    # -- failure handling -----------------------------------------------------------------

    async def _on_agent_failures(self, failures: list[Failure]) -> None:
        """Decide per record, undo the transaction once, then carry the decisions out.

        Retried records pause only their own partition for the backoff: every other partition
        is processed and committed meanwhile (see :mod:`streams_app.runtime.errors_policy`).
        """
        decisions = [(failure, self.policy.decide(failure)) for failure in failures]
        for failure, decision in decisions:
            if is_bad_record(failure.error) and decision is Decision.DEAD_LETTER:
                log.warning("%s: a bad record, no retry can help", failure.describe())
                continue
            # The traceback once per record (its first failure) and with the final decision;
            # the retries in between say which attempt failed.
            attempts = self.policy.attempts_of(failure.position) if failure.position else 1
            log.error(
                "%s; policy %s -> %s%s",
                failure.describe(),
                self.conf.error_policy,
                decision.value,
                self._retry_note(failure, decision),
                exc_info=failure.error if attempts <= 1 or decision is not Decision.RETRY else None,
            )
        if self.conf.processing_guarantee == AT_MOST_ONCE:
            # The offsets were committed before processing: nothing to undo, nothing to retry.
            await self.runner.stop()
            self._release_held(all_=True)
            self._draining = False
            self._soon.clear()
            await self.timers.cancel()
            await self.runner.restart()
            for failure, decision in decisions:
                if decision is Decision.DEAD_LETTER and failure.event is not None:
                    await self._dead_letter_event(failure)
        else:
            # Agents may still be working on the batch (a group_by key function failed while
            # it was being handed out, or one is parked on an RPC reply): _abort stops them
            # before the abort, or they send into it.
            await self._abort()
        for failure, decision in decisions:
            if decision is Decision.STOP and failure.replayed:
                raise WorkerStopped(
                    f"{failure.describe()}, {self.policy.callback_failures} times in a row: it "
                    "runs again whenever the abort replays its records, and there is no record "
                    "to dead-letter. Stopping; nothing of it was committed. Fix the callback, "
                    "then restart"
                ) from failure.error
            if decision is Decision.STOP:
                raise WorkerStopped(failure.describe()) from failure.error
        for failure, decision in decisions:
            if decision is Decision.RETRY:
                self._back_off(failure)

    def _retry_note(self, failure: Failure, decision: Decision) -> str:
        if decision is not Decision.RETRY:
            return ""
        if failure.position is None:
            attempts = self.policy.callback_failures
        else:
            attempts = self.policy.attempts_of(failure.position)
        limit = self.conf.max_retries if self.conf.error_policy != "retry" else None
        of = f"/{limit}" if limit is not None else ""
        return f" (retry {attempts}{of} in {self.policy.backoff(failure.position):g}s)"

    async def _dead_letter_event(self, failure: Failure) -> None:
        """At-most-once: dead-letter a failed record at once (it will not come round)."""
        event = failure.event
        assert event is not None and failure.position is not None
        self.policy.poisoned.pop(failure.position, None)
        await self.dead_letters.send(
            DeadLetter(
                event.topic,
                event.partition,
                event.offset,
                event.raw_key,
                event.raw_value,
                event.headers,
                failure.error,
                failure.agent,
                self.policy.attempts_of(failure.position),
            )
        )

    def _back_off(self, failure: Failure) -> None:
        """Pause the failed record's partition until its backoff is over (a replayed
        callback: every partition, as it is not known which task's records run it)."""
        tp, position = failure.tp, failure.position
        if failure.replayed:  # restoring tasks' partitions stay paused by the restore
            paused = [tp for tp, task in self.tasks.by_tp.items() if task.state == RUNNING]
        elif tp is None or position is None or tp not in self.tasks.by_tp:
            return
        else:
            paused = [tp]
        delay = self.policy.backoff(position)
        until = self.clock.monotonic() + delay
        self.consumer.pause(paused)
        for each in paused:
            self.backing_off[each] = max(until, self.backing_off.get(each, 0.0))
        # Nothing needs to run then (the loop looks at every turn), but a manual clock (the
        # test driver) learns that time has to pass.
        self.clock.call_later(delay, _nothing)

    async def _resume_backed_off(self) -> None:
        now = self.clock.monotonic()
        due = [tp for tp, until in self.backing_off.items() if until <= now]
        if not due:
            return
        async with self._lock:
            for tp in due:
                self.backing_off.pop(tp, None)
            # One also held back for busy agents waits for them (see _release_held).
            owned = [tp for tp in due if tp in self.tasks.by_tp and tp not in self._held]
            if owned:
                self.consumer.resume(owned)

    def _on_commit(self, committed: Mapping[TopicPartition, int]) -> None:
        self.policy.committed(committed)
        self.dead_letters.committed()

    async def _on_migrated(self, exc: BaseException) -> None:
        await self.runner.stop()
        self.backing_off.clear()  # the rejoin pauses and resumes every partition itself
        self._held.clear()
        self._held_for_retry.clear()
        self._draining = False
        self._soon.clear()
        await self.timers.cancel()
        await self.committer.task_migrated(exc)
        if self.replicas is not None:
            self.replicas.forget_active()
        await self.runner.restart()
        assert self.plan is not None
        self.consumer.unsubscribe()
        self.consumer.subscribe(self.plan.input_topics, _RebalanceListener(self))

    async def _restore(self) -> None:
        assert self._restore_consumer is not None
        async with self._lock:
            restoring = self.tasks.restoring()
            if not restoring:
                return
            await self.tasks.restore(
                restoring, self._restore_consumer, self.admin, self.conf.restore_timeout
            )
            assigned = self.consumer.assignment()
            self.consumer.resume(
                [tp for task in restoring for tp in task.partitions if tp in assigned]
            )
            done = not self.tasks.restoring()
        if done and self._rebalancing:
            self._rebalancing = False
            self.services.start_tasks(leader=self.is_leader())
            await self.app.on_rebalance_complete.send()

    # -- leader ---------------------------------------------------------------------------

    def _leader_tp(self) -> TopicPartition | None:
        plan = self.plan
        if plan is None or plan.leader_topic is None:
            return None
        return TopicPartition(plan.leader_topic, 0)

    def is_leader(self) -> bool:
        tp = self._leader_tp()
        if tp is None or self._tasks is None:
            return False
        task = self._tasks.by_tp.get(tp)
        return task is not None and task.state == RUNNING

    def _leader_task(self) -> Task | None:
        tp = self._leader_tp()
        if tp is None or self._tasks is None:
            return None
        return self._tasks.by_tp.get(tp)

    def _owns_changelog_partition(self, tp: TopicPartition) -> bool:
        """Whether a local task keeps this changelog partition (global tables)."""
        if self._tasks is None or self.plan is None:
            return False
        for task in self._tasks.tasks.values():
            if task.id.partition != tp.partition:
                continue
            for table in self.plan.tables_by_group.get(task.id.group, ()):
                if self.plan.changelog_topics[table] == tp.topic:
                    return True
        return False

    # -- what agents, topics and tables call ----------------------------------------------

    async def send(
        self,
        topic: Topic,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> SendFuture:
        raw_key, raw_value = topic.encode(key, value)
        return await self._send_raw(
            topic.name, raw_key, raw_value, headers, partition, timestamp, in_processing.get()
        )

    def send_nowait(
        self,
        topic: Topic,
        key: Any,
        value: Any,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None,
        partition: int | None,
        timestamp: float | None,
    ) -> SendFuture | None:
        """A send inside the transaction that needs no await (see
        :meth:`StreamsProducer.send_nowait`); None when the caller must await :meth:`send`.
        Outside processing it is always None: the plain producer has no such path."""
        if not in_processing.get():
            return None
        raw_key, raw_value = topic.encode(key, value)
        return self.producer.send_nowait(
            topic.name,
            raw_key,
            raw_value,
            partition,
            self._transactional_headers(headers),
            None if timestamp is None else round(timestamp * 1000),
        )

    def _transactional_headers(
        self, headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None
    ) -> list[tuple[str, bytes]] | None:
        """The caller's headers plus lineage and transaction headers (when configured)."""
        if headers is None and self._lineage_only:  # the common case, on every send
            event = current_event.get()
            if event is None or event.offset < 0:
                return None
            src_topic, src_partition = self._lineage.get((event.topic, event.partition)) or (
                self._lineage_of(event)
            )
            return [src_topic, src_partition, (H_SRC_OFFSET, b"%d" % event.offset)]
        conf = self.conf
        if headers is None and not conf.lineage_headers and not conf.transaction_headers:
            return None  # no list built and dropped
        out = _header_list(headers)
        if conf.lineage_headers:
            event = current_event.get()
            if event is not None and event.offset >= 0:
                out += self._lineage.get((event.topic, event.partition)) or (
                    self._lineage_of(event)
                )
                out.append((H_SRC_OFFSET, b"%d" % event.offset))
        if conf.transaction_headers:
            group = self._committer.group if self._committer is not None else None
            out.append((H_TXN_ID, (self.producer.transactional_id or "").encode()))
            out.append((H_GENERATION, b"%d" % (group.generation_id if group else -1)))
        return out or None

    def _lineage_of(self, event: Event) -> tuple[tuple[str, bytes], tuple[str, bytes]]:
        """The src_topic and src_partition headers of the event's partition, made once."""
        source = self._lineage[(event.topic, event.partition)] = (
            (H_SRC_TOPIC, event.topic.encode()),
            (H_SRC_PARTITION, b"%d" % event.partition),
        )
        return source

    async def _send_raw(
        self,
        topic: str,
        raw_key: bytes | None,
        raw_value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None,
        partition: int | None,
        timestamp: float | None,
        transactional: bool,
    ) -> SendFuture:
        timestamp_ms = None if timestamp is None else round(timestamp * 1000)
        if not transactional:
            # Tasks, services, pages, signal receivers: outside any transaction.
            return await self.plain.send(
                topic,
                key=raw_key,
                value=raw_value,
                partition=partition,
                headers=_header_list(headers) or None,
                timestamp_ms=timestamp_ms,
            )
        return await self.producer.send(
            topic,
            key=raw_key,
            value=raw_value,
            partition=partition,
            headers=self._transactional_headers(headers),
            timestamp_ms=timestamp_ms,
        )

    def send_soon(
        self,
        topic: Topic,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        partition: int | None = None,
    ) -> None:
        options = {"key": key, "value": value, "headers": headers, "partition": partition}
        self._soon.append((in_processing.get(), topic, options))

    async def _flush_soon(self) -> None:
        while self._soon:
            pending, self._soon = self._soon, []
            for transactional, topic, options in pending:
                raw_key, raw_value = topic.encode(options["key"], options["value"])
                await self._send_raw(
                    topic.name,
                    raw_key,
                    raw_value,
                    options["headers"],
                    options["partition"],
                    None,
                    transactional,
                )

    async def forward(
        self, topic: Topic, event: Event, *, key: Any = None, partition: int | None = None
    ) -> SendFuture:
        raw_key = event.raw_key if key is None else topic.key_codec.dumps(key)
        return await self._send_raw(
            topic.name,
            raw_key,
            event.raw_value,
            event.headers or None,
            partition,
            event.timestamp / 1000 if event.timestamp >= 0 else None,
            in_processing.get(),
        )

    async def _reply(self, event: Event, value: Any) -> None:
        """A generator agent yielded while processing an RPC request: the reply, inside the
        transaction (and to a waiter in this process at once)."""
        assert event.reply_to is not None and event.correlation_id is not None
        raw = rpc.encode_reply(event.key, value, event.correlation_id)
        await self._send_raw(event.reply_to, None, raw, None, None, None, in_processing.get())
        if self._rpc is not None:
            self._rpc.resolve(event.correlation_id, rpc.decode_reply(raw)[1])  # type: ignore[index]

    async def ask(
        self,
        topic: Topic,
        *,
        key: Any = None,
        value: Any = None,
        partition: int | None = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
        timestamp: float | None = None,
        reply_to: str | None = None,
        correlation_id: str | None = None,
    ) -> Any:
        raw_key, raw_value = topic.encode(key, value)
        if correlation_id is None:
            event = current_event.get()
            if event is not None and event.offset >= 0 and in_processing.get():
                event.asks += 1
                correlation_id = (
                    f"{self.conf.id}:{event.topic}:{event.partition}:{event.offset}:{event.asks}"
                )
            else:
                correlation_id = rpc.RpcClient.new_correlation_id()
        if isinstance(headers, Mapping):
            extra = [
                (k, v if isinstance(v, bytes) else str(v).encode()) for k, v in headers.items()
            ]
        else:
            extra = list(headers or ())
        parkable = current_parkable.get() if in_processing.get() else None
        if parkable is not None:
            parkable.park()
        try:
            return await self.rpc.ask(
                topic.name,
                key=raw_key,
                value=raw_value,
                partition=partition,
                headers=extra,
                timestamp_ms=None if timestamp is None else int(timestamp * 1000),
                correlation_id=correlation_id,
                reply_to=reply_to,
            )
        finally:
            if parkable is not None:
                parkable.unpark()

    async def channel_send(
        self,
        channel: Channel,
        *,
        key: Any = None,
        value: Any = None,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None,
    ) -> None:
        if in_processing.get():
            self._feed_channel(channel, key, value, headers)
            return
        # From a task or service: the channel's agents run under the processing lock, like a
        # batch, so that what they send joins a transaction at a quiescent point.
        async with self._lock:
            self._feed_channel(channel, key, value, headers)
            try:
                await self._settle()
            except AgentFailed as failed:
                await self._on_agent_failures(failed.failures)

    def _feed_channel(
        self,
        channel: Channel,
        key: Any,
        value: Any,
        headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None,
    ) -> None:
        source = current_event.get()
        scope: Any = source.task if source is not None else (_NoTables())
        items = tuple(headers.items()) if isinstance(headers, Mapping) else tuple(headers or ())
        event = Event(
            channel.name,
            source.partition if source is not None else 0,
            -1,
            int(self.clock.time() * 1000),
            key,
            value,
            items,
            None,
            None,
            scope,
        )
        for actor in self.runner.channel_targets(channel.name):
            actor.input.feed(event)

    def wall_time(self) -> float:
        return self.clock.time()

    @property
    def late_records(self) -> int:
        """Records a windowed table refused because their windows had closed."""
        return self.punctuator.late_records

    def table_items(self, table: Table) -> Iterator[tuple[Any, Any]]:
        store = self.stores.get(table.name)
        if store is None or self._tasks is None or self.plan is None:
            return iter(())
        return local_reads.items(
            table, store, local_reads.held_partitions(table, self.plan, self.tasks)
        )

    def table_lookup(self, table: Table, key: Any) -> Any:
        store = self.stores.get(table.name)
        if store is None or self._tasks is None or self.plan is None:
            return MISSING
        partitions = local_reads.held_partitions(table, self.plan, self.tasks)
        count = self.plan.table_partitions[table.name]
        return local_reads.lookup(
            table, store, partitions, key, self.transport.partition_for_key, count
        )

    def global_lookup(self, table: Table, key: Any) -> Any:
        if self._global is None:
            return MISSING
        return self._global.lookup(table, key)

    async def declare(self, topic: Topic) -> None:
        counts = await self.admin.partition_counts([topic.name])
        if topic.name in counts:
            return
        await self.admin.create_topics(
            [
                TopicSpec(
                    topic.name,
                    topic.partitions or self.conf.topic_partitions,
                    topic.replicas or self.conf.topic_replication_factor,
                    topic.config,
                )
            ]
        )

    def topic(self, name: str) -> Topic:
        return self.app.topic(name)

    @property
    def rebalancing(self) -> bool:
        return self._rebalancing

    @property
    def should_stop(self) -> bool:
        return self._stop_requested.is_set()

    async def sleep(self, seconds: float) -> None:
        await self._sleep_unless_stopped(seconds)

    @property
    def state_path(self) -> Path | None:
        return self.directory.path if self.directory else None


class _RebalanceListener:
    """Commit before giving partitions up; snapshot membership and rewind on assignment."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        worker = self.worker
        if worker._committer is None:
            return
        worker._rebalancing = True
        await worker.app.on_rebalance_start.send()
        async with worker._lock:
            quiet = worker.runner.all_idle() and not worker.timers.busy
            try:
                if not quiet:
                    # An agent waits for an RPC reply (or a timer runs) mid-record: it cannot
                    # commit half a record, so everything since the last commit is undone.
                    raise RuntimeError("agents are not idle")
                await worker._flush_soon()
                await worker.committer.commit()
            except Exception as exc:  # never raise into the client: abort instead
                log.warning("commit on revocation failed (%s); aborting", type(exc).__name__)
                try:
                    if not quiet:
                        await worker.runner.stop()  # else they send into the aborted transaction
                    await worker.timers.cancel()
                    await worker.committer.abort(recreate_producer=isinstance(exc, PRODUCER_BROKEN))
                except Exception:
                    await worker.producer.recreate()
                if not quiet:
                    await worker.runner.restart()
            worker._soon.clear()
            worker._held.clear()
            worker._held_for_retry.clear()
            worker._draining = False
            worker.tasks.close_all()
            worker.committer.group = None
            worker.dead_letters.aborted()
            worker.backing_off.clear()  # a new assignment starts unpaused
        await worker.app.on_partitions_revoked.send(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        worker = self.worker
        if worker._committer is None:
            return
        worker._rebalancing = True
        async with worker._lock:
            consumer = worker.consumer
            worker.committer.group = consumer.group_metadata()
            worker.metrics.rebalances += 1
            tps = sorted(TopicPartition(tp[0], tp[1]) for tp in assigned)
            worker.policy.keep_only(tps)  # decisions about partitions now elsewhere are moot
            tasks = worker.tasks.assign(tps)
            worker.runner.assign({(tp.topic, tp.partition) for tp in tps})
            if worker._global is not None:
                worker._global.reposition()
            if worker.replicas is not None:
                # Standbys (before any restore), fencing departed members (before reading
                # committed offsets), probing: runtime/replicas.py.
                await worker.replicas.on_assignment(consumer)
            if tps:
                await self._start_from_committed(tps)
            log.info(
                "assigned %d partitions (%d new tasks), generation %s",
                len(tps),
                len(tasks),
                worker.committer.group.generation_id if worker.committer.group else "?",
            )
        leader = worker._leader_tp()
        if leader is not None and leader in tps:
            log.info(
                "this worker is the leader (holds %s[0]): on_leader timers run here", leader[0]
            )
        await worker.app.on_partitions_assigned.send(assigned)
        if not tps:
            worker._rebalancing = False
            await worker.app.on_rebalance_complete.send()

    async def _start_from_committed(self, tps: list[TopicPartition]) -> None:
        worker = self.worker
        consumer = worker.consumer
        consumer.pause(tps)  # until the tables are restored
        if worker.replicas is not None:
            # A predecessor no member knew of would hold these offsets and the changelogs'
            # tails until its transaction timed out (runtime/fencing.py).
            await worker.replicas.fence_predecessors(consumer, tps)
        found = await consumer.committed_offsets_with_metadata(tps)
        missing = [tp for tp, committed in found.items() if committed is None]
        starts: dict[TopicPartition, int] = {}
        if missing:
            if worker.conf.consumer_auto_offset_reset == "latest":
                starts = await worker.admin.end_offsets(missing)
            else:
                starts = await worker.admin.beginning_offsets(missing)
        for tp in tps:
            task = worker.tasks.by_tp[tp]
            committed = found.get(tp)
            if committed is None:
                offset = starts.get(tp, 0)
                metadata = decode_metadata(None)
            else:
                offset = committed.offset
                metadata = decode_metadata(committed.metadata)
            task.committed[tp] = offset
            task.offsets[tp] = offset
            task.restore_times({tp: metadata})  # stream time resumes where it committed
            consumer.seek(tp, offset)


def _header_list(
    headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None,
) -> list[tuple[str, bytes]]:
    """Headers as the producer takes them: a list of (name, bytes) pairs."""
    if headers is None:
        return []
    if isinstance(headers, Mapping):
        return [(k, v if isinstance(v, bytes) else str(v).encode()) for k, v in headers.items()]
    return list(headers)
