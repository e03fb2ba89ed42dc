"""What a worker's start makes, held together: the clients, the plan, the tasks, and the
concerns that need them (flow control, dispatch, batches, failures, the loop), wired onto them
by :func:`wire`.

A worker either has all of it (``Worker.parts`` is a :class:`Started`) or none of it (None:
not started, or its start failed part-way and closed what it had opened). So nothing outside
``Worker.start`` and ``Worker._shutdown`` deals with a half-started worker, and none of these
collaborators is ``None`` where it is used.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streams_app.runtime import guarantees
from streams_app.runtime.assignor import EndOffsets, StreamsAssignor
from streams_app.runtime.dead_letters import DeadLetters
from streams_app.runtime.global_tables import GlobalTables
from streams_app.runtime.measured_commit import MeasuredCommitter
from streams_app.runtime.no_inputs import NoInputs
from streams_app.runtime.placement import PlacementConfig
from streams_app.runtime.producer import StreamsProducer
from streams_app.runtime.replicas import Replicas
from streams_app.runtime.task import RUNNING, Task
from streams_app.runtime.task_manager import TaskManager
from streams_app.runtime.worker.batch import BatchProcessor
from streams_app.runtime.worker.failures import FailureHandler
from streams_app.runtime.worker.flow import FlowControl
from streams_app.runtime.worker.loop import Loop
from streams_app.runtime.worker.records import RecordDispatcher
from streams_app.settings import Settings
from streams_app.state.directory import StateDirectory
from streams_app.topology.description import TopologyDescription
from streams_app.topology.plan import TopologyPlan
from streams_app.transport.base import AdminClient, ConsumerClient, TopicPartition

if TYPE_CHECKING:
    from streams_app.runtime.worker.root import Worker
    from streams_app.transport.base import Transport


@dataclass
class Started:
    directory: StateDirectory
    description: TopologyDescription
    plan: TopologyPlan
    admin: AdminClient
    producer: StreamsProducer
    dead_letters: DeadLetters
    restore_consumer: ConsumerClient
    consumer: ConsumerClient
    tasks: TaskManager
    committer: MeasuredCommitter
    replicas: Replicas
    #: Only when the app has global tables.
    global_tables: GlobalTables | None
    flow: FlowControl
    dispatcher: RecordDispatcher
    batch: BatchProcessor
    failures: FailureHandler
    loop: Loop

    @property
    def leader_tp(self) -> TopicPartition | None:
        """Partition 0 of Faust's leader topic (its owner runs ``on_leader`` timers), if used."""
        topic = self.plan.leader_topic
        return None if topic is None else TopicPartition(topic, 0)

    def leader_task(self) -> Task | None:
        tp = self.leader_tp
        return None if tp is None else self.tasks.by_tp.get(tp)

    def is_leader(self) -> bool:
        task = self.leader_task()
        return task is not None and task.state == RUNNING


def owns_changelog_partition(plan: TopologyPlan, tasks: TaskManager, tp: TopicPartition) -> bool:
    """Whether a local task keeps this changelog partition (the global tables' reader leaves
    those to the task)."""
    for task in tasks.tasks.values():
        if task.id.partition != tp.partition:
            continue
        for table in plan.tables_by_group.get(task.id.group, ()):
            if plan.changelog_topics[table] == tp.topic:
                return True
    return False


def group_assignor(
    conf: Settings,
    plan: TopologyPlan,
    directory: StateDirectory,
    tasks: TaskManager,
    end_offsets: EndOffsets,
) -> StreamsAssignor:
    """The group's own assignor (runtime/assignor.py). It runs whatever
    table_standby_replicas is: with 0 it places no standbys, but its sticky, lag-aware
    placement (warm-ups included) and the fencing of departed members' transactional ids serve
    every failover: a new owner does not wait out a dead worker's transaction timeout. Range is
    offered second, for a group that still has members of an older version."""
    return StreamsAssignor(
        plan,
        process_id=directory.process_id,
        transactional_id=(
            guarantees.transactional_id(conf, directory.process_id) if conf.exactly_once else None
        ),
        local_offsets=tasks.local_offsets,
        end_offsets=end_offsets,
        placement=PlacementConfig(
            standby_replicas=conf.table_standby_replicas,
            acceptable_recovery_lag=conf.acceptable_recovery_lag,
            max_warmup_replicas=conf.max_warmup_replicas,
        ),
        probing_interval=conf.probing_rebalance_interval,
    )


def input_consumer(
    transport: Transport,
    conf: Settings,
    plan: TopologyPlan,
    assignor: StreamsAssignor,
    application_server: str | None,
) -> ConsumerClient:
    """The group consumer of the input topics; an app of timers, tasks and channels alone reads
    no topic and joins no consumer group (runtime/no_inputs.py)."""
    if not plan.input_topics:
        return NoInputs()
    config = guarantees.consumer_config(conf)
    return transport.consumer(
        dataclasses.replace(config, assignor=assignor, application_server=application_server)
    )


def wire(
    worker: Worker,
    *,
    directory: StateDirectory,
    description: TopologyDescription,
    plan: TopologyPlan,
    admin: AdminClient,
    producer: StreamsProducer,
    dead_letters: DeadLetters,
    restore_consumer: ConsumerClient,
    consumer: ConsumerClient,
    tasks: TaskManager,
    committer: MeasuredCommitter,
    replicas: Replicas,
    global_tables: GlobalTables | None,
    stop: asyncio.Event,
    restore: Callable[[], Awaitable[None]],
    resubscribe: Callable[[], None],
) -> Started:
    """The worker's concerns, each given what it uses (constructor injection, no back
    references to the worker but the callbacks named here)."""
    conf, runner, clock = worker.conf, worker.runner, worker.clock
    flow = FlowControl(consumer, runner, clock)
    dispatcher = RecordDispatcher(
        worker.app.topics, runner, worker.policy, flow, dead_letters, worker.metrics
    )
    batch = BatchProcessor(
        conf,
        clock,
        consumer,
        tasks,
        dispatcher,
        flow,
        worker.policy,
        runner,
        worker.timers,
        worker.punctuator,
        committer,
        worker.collector,
        worker.metrics,
        worker.pacer,
        worker.watchdog,
    )
    failures = FailureHandler(
        conf,
        worker.policy,
        runner,
        worker.timers,
        flow,
        worker.collector,
        tasks,
        committer,
        dead_letters,
        replicas,
        resubscribe=resubscribe,
    )
    loop = Loop(
        conf,
        clock,
        worker.lock,
        stop,
        worker.pacer,
        consumer,
        producer,
        tasks,
        committer,
        dead_letters,
        worker.timers,
        flow,
        batch,
        worker.collector,
        failures,
        restore=restore,
        sleep=worker.sleep_unless_stopped,
    )
    return Started(
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
        flow=flow,
        dispatcher=dispatcher,
        batch=batch,
        failures=failures,
        loop=loop,
    )
