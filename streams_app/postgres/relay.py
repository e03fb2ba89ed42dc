"""The outbox relay: PostgreSQL -> Kafka, exactly once (or at least once, as the seed writes it).

``exactly_once`` (the default). One relay batch is one Kafka transaction holding the batch's
events *and* the relay's progress record (:mod:`streams_app.postgres.progress`); so after a
crash the last committed progress says exactly which events are in Kafka, and the relay goes on
from there: nothing twice, nothing skipped. Events are read in (commit number, id) order up to
the visibility horizon (:mod:`streams_app.postgres.horizon`), so a transaction that commits late
is never skipped and events of one key keep their commit order. The relay's transactional id is
``streams-app-outbox-<relay id>``, one per outbox: starting a second relay for the same outbox
fences the first (its next transaction fails with ProducerFencedError and it stops). Published
rows are deleted in batches, and only after the Kafka transaction that holds them committed.

``at_least_once``: the seed's ``publishOutboxEvents`` as written: for each unpublished row in id
order, ``send(...).get()``, then mark it published. A crash between the acknowledgement and the
mark publishes the row again; rows are taken in id order, not commit order. Offered so the
difference can be shown (``--guarantee at_least_once``), not for production.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from streams_app.aio import within
from streams_app.errors import ConfigError, StreamsAppError
from streams_app.postgres import schema
from streams_app.postgres.connection import (
    close_quietly,
    connect,
    describe,
    error_summary,
    is_connection_lost,
)
from streams_app.postgres.crashpoints import crash_point
from streams_app.postgres.horizon import Horizon, oldest_xid_holder
from streams_app.postgres.progress import (
    Position,
    Progress,
    default_topic,
    ensure_topic,
    read_progress,
)
from streams_app.postgres.schema import OutboxNames
from streams_app.transport.base import (
    AdminClient,
    BatchingProducerClient,
    ProducerClient,
    ProducerConfig,
    RecordBatch,
    Transport,
)
from streams_app.transport.errors import ProducerFencedError, TransportError

log = logging.getLogger(__name__)

EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"
GUARANTEES = (EXACTLY_ONCE, AT_LEAST_ONCE)
#: Headers every relayed record carries: where it came from in the outbox.
H_OUTBOX_ID = "outbox.id"
H_OUTBOX_COMMIT = "outbox.commit"


class RelayFenced(StreamsAppError):
    """Another relay for the same outbox started and took over its transactional id."""


@dataclass(frozen=True)
class RelayConfig:
    dsn: str
    table: str = "outbox"
    guarantee: str = EXACTLY_ONCE
    #: Events per Kafka transaction (and per database read).
    batch_size: int = 5000
    #: Seconds between polls when there is nothing to publish.
    poll_interval: float = 0.05
    #: Default: ``streams-app-outbox-progress-<relay id>``.
    progress_topic: str | None = None
    replication_factor: int = 1
    transaction_timeout: float = 30.0
    #: Warn (naming the oldest xid holder) when the horizon is held back this long.
    hold_warning: float = 30.0
    #: Seconds between progress lines in the log (info level).
    stats_interval: float = 30.0

    def validate(self) -> None:
        if self.guarantee not in GUARANTEES:
            raise ConfigError(
                "guarantee",
                f"unknown guarantee {self.guarantee!r}",
                f"use {' or '.join(GUARANTEES)}",
            )
        if self.batch_size < 1:
            raise ConfigError("batch_size", "must be at least 1", "use e.g. 2000")
        if self.poll_interval <= 0:
            raise ConfigError("poll_interval", "must be positive", "use e.g. 0.05 (seconds)")
        schema.qualified(self.table)


class OutboxRelay:
    """Publishes one outbox until :meth:`request_stop` (or until another relay fences it)."""

    def __init__(self, config: RelayConfig, transport: Transport) -> None:
        config.validate()
        self.config = config
        self.transport = transport
        self.where = describe(config.dsn)
        self.names = OutboxNames(config.table)
        self.horizon = Horizon(config.table)
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self._stop = asyncio.Event()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._producer: ProducerClient | None = None
        self._admin: AdminClient | None = None
        self.relay_id = ""
        self.transactional_id: str | None = None
        self.progress_topic = ""
        self.position = Position()
        self._cleaned = Position()
        self._held_since: float | None = None
        self._last_final = 0
        self._known_topics: set[str] = set()
        self._cleanup_conn: psycopg.AsyncConnection[Any] | None = None
        self._cleanup_task: asyncio.Task[None] | None = None
        self._last_hold_warning = 0.0
        self._last_stats = 0.0
        # what tests and operators read
        self.published = 0
        self.transactions = 0
        n = self.names
        # The next commits in number order, then each one's events in id order (a LATERAL
        # index scan, bounded per commit): the plan stays index-only whatever the statistics
        # say, and a huge transaction is read a batch at a time. Sorted in Python.
        self._fetch_sql = f"""
            SELECT c.seq, o.id, o.topic, o.key, o.value, o.header_keys, o.header_values
            FROM (SELECT seq, txid FROM {n.commits}
                  WHERE seq >= %(commit)s AND seq <= %(final)s
                  ORDER BY seq LIMIT %(commits)s) AS c
            CROSS JOIN LATERAL (
                SELECT id, topic, key, value, header_keys, header_values FROM {n.table} AS o
                WHERE o.txid = c.txid AND (c.seq > %(commit)s OR o.id > %(id)s)
                ORDER BY o.id LIMIT %(limit)s
            ) AS o
        """
        #: Commits read per fetch: adapted so that a fetch yields about one batch of events.
        self._commits_per_fetch = 64
        # The last commit of the fetch's window (the same commits, in the same order).
        self._window_end_sql = f"""
            SELECT max(seq) FROM (SELECT seq FROM {n.commits}
                                  WHERE seq >= %(commit)s AND seq <= %(final)s
                                  ORDER BY seq LIMIT %(commits)s) AS c
        """
        self._cleanup_sql = f"""
            DELETE FROM {n.table} AS o USING {n.commits} AS c
            WHERE o.txid = c.txid AND c.seq >= %(from)s AND c.seq <= %(commit)s
              AND (c.seq < %(commit)s OR o.id <= %(id)s)
        """
        # A transaction's commit row goes once none of its events is left.
        self._cleanup_commits_sql = f"""
            DELETE FROM {n.commits} AS c
            WHERE c.seq >= %(from)s AND c.seq <= %(commit)s
              AND NOT EXISTS (SELECT 1 FROM {n.table} AS o WHERE o.txid = c.txid)
        """
        self._unpublished_sql = f"""
            SELECT id, topic, key, value, header_keys, header_values FROM {n.table}
            WHERE published_at IS NULL ORDER BY id LIMIT %(limit)s
        """
        self._mark_sql = f"UPDATE {n.table} SET published_at = now() WHERE id = %s"
        self._alo_cleanup_sql = f"DELETE FROM {n.table} WHERE published_at IS NOT NULL"
        self._alo_cleanup_commits_sql = f"""
            DELETE FROM {n.commits} AS c
            WHERE NOT EXISTS (SELECT 1 FROM {n.table} AS o WHERE o.txid = c.txid)
        """

    # -- lifecycle ----------------------------------------------------------------------

    def request_stop(self) -> None:
        self._stop.set()

    @property
    def exactly_once(self) -> bool:
        return self.config.guarantee == EXACTLY_ONCE

    async def run(self) -> None:
        try:
            await self.start()
            if self.exactly_once:
                await self._loop_exactly_once()
            else:
                await self._loop_at_least_once()
        finally:
            await self._shutdown()
            self.stopped.set()

    async def start(self) -> None:
        config = self.config
        log.info(
            "starting outbox relay (%s) for %s at PostgreSQL %s -> Kafka %s",
            config.guarantee,
            config.table,
            self.where,
            self.transport.address,
        )
        self._conn = await self._connect()
        self.relay_id = await schema.outbox_relay_id(self._conn, config.table)
        if self.exactly_once:
            await schema.check_commit_sequence(self._conn, config.table)
        admin = self.transport.admin()
        await admin.start()  # raises BrokerUnavailable naming the address
        self._admin = admin
        if self.exactly_once:
            self.progress_topic = config.progress_topic or default_topic(self.relay_id)
            await ensure_topic(admin, self.progress_topic, config.replication_factor)
            self.transactional_id = f"streams-app-outbox-{self.relay_id}"
            await self._start_producer()
            await self._cleanup()  # rows a crash left published but not deleted
        else:
            producer = self.transport.producer(
                ProducerConfig(
                    transactional_id=None,
                    acks="all",
                    enable_idempotence=True,
                    linger_ms=0,
                    client_id=f"outbox-relay-{self.relay_id}",
                )
            )
            await producer.start()
            self._producer = producer
        self.started.set()
        log.info(
            "outbox relay for %s started; inputs %s (%s, transactional id %s): resuming after "
            "commit %d, event %d",
            config.table,
            config.table,
            config.guarantee,
            self.transactional_id or "-",
            self.position.commit,
            self.position.id,
        )

    async def _start_producer(self) -> None:
        """InitProducerId fences every older relay of this outbox and aborts what it left
        open; only then is the committed progress final, and we read it back."""
        assert self._admin is not None and self.transactional_id is not None
        producer = self.transport.producer(
            ProducerConfig(
                transactional_id=self.transactional_id,
                acks="all",
                enable_idempotence=True,
                transaction_timeout_ms=int(self.config.transaction_timeout * 1000),
                linger_ms=5,
                client_id=f"outbox-relay-{self.relay_id}",
            )
        )
        await producer.start()
        self._producer = producer
        progress = await read_progress(
            self.transport, self._admin, self.progress_topic, self.relay_id
        )
        if progress is not None:
            self.position = progress.position
            self.published = max(self.published, progress.published)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        return await connect(
            self.config.dsn, what="outbox relay", autocommit=True, stopping=self._stop.is_set
        )

    async def _shutdown(self) -> None:
        if self._cleanup_task is not None:
            with contextlib.suppress(Exception):
                await self._cleanup_task
            with contextlib.suppress(Exception):
                await self._cleanup()  # what the last batches published
        await close_quietly(
            self._cleanup_conn.close if self._cleanup_conn is not None else None,
            self._producer.stop if self._producer is not None else None,
            self._admin.close if self._admin is not None else None,
            self._conn.close if self._conn is not None else None,
        )
        log.info(
            "outbox relay for %s stopped: %d events published in %d transactions",
            self.config.table,
            self.published,
            self.transactions,
        )

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await within(self._stop.wait(), seconds)

    async def _database_lost(self, exc: BaseException) -> None:
        log.warning(
            "outbox relay: lost PostgreSQL at %s (%s); reconnecting",
            self.where,
            error_summary(exc),
        )
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()
        self._conn = await self._connect()

    # -- exactly once -------------------------------------------------------------------

    async def _loop_exactly_once(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            conn = self._conn
            assert conn is not None
            try:
                final = await self.horizon.advance(conn)
                rows = await self._fetch(conn, final)
            except psycopg.Error as exc:
                if not is_connection_lost(exc, conn):
                    raise
                await self._database_lost(exc)
                continue
            await self._watch_hold(conn, loop.time())
            if not rows:
                # A batch published while the previous clean-up still ran was not cleaned up
                # then: the quiet outbox is when nothing else will schedule it.
                self._schedule_cleanup()
                await self._sleep(self.config.poll_interval)
                continue
            if not await self._check_topics(rows):
                await self._sleep(5.0)
                continue
            try:
                await self._publish(rows)
            except ProducerFencedError as exc:
                raise RelayFenced(
                    f"outbox relay for {self.config.table}: another relay for this outbox took "
                    f"over (transactional id {self.transactional_id!r}), or this one stalled "
                    f"past transaction_timeout ({self.config.transaction_timeout:g}s); stopping"
                ) from exc
            except TransportError as exc:
                log.warning(
                    "outbox relay: publishing %d events failed (%s); restarting the producer "
                    "and going on from the committed progress",
                    len(rows),
                    exc,
                )
                await self._restart_producer()
                await self._sleep(1.0)
                continue
            self._schedule_cleanup()
            self._maybe_stats(loop.time())

    async def _fetch(self, conn: psycopg.AsyncConnection[Any], final: int) -> list[Any]:
        """The next events in (commit number, id) order, at most one batch, none above
        ``final``: always a prefix of what is left to publish."""
        if final < self.position.commit:
            return []  # right after a restart: the horizon has not caught up with us yet
        limit = self.config.batch_size
        commits = self._commits_per_fetch
        cur = await conn.execute(
            self._fetch_sql,
            {
                "commit": self.position.commit,
                "id": self.position.id,
                "final": final,
                "commits": commits,
                "limit": limit,
            },
        )
        rows = list(await cur.fetchall())
        if not rows:
            if final > self.position.commit:  # (idle, the horizon is where we are: no query)
                await self._pass_empty_commits(conn, final, commits)
            return []
        rows.sort(key=lambda row: (row[0], row[1]))
        # Every commit read contributes all its events (up to ``limit``), so the first
        # ``limit`` rows in order are exactly the next ``limit`` events.
        if len(rows) >= 2 * limit:
            self._commits_per_fetch = max(8, commits // 2)
        elif len(rows) < limit and len({row[0] for row in rows}) >= commits:
            self._commits_per_fetch = min(limit, commits * 2)
        return rows[:limit]

    async def _pass_empty_commits(
        self, conn: psycopg.AsyncConnection[Any], final: int, commits: int
    ) -> None:
        """The fetch's window of commits held no event to publish: move past it.

        A commit can be left without events (a writer that deleted its own event before
        committing, an operator purging rows); a window made only of such commits would
        otherwise be read again and again and the relay would stall there for good. They are
        at or below the horizon, so nothing can appear in them any more. The position moves
        only here, in memory (nothing was published); the clean-up then deletes their commit
        rows, and after a restart the same window is simply passed again."""
        cur = await conn.execute(
            self._window_end_sql,
            {"commit": self.position.commit, "final": final, "commits": commits},
        )
        row = await cur.fetchone()
        last = int(row[0]) if row and row[0] is not None else None
        if last is not None and last > self.position.commit:
            log.debug(
                "outbox relay for %s: commits %d..%d hold no events; passing them",
                self.config.table,
                self.position.commit,
                last,
            )
            self.position = Position(last, 0)

    async def _check_topics(self, rows: Sequence[Any]) -> bool:
        """Every topic of the batch exists (the relay creates none): else say which, and wait.
        The events stay in the outbox until the topic is there."""
        unknown = {row[2] for row in rows} - self._known_topics
        if unknown:
            assert self._admin is not None
            self._known_topics |= set(await self._admin.partition_counts(sorted(unknown)))
        missing = unknown - self._known_topics
        if missing:
            first = min(row[1] for row in rows if row[2] in missing)
            log.error(
                "outbox relay for %s: events for topic(s) %s, which do not exist (first: "
                "outbox id %d); create them: the relay waits and retries",
                self.config.table,
                ", ".join(sorted(missing)),
                first,
            )
            return False
        return True

    async def _publish(self, rows: Sequence[Any]) -> None:
        producer = self._producer
        assert producer is not None
        await producer.begin_transaction()
        try:
            if isinstance(producer, BatchingProducerClient):
                await _send_batched(producer, rows)
            else:
                for seq, event_id, topic, key, value, hkeys, hvalues in rows:
                    await producer.send(
                        topic, key=key, value=value, headers=_headers(seq, event_id, hkeys, hvalues)
                    )
            last = rows[-1]
            position = Position(int(last[0]), int(last[1]))
            progress = Progress(position, self.published + len(rows))
            await producer.send(
                self.progress_topic,
                key=self.relay_id.encode(),
                value=progress.encode(self.config.table),
                partition=0,
            )
            crash_point("relay.before_commit")
            await producer.commit_transaction()  # refuses if any send of it failed
        except BaseException:
            with contextlib.suppress(Exception):
                await producer.abort_transaction()
            raise
        self.position = position
        self.published += len(rows)
        self.transactions += 1
        crash_point("relay.after_commit")

    async def _restart_producer(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
            self._producer = None
        while not self._stop.is_set():
            try:
                await self._start_producer()
                return
            except ProducerFencedError:
                raise
            except StreamsAppError as exc:
                log.warning("outbox relay: restarting the producer failed (%s); retrying", exc)
                await self._sleep(2.0)

    def _schedule_cleanup(self) -> None:
        """Clean up in the background (own connection) while the next batch is read and sent:
        it deletes rows at or below the committed position, the next batch is above it."""
        if self.position <= self._cleaned:
            return
        if self._cleanup_task is None or self._cleanup_task.done():
            self._cleanup_task = asyncio.get_running_loop().create_task(self._cleanup_quietly())

    async def _cleanup_quietly(self) -> None:
        try:
            await self._cleanup()
        except psycopg.Error as exc:
            log.warning(
                "outbox relay: cleaning up published rows failed (%s); retried after the next "
                "batch",
                error_summary(exc),
            )
            conn, self._cleanup_conn = self._cleanup_conn, None
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()

    async def _cleanup(self) -> None:
        """Delete what the committed progress covers (only ever after the Kafka commit)."""
        position = self.position
        if position <= self._cleaned:
            return
        if self._cleanup_conn is None:
            self._cleanup_conn = await self._connect()
        conn = self._cleanup_conn
        params = {"from": self._cleaned.commit, "commit": position.commit, "id": position.id}
        async with conn.transaction():
            await conn.execute(self._cleanup_sql, params)
            await conn.execute(self._cleanup_commits_sql, params)
        self._cleaned = position

    # -- at least once (the seed's relay) -----------------------------------------------

    async def _loop_at_least_once(self) -> None:
        loop = asyncio.get_running_loop()
        producer = self._producer
        assert producer is not None
        while not self._stop.is_set():
            conn = self._conn
            assert conn is not None
            try:
                cur = await conn.execute(
                    self._unpublished_sql,
                    {"limit": self.config.batch_size},
                )
                rows = await cur.fetchall()
                if not rows:
                    await self._sleep(self.config.poll_interval)
                    continue
                for event_id, topic, key, value, hkeys, hvalues in rows:
                    headers = _headers(None, event_id, hkeys, hvalues)
                    future = await producer.send(topic, key=key, value=value, headers=headers)
                    await future  # send(...).get()
                    crash_point("relay.after_send")
                    await conn.execute(self._mark_sql, (event_id,))  # markAsPublished; save
                    self.published += 1
                self.transactions += 1
                await conn.execute(self._alo_cleanup_sql)
                await conn.execute(self._alo_cleanup_commits_sql)
            except psycopg.Error as exc:
                if not is_connection_lost(exc, conn):
                    raise
                await self._database_lost(exc)
            self._maybe_stats(loop.time())

    # -- what operators see -------------------------------------------------------------

    async def _watch_hold(self, conn: psycopg.AsyncConnection[Any], now: float) -> None:
        """Held back: commit numbers wait while the horizon has not moved (the relay cannot
        tell a long transaction from a slow one until it lasts)."""
        final = self.horizon.final
        advanced, self._last_final = final > self._last_final, final
        if advanced or not self.horizon.held_back:
            if self._held_since is not None and now - self._held_since >= self.config.hold_warning:
                log.info("outbox relay for %s: the horizon moves again", self.config.table)
            self._held_since = None
            return
        if self._held_since is None:
            self._held_since = now
            return
        held = now - self._held_since
        if (
            held < self.config.hold_warning
            or now - self._last_hold_warning < self.config.hold_warning
        ):
            return
        self._last_hold_warning = now
        holder = await oldest_xid_holder(conn)
        log.warning(
            "outbox relay for %s: held back %.0fs (%d commit numbers not final yet) by the "
            "oldest open transaction in the cluster: %s. Events committed after it started wait "
            "until it ends; bound this with idle_in_transaction_session_timeout (and "
            "transaction_timeout on PostgreSQL 17+) for the roles that write",
            self.config.table,
            held,
            self.horizon.latest - self.horizon.final,
            holder.describe() if holder else "none visible to this role",
        )

    def held_back_seconds(self) -> float:
        if self._held_since is None:
            return 0.0
        return asyncio.get_running_loop().time() - self._held_since

    def _maybe_stats(self, now: float) -> None:
        if now - self._last_stats < self.config.stats_interval:
            return
        self._last_stats = now
        log.info("outbox relay: %s", json.dumps(self.metrics()))

    def metrics(self) -> dict[str, Any]:
        """Counters and how far behind the relay is held (also logged every stats_interval)."""
        out: dict[str, Any] = {
            "outbox": self.config.table,
            "guarantee": self.config.guarantee,
            "published": self.published,
            "transactions": self.transactions,
        }
        if self.exactly_once:
            out.update(
                position_commit=self.position.commit,
                position_id=self.position.id,
                horizon_commit=self.horizon.final,
                latest_commit=self.horizon.latest,
                commits_not_final=self.horizon.latest - self.horizon.final,
                held_back_seconds=round(self.held_back_seconds(), 1),
            )
        return out


def _headers(
    seq: int | None, event_id: int, keys: list[str] | None, values: list[bytes] | None
) -> list[tuple[str, bytes]]:
    headers = list(zip(keys, values, strict=True)) if keys and values else []
    headers.append((H_OUTBOX_ID, b"%d" % event_id))
    if seq is not None:
        headers.append((H_OUTBOX_COMMIT, b"%d" % seq))
    return headers


async def _send_batched(producer: BatchingProducerClient, rows: Sequence[Any]) -> None:
    """The events as whole record batches, one open batch per partition (appended in order,
    shipped in order: a key's events keep their order). One call and one future per batch
    instead of per event: most of the relay's CPU otherwise."""
    batches: dict[tuple[str, int], RecordBatch] = {}
    for seq, event_id, topic, key, value, hkeys, hvalues in rows:
        partition = producer.choose_partition(topic, key, None)
        if partition is None:
            await producer.wait_for_topic(topic)
            partition = producer.choose_partition(topic, key, None)
            if partition is None:
                raise TransportError(f"no partition known for topic {topic!r}")
        headers = _headers(seq, event_id, hkeys, hvalues)
        batch = batches.get((topic, partition))
        if batch is None:
            batch = batches[(topic, partition)] = producer.create_batch()
        if batch.append(timestamp=None, key=key, value=value, headers=headers) is None:
            batch.close()  # full: ship it, go on in a new one
            await producer.send_batch(batch, topic, partition)
            batch = batches[(topic, partition)] = producer.create_batch()
            batch.append(timestamp=None, key=key, value=value, headers=headers)
    for (topic, partition), batch in batches.items():
        batch.close()
        await producer.send_batch(batch, topic, partition)
