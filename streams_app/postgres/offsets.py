"""A sink's Kafka offsets in PostgreSQL, and the fence that keeps zombies from committing.

The database, not Kafka, is the source of truth for what a sink has landed: each batch's rows
and its partitions' next offsets commit in one database transaction, and on every assignment the
sink *claims* its partitions here and seeks to the offsets it finds.

**Fencing, and why a claim bumps a generation of our own.** A claim is one statement per
assignment::

    INSERT ... ON CONFLICT (group_id, topic, partition) DO UPDATE
        SET generation = offsets.generation + 1, owner = ..., kafka_generation = ...
        RETURNING next_offset, generation

and a batch commit is one conditional update, the last statement before COMMIT::

    UPDATE offsets SET next_offset = <batch end>
    WHERE ... AND generation = <the generation our claim returned>
          AND next_offset IS NOT DISTINCT FROM <where our batch started>

The commit must update every partition of the batch; if any row does not match (someone
claimed the partition since: a newer owner) the whole transaction rolls back, the handler's
rows with it, and the sink rejoins the group. We use a conditional update rather than
``SELECT ... FOR UPDATE`` plus a check because it is one round trip that locks, checks and
writes at once, and because PostgreSQL re-evaluates its WHERE clause against the newest
committed version of the row after waiting for a concurrent writer (READ COMMITTED's
EvalPlanQual): a commit racing a claim either commits first (the claim then waits for it and
returns the offset it wrote) or finds the new generation and is refused. There is no window in
between.

The generation is the database's own counter, bumped by each claim, not the consumer group's
generation (which is only recorded, in ``kafka_generation``, for operators). Kafka deletes an
empty group that has no committed offsets during its periodic clean-up, and a sink group never
commits offsets to Kafka, so after all sink processes were stopped for a while its generation
starts at 1 again; a check "newer Kafka generation wins" would then lock the partitions out
forever. "The latest claim wins" needs no such assumption: each claim reads ``next_offset``
under the row lock after every earlier commit finished, and every commit needs the generation
of the latest claim, so the committed batches of a partition form one gap-free, overlap-free
sequence whatever the group does. Kafka's group only decides who *should* claim; correctness
does not depend on it (a stale member that claims after the rightful owner merely makes that
owner's next commit fail and rejoin).

Lock order: claims lock rows in (topic, partition) order; a commit racing a claim on several
partitions can still deadlock, which PostgreSQL detects and breaks by aborting one of them (the
sink retries that as a transient error).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from streams_app.postgres.schema import sql_name
from streams_app.transport.base import TopicPartition


@dataclass(frozen=True)
class Claim:
    """A partition this sink process now owns in the database."""

    tp: TopicPartition
    next_offset: int | None
    generation: int


@dataclass(frozen=True)
class OffsetUpdate:
    tp: TopicPartition
    generation: int
    #: ``next_offset`` as our previous commit (or our claim) left it; None: never landed.
    expected: int | None
    next_offset: int


class FencedError(Exception):
    """The commit was refused: a newer claim owns (some of) the batch's partitions."""


class OffsetStore:
    def __init__(self, table: str, group_id: str) -> None:
        self.table = table
        self.group_id = group_id
        t = sql_name(table)
        self._claim_sql = f"""
            INSERT INTO {t} AS o
                (group_id, topic, partition, next_offset, generation, kafka_generation, owner)
            SELECT %s, v.topic, v.partition, NULL, 1, %s, %s
            FROM unnest(%s::text[], %s::integer[]) WITH ORDINALITY AS v(topic, partition, n)
            ORDER BY v.n
            ON CONFLICT (group_id, topic, partition) DO UPDATE SET
                generation = o.generation + 1,
                kafka_generation = EXCLUDED.kafka_generation,
                owner = EXCLUDED.owner,
                claimed_at = now()
            RETURNING topic, partition, next_offset, generation
        """
        self._commit_sql = f"""
            UPDATE {t} AS o SET next_offset = v.next_offset, committed_at = now()
            FROM unnest(%s::text[], %s::integer[], %s::bigint[], %s::bigint[], %s::bigint[])
                AS v(topic, partition, generation, expected, next_offset)
            WHERE o.group_id = %s AND o.topic = v.topic AND o.partition = v.partition
              AND o.generation = v.generation
              AND o.next_offset IS NOT DISTINCT FROM v.expected
        """
        self._read_sql = f"""
            SELECT topic, partition, next_offset, generation, kafka_generation, owner
            FROM {t} WHERE group_id = %s ORDER BY topic, partition
        """

    async def claim(
        self,
        conn: psycopg.AsyncConnection[Any],
        partitions: Collection[TopicPartition],
        *,
        kafka_generation: int,
        owner: str,
        lock_timeout_ms: int = 5_000,
    ) -> dict[TopicPartition, Claim]:
        """Take ownership of ``partitions`` (one transaction); raises ``LockNotAvailable`` when a
        previous owner's transaction holds a row longer than ``lock_timeout_ms`` (retry)."""
        tps = sorted(partitions)
        async with conn.transaction():
            await conn.execute(f"SET LOCAL lock_timeout = {int(lock_timeout_ms)}")
            cur = await conn.execute(
                self._claim_sql,
                (
                    self.group_id,
                    kafka_generation,
                    owner,
                    [tp.topic for tp in tps],
                    [tp.partition for tp in tps],
                ),
            )
            rows = await cur.fetchall()
        claims = {}
        for topic, partition, next_offset, generation in rows:
            tp = TopicPartition(topic, partition)
            claims[tp] = Claim(tp, next_offset, generation)
        return claims

    async def commit(
        self, conn: psycopg.AsyncConnection[Any], updates: Sequence[OffsetUpdate]
    ) -> None:
        """Inside the caller's transaction: advance every partition of the batch, or raise
        :class:`FencedError` (the caller's transaction must then roll back)."""
        if not updates:
            return
        cur = await conn.execute(
            self._commit_sql,
            (
                [u.tp.topic for u in updates],
                [u.tp.partition for u in updates],
                [u.generation for u in updates],
                [u.expected for u in updates],
                [u.next_offset for u in updates],
                self.group_id,
            ),
        )
        if cur.rowcount == len(updates):
            return
        current = {TopicPartition(row[0], row[1]): row for row in await self.read(conn)}
        refused = []
        for u in updates:
            row = current.get(u.tp)
            if row is None:
                refused.append(f"{u.tp.topic}[{u.tp.partition}] has no offset row")
            elif row[3] != u.generation:
                refused.append(
                    f"{u.tp.topic}[{u.tp.partition}] is owned by generation {row[3]} "
                    f"(claimed under consumer-group generation {row[4]}), ours is {u.generation}"
                )
            elif row[2] != u.expected:
                refused.append(
                    f"{u.tp.topic}[{u.tp.partition}] is at offset {row[2]}, our batch starts at "
                    f"{u.expected}"
                )
        raise FencedError("commit refused: " + "; ".join(refused or ["offset rows changed"]))

    async def read(self, conn: psycopg.AsyncConnection[Any]) -> list[Any]:
        """The group's rows: topic, partition, next_offset, generation, kafka_generation, owner."""
        cur = await conn.execute(self._read_sql, (self.group_id,))
        return list(await cur.fetchall())
