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
from contextvars import Token
from typing import TYPE_CHECKING

from streams_app.codecs import (
    DecodeError,
    TombstoneError,
    fast_json_decode,
    finishes_only_faust,
    json_loads,
    payload_finisher,
    reads_raw_text,
)
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
        # Text keys are decoded inline; a key that is not UTF-8 goes to ``load_key`` for the
        # codec's own error.
        text_keys = reads_raw_text(topic.key_codec)
        from_payload = getattr(topic.value_codec, "from_payload", None)
        # A JSON topic's values are parsed once, and the RPC envelope looked for in the object
        # (None: another codec; its values' bytes are scanned for the envelope instead).
        finish = payload_finisher(topic.value_codec)
        # Almost every JSON topic's finisher changes only objects with Faust's metadata.
        faust_only = finish is not None and finishes_only_faust(finish)
        tombstones = topic.accepts_tombstones
        streams = [
            actors[tp.partition % len(actors)].input for actors in self.runner.actor_lists(tp.topic)
        ]
        # Each forwarder with its ``forward_nowait`` (None: it has none): a join handles almost
        # every record without an await, so it saves a coroutine per record (``Feeder``).
        forwarders = [
            (forwarder, getattr(forwarder, "forward_nowait", None))
            for forwarder in self.runner.forwarders.get(tp.topic, ())
        ]
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
        # With no agent busy the events are handed over in one go per stream when the run is
        # done (``Stream.feed_all``), or before anything is awaited (a dead letter): the agents
        # get the same events in the same order, and none of them runs in between anyway.
        # Busy agents get them one by one, counted against ``limit``; so do group_by forwards,
        # awaited after every record.
        #
        # A join that is the topic's only feeder takes the run the same way, after the agents
        # (``JoinProcessor.run``: its results sent a run at a time). Two feeders keep the
        # record-by-record order between them (a join sees a table built from the same
        # topic as it was after that record), and so does a busy agent.
        run_feeder = None
        if limit is None and len(forwarders) == 1:
            run_feeder = getattr(forwarders[0][0], "forward_run", None)
        events: list[Event] | None = (
            [] if limit is None and (not forwarders or run_feeder is not None) else None
        )
        # Stream time (runtime.stream_time): the record's time, and the partition's largest.
        timestamp_fn = topic.timestamp_fn
        times = task.partition_times
        partition_time = times.get(tp, -1)
        # The next offset to process: kept here, and stored in task.offsets before anything is
        # awaited and when the run ends (one dict store per run instead of one per record).
        position = expected
        # While the forwarders run, the record is in processing (``in_processing``) and is the
        # current event: set at the run's first forwarded record and kept until the run ends
        # or a dead letter is sent, ``current_event`` moved on at each record. A ContextVar's
        # set or reset copies the context: four a record cost more than the forward itself.
        processing: tuple[Token[bool], Token[Event | None]] | None = None

        def leave_processing() -> None:
            nonlocal processing
            if processing is not None:
                scope, token = processing
                current_event.reset(token)
                in_processing.reset(scope)
                processing = None

        async def hand_over(run: list[Event]) -> None:
            """A run of events to the run feeder (if any), then to the agents."""
            nonlocal processing, position
            if run_feeder is not None:
                offsets[tp] = run[0].offset
                if processing is None:
                    processing = (in_processing.set(True), current_event.set(None))
                try:
                    rest = run_feeder(run)
                    if rest is not None:
                        await rest
                except Exception as exc:
                    # The feeder left the record it failed on current; the agents get the
                    # run up to it, as they would have one by one.
                    current = current_event.get()
                    failed = run[0] if current is None else current
                    done = next((i for i, e in enumerate(run) if e is failed), 0)
                    for stream in streams:
                        stream.feed_all(run[: done + 1])
                    run.clear()
                    offsets[tp] = position = failed.offset
                    label = forwarders[0][0].label
                    raise AgentFailed([Failure.of(label, exc, failed)]) from exc
            for stream in streams:
                stream.feed_all(run)
            run.clear()

        async def skip(record: RecordLike, error: BaseException, agent: str | None, n: int) -> int:
            """Dead-letter ``record`` (what came before it handed over first): its next offset."""
            if events:
                await hand_over(events)
            leave_processing()
            offsets[tp] = record.offset
            await self.dead_letter(record, error, agent, n)
            offsets[tp] = record.offset + 1
            return record.offset + 1

        topic_name, partition_no = tp.topic, tp.partition
        new_event = object.__new__
        try:
            for record in records:
                offset = record.offset
                if offset < expected:
                    continue  # fetched before a rewind or rebalance: already processed
                if limit is not None and any(not s.idle and s.pending >= limit for s in streams):
                    offsets[tp] = position
                    self.flow.hold(task, tp, offset)
                    break
                if poisoned:
                    failure = policy.poison_for(tp.topic, tp.partition, offset)
                    if failure is not None:  # decided before the abort that brought it round
                        attempts = policy.attempts_of((tp.topic, tp.partition, offset))
                        position = await skip(record, failure.error, failure.agent, attempts)
                        continue
                raw_key, raw_value = record.key, record.value
                headers = record.headers
                if type(headers) is not tuple:
                    headers = tuple(headers)
                reply_to = correlation_id = None
                try:
                    if raw_key is None:
                        key = None
                    elif text_keys and type(raw_key) is bytes:
                        try:
                            key = raw_key.decode()
                        except UnicodeDecodeError:
                            key = load_key(raw_key)
                    else:
                        key = load_key(raw_key)
                    if headers:
                        reply_to, correlation_id = rpc.request_headers(headers)
                    envelope = None
                    if raw_value is None:
                        if not tombstones:
                            raise TombstoneError(
                                f"a record without a value (tombstone) on {tp.topic}, whose "
                                "values are a Record model"
                            )
                        value = None
                    elif finish is not None:
                        try:  # json_loads, its common case inline (a call fewer a record)
                            payload = fast_json_decode(raw_value)
                        except Exception:
                            payload = json_loads(raw_value)  # the standard library decides
                        if type(payload) is dict and "__faust" in payload:
                            if reply_to is None:
                                envelope = rpc.envelope_of(payload)
                            if envelope is None:
                                value = finish(payload)
                        elif faust_only:
                            value = payload
                        else:
                            value = finish(payload)
                    elif reply_to is None and raw_value[:1] == b"{":
                        envelope = rpc.unwrap_envelope(raw_value)
                        if envelope is None:
                            value = load_value(raw_value)
                    else:
                        value = load_value(raw_value)
                    if envelope is not None:
                        reply_to, correlation_id, payload = envelope
                        value = from_payload(payload) if from_payload is not None else payload
                except Exception as exc:  # a poison record: dead-letter it, never crash-loop
                    error = exc if isinstance(exc, DecodeError) else DecodeError(str(exc))
                    position = await skip(record, error, None, 0)
                    continue
                timestamp = record.timestamp
                if timestamp_fn is not None or timestamp < 0:
                    try:
                        timestamp = topic.timestamp_of(timestamp, value, partition_time)
                    except InvalidTimestamp as exc:
                        position = await skip(record, exc, None, 0)
                        continue
                if timestamp > partition_time:
                    partition_time = times[tp] = timestamp
                # Event(...) without the class call: CPython 3.11 calls a Python ``__init__``
                # through the type's slot, unspecialised, which costs as much again as the
                # slot stores themselves (0.25 against 0.14 us). Every slot is set here
                # (``tests/unit/test_dispatch_events.py`` holds it to Event's slots).
                event = new_event(Event)
                event.topic = topic_name
                event.partition = partition_no
                event.offset = offset
                event.timestamp = timestamp
                event.key = key
                event.value = value
                event.headers = headers
                event.raw_key = raw_key
                event.raw_value = raw_value
                event.task = task
                event.reply_to = reply_to
                event.correlation_id = correlation_id
                event.asks = 0
                if events is not None:
                    events.append(event)
                else:
                    for stream in streams:
                        stream.feed(event)
                if forwarders and run_feeder is None:
                    offsets[tp] = offset
                    if processing is None:
                        processing = (in_processing.set(True), current_event.set(event))
                    else:
                        current_event.set(event)
                    try:
                        for forwarder, nowait in forwarders:
                            if nowait is None:
                                await forwarder.forward(event)
                            else:
                                rest = nowait(event)
                                if rest is not None:
                                    await rest
                    except Exception as exc:
                        raise AgentFailed([Failure.of(forwarder.label, exc, event)]) from exc
                position = offset + 1
                count += 1
            if events and run_feeder is not None:
                await hand_over(events)
        finally:
            leave_processing()
            if position > expected:
                offsets[tp] = position
            if events:
                for stream in streams:
                    stream.feed_all(events)
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
