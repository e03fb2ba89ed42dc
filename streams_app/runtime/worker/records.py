"""Record dispatch: a run of one partition's fetched records -> decoded events -> the agents.

The concern it owns (Kafka Streams' ``RecordQueue`` and ``RecordDeserializer`` with the source
node's hand-over): for each record, skip what was processed before a rewind, stop handing out to
busy agents (the partition is held: ``flow.py``), dead-letter a record decided before the abort
that brought it round, decode key and value (RPC envelope and reply headers, tombstones), give
it its time (the topic's ``timestamp_fn``, the partition's stream time), dead-letter what cannot
be decoded or timed, build the :class:`~streams_app.topology.contract.Event`, feed it to every
agent reading the topic and to the ``group_by`` forwarders, and move the task's offset past it.

This is the per-record hot path: everything a record needs is looked up once per run, into
locals, before the loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from streams_app.codecs import DecodeError, TombstoneError
from streams_app.errors import InvalidTimestamp
from streams_app.runtime import rpc
from streams_app.runtime.actor import AgentRunner
from streams_app.runtime.dead_letters import DeadLetter, DeadLetters
from streams_app.runtime.errors_policy import ErrorPolicy, Failure
from streams_app.runtime.metrics import WorkerMetrics
from streams_app.runtime.scope import in_processing
from streams_app.runtime.task import Task
from streams_app.runtime.worker.failures import AgentFailed
from streams_app.runtime.worker.flow import FlowControl
from streams_app.topology.contract import Event, current_event
from streams_app.transport.base import RecordLike, TopicPartition

if TYPE_CHECKING:
    from streams_app.app.topic import Topic

#: Records an agent parked on an RPC reply may have queued before its partition is held back.
BUSY_INBOX = 8


class RecordDispatcher:
    def __init__(
        self,
        topics: Mapping[str, Topic],
        runner: AgentRunner,
        policy: ErrorPolicy,
        flow: FlowControl,
        dead_letters: DeadLetters,
        metrics: WorkerMetrics,
    ) -> None:
        #: The app's topics by name (its repartition topics included, once declared).
        self.topics = topics
        self.runner = runner
        self.policy = policy
        self.flow = flow
        self.dead_letters = dead_letters
        self.metrics = metrics
        #: Records handed to the agents since the last time they were all done (the batch
        #: counts them once they are: ``batch.py``).
        self.fed = 0

    async def dispatch(self, task: Task, tp: TopicPartition, records: Sequence[RecordLike]) -> int:
        topic = self.topics[tp.topic]
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
        limit = (
            0 if self.flow.draining else (BUSY_INBOX if any(s.parked for s in streams) else None)
        )
        # Stream time (runtime.stream_time): the record's time, and the partition's largest.
        timestamp_fn = topic.timestamp_fn
        times = task.partition_times
        partition_time = times.get(tp, -1)
        for record in records:
            offset = record.offset
            if offset < expected:
                continue  # fetched before a rewind or rebalance: already processed
            if limit is not None and any(not s.idle and s.pending >= limit for s in streams):
                self.flow.hold(task, tp, offset)
                break
            if poisoned:
                failure = policy.poison_for(tp.topic, tp.partition, offset)
                if failure is not None:  # decided before the abort that brought it round
                    position = (tp.topic, tp.partition, offset)
                    await self.dead_letter(
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
                await self.dead_letter(record, error, None, 0)
                offsets[tp] = offset + 1
                continue
            timestamp = record.timestamp
            if timestamp_fn is not None or timestamp < 0:
                try:
                    timestamp = topic.timestamp_of(timestamp, value, partition_time)
                except InvalidTimestamp as exc:
                    await self.dead_letter(record, exc, None, 0)
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
        self.fed += count
        self.metrics.count_in(tp.topic, count)
        return count

    async def dead_letter(
        self, record: RecordLike, error: BaseException, agent: str | None, attempts: int = 0
    ) -> None:
        """``record`` to its topic's dead-letter topic, inside the transaction."""
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
