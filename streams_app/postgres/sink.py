"""The PostgreSQL sink's runner: Kafka -> PostgreSQL, exactly once.

One fetched batch is one database transaction: the handler's business writes, then the batch's
next offsets in the offsets table (a conditional update that fails if a newer claim owns a
partition: :mod:`streams_app.postgres.offsets`), then COMMIT. The sink reads ``read_committed``
and commits no offsets to Kafka; on every assignment it claims its partitions in the database
and seeks to the offsets stored there. So a crash anywhere leaves either the batch's rows *and*
its offsets, or neither, and the next owner starts exactly after the last landed record.

It runs as its own process (``streams-app -A module sink NAME``), with its own consumer group
(``<app id>-sink-<name>``), not inside the exactly-once worker: a slow or unreachable database
must not hold up the worker's 100 ms Kafka transactions (or time them out), the sink's scaling
and failures are the database's (as Kafka Connect runs sinks apart from Streams apps), and
either can be restarted alone. :class:`SinkRunner` also runs inside any asyncio program.

Failures:

- the handler raises: the transaction rolls back, the batch is fetched again after a backoff
  (``max_retries`` times), then the error policy decides: ``retry`` (go on retrying),
  ``stop`` (the sink stops with an error naming the batch), ``dlq`` (run the batch again one
  record per savepoint; the records that still fail go to the dead-letter topic, the rest
  commit with the offsets);
- a record that does not decode goes to the dead-letter topic in any case;
- the database goes away: the batch is dropped, the connection retried with backoff (the log
  names ``host:port/db``, never the DSN), the partitions claimed again (a commit whose outcome
  we never heard about is then either in the stored offsets or not), nothing is lost;
- serialization failures and deadlocks (40001, 40P01): rolled back and retried at once;
- the commit is refused (fenced): rolled back, the sink leaves and rejoins the group.

Dead letters are sent (and acknowledged) before the database commit: a crash between the two
sends them again, so the dead-letter topic is at-least-once; its ``dlq.source.*`` headers name
each record's origin, which makes repeats recognisable.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from streams_app.aio import within
from streams_app.app.postgres import PostgresSink, SinkRecord
from streams_app.codecs import DecodeError
from streams_app.errors import ConfigError, StreamsAppError, WorkerStopped
from streams_app.postgres import schema
from streams_app.postgres.connection import (
    close_quietly,
    connect,
    describe,
    error_summary,
    is_connection_lost,
)
from streams_app.postgres.crashpoints import crash_point
from streams_app.postgres.offsets import FencedError, OffsetStore, OffsetUpdate
from streams_app.runtime.errors_policy import Decision, ErrorPolicy, Failure, dead_letter_headers
from streams_app.transport.base import (
    AdminClient,
    ConsumerClient,
    ConsumerConfig,
    GroupMetadata,
    ProducerClient,
    ProducerConfig,
    RecordLike,
    TopicPartition,
    TopicSpec,
    Transport,
)
from streams_app.transport.errors import TransportError

log = logging.getLogger(__name__)

#: Serialization failure, deadlock: the transaction may simply be run again.
_TRANSIENT_STATES = ("40001", "40P01")
_POLL_MS = 100


class DataLossError(StreamsAppError):
    """The stored offset is outside the topic's records (retention deleted them, or the topic
    was recreated): landing anything would hide that records were never landed."""


@dataclass
class _Owned:
    """A partition this process has claimed in the database."""

    generation: int
    #: ``next_offset`` as stored (None: nothing landed yet): the commit's expected value.
    stored: int | None
    #: The next offset to land (the stored one, or the log start for a fresh partition).
    next: int


class _HandlerFailed(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__(error_summary(error))
        self.error = error


class SinkRunner:
    """Runs one :class:`~streams_app.app.postgres.PostgresSink` until :meth:`request_stop`."""

    def __init__(
        self,
        sink: PostgresSink,
        *,
        transport: Transport | None = None,
        dsn: str | None = None,
    ) -> None:
        self.sink = sink
        self.conf = dataclasses.replace(sink.app.conf, error_policy=sink.error_policy)
        self.transport = transport or sink.app.transport()
        self.dsn = dsn or sink.dsn
        self.where = describe(self.dsn)
        self.name = sink.name
        self.topic = sink.topic.name
        self.dead_letter_topic = self.conf.dead_letter_topic.replace("{topic}", self.topic)
        self.store = OffsetStore(sink.offsets_table, sink.group_id)
        self.policy = ErrorPolicy(self.conf)
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._consumer: ConsumerClient | None = None
        self._producer: ProducerClient | None = None
        self._admin: AdminClient | None = None
        self._group: GroupMetadata | None = None
        self._owned: dict[TopicPartition, _Owned] = {}
        self._unclaimed: set[TopicPartition] = set()
        self._rejoin = False
        self._backoff_until = 0.0
        self._reconnect_at = 0.0
        self._reconnect_delay = 0.5
        # what tests and operators read
        self.records_landed = 0
        self.batches_committed = 0
        self.dead_lettered = 0
        self.fenced = 0
        self.reconnects = 0

    # -- lifecycle ----------------------------------------------------------------------

    def request_stop(self) -> None:
        """Graceful stop: finish the batch being landed, leave the group, close."""
        self._stop.set()

    async def run(self) -> None:
        try:
            await self.start()
            await self._loop()
        finally:
            await self._shutdown()
            self.stopped.set()

    async def start(self) -> None:
        log.info("starting sink %s: %s -> PostgreSQL at %s", self.name, self.topic, self.where)
        self._conn = await self._connect(retry_forever=True)
        await schema.ensure_offsets_table(self._conn, self.sink.offsets_table)
        if self.sink.schema:
            await schema.apply(self._conn, self.sink.schema)
        admin = self.transport.admin()
        await admin.start()  # raises BrokerUnavailable naming the address
        self._admin = admin
        await self._ensure_topics(admin)
        producer = self.transport.producer(
            ProducerConfig(
                transactional_id=None, acks="all", enable_idempotence=True, client_id=self._cid()
            )
        )
        await producer.start()
        self._producer = producer
        consumer = self.transport.consumer(
            ConsumerConfig(
                group_id=self.sink.group_id,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=int(self.conf.session_timeout * 1000),
                heartbeat_interval_ms=int(self.conf.heartbeat_interval * 1000),
                max_poll_interval_ms=int(self.conf.max_poll_interval * 1000),
                max_poll_records=self.sink.max_batch,
                fetch_max_wait_ms=100,
                client_id=self._cid(),
            )
        )
        await consumer.start()
        self._consumer = consumer
        consumer.subscribe([self.topic], _Listener(self))
        self.started.set()
        log.info("sink %s started; inputs %s (group %s)", self.name, self.topic, self.sink.group_id)

    def _cid(self) -> str:
        return self.sink.group_id

    async def _ensure_topics(self, admin: AdminClient) -> None:
        """Create the input (as the worker would) and the dead-letter topic if missing."""
        topic = self.sink.topic
        existing = await admin.partition_counts([self.topic, self.dead_letter_topic])
        partitions = existing.get(self.topic) or topic.partitions or self.conf.topic_partitions
        specs = []
        replicas = topic.replicas or self.conf.topic_replication_factor
        if self.topic not in existing:
            specs.append(TopicSpec(self.topic, partitions, replicas, topic.config))
        if self.dead_letter_topic not in existing:
            specs.append(TopicSpec(self.dead_letter_topic, partitions, replicas))
        if specs:
            await admin.create_topics(specs)

    async def _shutdown(self) -> None:
        async with self._lock:
            await close_quietly(
                self._consumer.stop if self._consumer is not None else None,
                self._producer.stop if self._producer is not None else None,
                self._admin.close if self._admin is not None else None,
                self._conn.close if self._conn is not None else None,
            )
        log.info(
            "sink %s stopped: %d records landed in %d transactions, %d dead-lettered, "
            "%d commits refused",
            self.name,
            self.records_landed,
            self.batches_committed,
            self.dead_lettered,
            self.fenced,
        )

    # -- the loop -----------------------------------------------------------------------

    @property
    def consumer(self) -> ConsumerClient:
        assert self._consumer is not None, "sink not started"
        return self._consumer

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            if self._rejoin:
                self._do_rejoin()
            if self._conn is None and loop.time() >= self._reconnect_at:
                await self._reconnect()
            if self._conn is not None and self._unclaimed:
                await self._claim()
            if self._backoff_until:
                delay = self._backoff_until - loop.time()
                if delay > 0:
                    await self._sleep(min(delay, 0.5))
                    continue
                self._backoff_until = 0.0
            # Keeps the group membership alive while the database is down (all paused).
            batch = await self.consumer.getmany(
                timeout_ms=_POLL_MS, max_records=self.sink.max_batch
            )
            if batch:
                async with self._lock:
                    await self._land(batch)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await within(self._stop.wait(), seconds)

    # -- the database connection ----------------------------------------------------------

    async def _connect(self, *, retry_forever: bool) -> psycopg.AsyncConnection[Any]:
        timeout_ms = int(self.sink.idle_in_transaction_timeout * 1000)
        return await connect(
            self.dsn,
            what=f"sink {self.name}",
            options=f"-c idle_in_transaction_session_timeout={timeout_ms}",
            stopping=self._stop.is_set,
            attempts=None if retry_forever else 1,
        )

    async def _reconnect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._conn = await self._connect(retry_forever=False)
        except StreamsAppError as exc:
            if isinstance(exc, ConfigError):
                raise
            log.warning(
                "sink %s: PostgreSQL at %s still unavailable; retrying in %.1fs",
                self.name,
                self.where,
                self._reconnect_delay,
            )
            self._reconnect_at = loop.time() + self._reconnect_delay
            self._reconnect_delay = min(self._reconnect_delay * 2, 15.0)
            return
        self.reconnects += 1
        self._reconnect_delay = 0.5
        log.info("sink %s: reconnected to PostgreSQL at %s", self.name, self.where)

    def _lost_connection(self, exc: BaseException) -> None:
        """Drop the connection and everything owned with it: claims are taken again after
        reconnecting (a commit we never heard back from is then in the stored offsets, or not)."""
        log.warning(
            "sink %s: lost PostgreSQL at %s (%s); the batch will be landed after reconnecting",
            self.name,
            self.where,
            error_summary(exc),
        )
        conn, self._conn = self._conn, None
        if conn is not None:
            asyncio.get_running_loop().create_task(_close_quietly(conn))
        lost = set(self._owned) | self._unclaimed
        self._owned.clear()
        self._unclaimed = lost
        if lost:
            self.consumer.pause(lost)
        self._reconnect_at = 0.0

    # -- ownership ----------------------------------------------------------------------

    def _owner(self) -> str:
        member = self._group.member_id if self._group else ""
        return f"{member} {socket.gethostname()}/{os.getpid()}"

    async def _claim(self) -> None:
        async with self._lock:
            tps = sorted(self._unclaimed)
            conn, group, admin = self._conn, self._group, self._admin
            if not tps or conn is None or admin is None:
                return
            try:
                claims = await self.store.claim(
                    conn,
                    tps,
                    kafka_generation=group.generation_id if group else -1,
                    owner=self._owner(),
                )
            except psycopg.errors.LockNotAvailable:
                log.info(
                    "sink %s: a previous owner's transaction still holds offset rows of %s; "
                    "waiting (it ends with that transaction, at the latest after "
                    "idle_in_transaction_session_timeout)",
                    self.name,
                    self.topic,
                )
                return
            except psycopg.Error as exc:
                if is_connection_lost(exc, conn):
                    self._lost_connection(exc)
                    return
                raise
            begins = await admin.beginning_offsets(tps)
            ends = await admin.end_offsets(tps)
            for tp in tps:
                claim = claims[tp]
                stored = claim.next_offset
                if stored is not None and not begins[tp] <= stored <= ends[tp]:
                    raise DataLossError(
                        f"sink {self.name}: {tp.topic}[{tp.partition}] has records "
                        f"{begins[tp]}..{ends[tp]} but the database says the next one to land "
                        f"is {stored}: "
                        + (
                            "retention deleted records before they were landed"
                            if stored < begins[tp]
                            else "the topic was recreated"
                        )
                        + f". Fix: decide what to land and set next_offset in "
                        f"{self.sink.offsets_table} (group_id {self.sink.group_id!r}) by hand"
                    )
                start = begins[tp] if stored is None else stored
                self.consumer.seek(tp, start)
                self._owned[tp] = _Owned(claim.generation, stored, start)
            self._unclaimed.clear()
            self.consumer.resume(tps)
            generations = sorted({c.generation for c in claims.values()})
            log.info(
                "sink %s: assigned %d partitions of %s, claimed in the database at generation "
                "%s (consumer-group generation %s)",
                self.name,
                len(tps),
                self.topic,
                generations[0] if len(generations) == 1 else f"{generations[0]}-{generations[-1]}",
                group.generation_id if group else "?",
            )

    def _do_rejoin(self) -> None:
        self._rejoin = False
        self._owned.clear()
        self._unclaimed.clear()
        self.consumer.unsubscribe()
        self.consumer.subscribe([self.topic], _Listener(self))

    # -- landing a batch ----------------------------------------------------------------

    async def _land(self, batch: Mapping[TopicPartition, Sequence[RecordLike]]) -> None:
        selected: list[tuple[TopicPartition, list[RecordLike]]] = []
        for tp, records in batch.items():
            owned = self._owned.get(tp)
            if owned is None or not records:
                continue  # revoked, or not claimed yet: the owner fetches them
            fresh = [r for r in records if r.offset >= owned.next]
            if fresh:
                selected.append((TopicPartition(tp[0], tp[1]), fresh))
        if not selected:
            return
        topic = self.sink.topic
        load_key, load_value = topic.key_codec.loads, topic.value_codec.loads
        good: list[tuple[RecordLike, SinkRecord]] = []
        bad: list[tuple[RecordLike, BaseException]] = []
        updates = []
        for tp, records in selected:
            owned = self._owned[tp]
            for r in records:
                try:
                    key = None if r.key is None else load_key(r.key)
                    value = None if r.value is None else load_value(r.value)
                except Exception as exc:  # a poison record: dead-letter it, never crash-loop
                    bad.append((r, exc if isinstance(exc, DecodeError) else DecodeError(str(exc))))
                    continue
                good.append(
                    (
                        r,
                        SinkRecord(
                            r.topic,
                            r.partition,
                            r.offset,
                            r.timestamp,
                            key,
                            value,
                            tuple(r.headers),
                        ),
                    )
                )
            updates.append(OffsetUpdate(tp, owned.generation, owned.stored, records[-1].offset + 1))
        await self._commit(good, bad, updates, isolate=False)

    async def _commit(
        self,
        good: list[tuple[RecordLike, SinkRecord]],
        bad: list[tuple[RecordLike, BaseException]],
        updates: list[OffsetUpdate],
        *,
        isolate: bool,
    ) -> None:
        conn = self._conn
        if conn is None:
            return
        handler = self.sink.handler
        rejected: list[tuple[RecordLike, BaseException]] = []
        try:
            async with conn.transaction():
                if isolate:
                    for raw, record in good:
                        try:
                            async with conn.transaction():  # a savepoint per record
                                await handler(conn, [record])
                        except Exception as exc:
                            if is_connection_lost(exc, conn) or _transient(exc):
                                raise
                            rejected.append((raw, exc))
                elif good:
                    try:
                        await handler(conn, [record for _, record in good])
                    except Exception as exc:
                        raise _HandlerFailed(exc) from exc
                await self.store.commit(conn, updates)
                if bad or rejected:
                    await self._dead_letter(bad + rejected)
                crash_point("sink.before_commit")
        except FencedError as exc:
            self.fenced += 1
            log.warning("sink %s: %s; rolled back, rejoining the group", self.name, exc)
            self._rejoin = True
            return
        except Exception as exc:
            error = exc.error if isinstance(exc, _HandlerFailed) else exc
            if is_connection_lost(error, conn) or is_connection_lost(exc, conn):
                self._lost_connection(error)
                return
            if _transient(error) or isinstance(error, TransportError):
                log.warning(
                    "sink %s: transaction failed (%s); rolled back, retrying",
                    self.name,
                    error_summary(error),
                )
                self._rewind(updates)
                self._backoff_until = asyncio.get_running_loop().time() + 0.05
                return
            if isinstance(exc, _HandlerFailed):
                await self._on_handler_failure(exc.error, good, bad, updates)
                return
            raise
        for update in updates:
            owned = self._owned.get(update.tp)
            if owned is not None:
                owned.stored = owned.next = update.next_offset
        self.records_landed += len(good) - len(rejected)
        self.batches_committed += 1
        self.policy.succeeded()
        crash_point("sink.after_commit")

    def _rewind(self, updates: Sequence[OffsetUpdate]) -> None:
        """Fetch the batch again from the stored offsets."""
        for update in updates:
            owned = self._owned.get(update.tp)
            if owned is not None:
                self.consumer.seek(update.tp, owned.next)

    async def _on_handler_failure(
        self,
        error: BaseException,
        good: list[tuple[RecordLike, SinkRecord]],
        bad: list[tuple[RecordLike, BaseException]],
        updates: list[OffsetUpdate],
    ) -> None:
        first = good[0][1]
        failure = Failure(f"sink:{self.name}", error, first.topic, first.partition, first.offset)
        decision = self.policy.decide(failure)
        where = ", ".join(
            f"{u.tp.topic}[{u.tp.partition}]@{u.expected if u.expected is not None else 'start'}"
            for u in updates
        )
        log.error(
            "sink %s: handler failed on a batch of %d records (%s): %s; policy %s -> %s",
            self.name,
            len(good),
            where,
            error_summary(error),
            self.conf.error_policy,
            decision.value,
        )
        log.debug("sink %s: handler traceback", self.name, exc_info=error)
        if decision is Decision.STOP:
            raise WorkerStopped(
                f"sink {self.name}: the handler failed on a batch from {where} "
                f"({error_summary(error)}); error policy {self.conf.error_policy!r}: stopped, "
                "nothing of the batch was landed"
            ) from error
        if decision is Decision.DEAD_LETTER:
            await self._commit(good, bad, updates, isolate=True)
            return
        self._rewind(updates)
        assert failure.position is not None
        delay = self.policy.backoff(failure.position)
        self._backoff_until = asyncio.get_running_loop().time() + delay

    async def _dead_letter(self, items: Sequence[tuple[RecordLike, BaseException]]) -> None:
        """Send to the dead-letter topic and wait for the acknowledgements (before COMMIT)."""
        producer = self._producer
        assert producer is not None
        futures = []
        for record, error in items:
            log.warning(
                "sink %s: record %s[%d]@%d goes to dead-letter topic %s (%s)",
                self.name,
                record.topic,
                record.partition,
                record.offset,
                self.dead_letter_topic,
                type(error).__name__,
            )
            futures.append(
                await producer.send(
                    self.dead_letter_topic,
                    key=record.key,
                    value=record.value,
                    partition=record.partition,
                    headers=dead_letter_headers(
                        error=error,
                        topic=record.topic,
                        partition=record.partition,
                        offset=record.offset,
                        agent=f"sink:{self.name}",
                        original=tuple(record.headers),
                    ),
                )
            )
        await producer.flush()
        await asyncio.gather(*futures)
        self.dead_lettered += len(items)

    # -- what operators and tests read ----------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        return {
            "records_landed": self.records_landed,
            "batches_committed": self.batches_committed,
            "dead_lettered": self.dead_lettered,
            "commits_refused": self.fenced,
            "reconnects": self.reconnects,
            "partitions": len(self._owned),
        }


def _transient(exc: BaseException) -> bool:
    return (getattr(exc, "sqlstate", None) or "") in _TRANSIENT_STATES


async def _close_quietly(conn: psycopg.AsyncConnection[Any]) -> None:
    with contextlib.suppress(Exception):
        await conn.close()


class _Listener:
    """Claims happen in the loop, not here: a rebalance callback must not wait on a database."""

    def __init__(self, runner: SinkRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        runner = self.runner
        async with runner._lock:  # the batch being landed commits (or not) first
            for tp in revoked:
                runner._owned.pop(TopicPartition(tp[0], tp[1]), None)
                runner._unclaimed.discard(TopicPartition(tp[0], tp[1]))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        runner = self.runner
        async with runner._lock:
            runner._group = runner.consumer.group_metadata()
            tps = {TopicPartition(tp[0], tp[1]) for tp in assigned}
            runner._unclaimed |= tps - set(runner._owned)
            if runner._unclaimed:
                runner.consumer.pause(runner._unclaimed)
            log.info(
                "sink %s: the group gave us %d partitions (generation %s); claiming them",
                runner.name,
                len(tps),
                runner._group.generation_id,
            )
