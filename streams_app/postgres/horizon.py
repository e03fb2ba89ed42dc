"""Which outbox events are final: the relay's visibility horizon.

**The trap.** Identity and sequence values are taken when a row is inserted; the row becomes
visible when its transaction commits, and transactions commit in any order. A relay that
publishes "every row above the last id I published" skips a row whose transaction took a
smaller id but committed after a larger one was published: silently, forever.

**Commit numbers.** Every transaction that wrote outbox rows gets one row in
``<outbox>_commits`` numbered from ``<outbox>_commit_seq`` when it reaches COMMIT (a deferred
constraint trigger, :mod:`streams_app.postgres.schema`). The relay publishes in (commit number,
id) order. A transaction that waited for another one's locks can only reach COMMIT after that
one committed, so for transactions that touch the same rows (the same order, the same account:
the ones whose order is observable) commit-number order *is* commit order. Events of one key
therefore reach Kafka in their database commit order. Ordering by transaction id would not give
that: a transaction takes its xid at its first write, possibly long before it waits for the
key's row lock, so the later committer can hold the smaller xid. (Two transactions that never
waited for each other are ordered by when they reached COMMIT.)

**The horizon.** Commit numbers are still taken before the commit becomes visible, so they too
become visible out of order, by the few microseconds of the commit itself (or longer, if the
committing session stalls). The relay therefore only publishes commit numbers up to a horizon
below which nothing can still appear:

1. read ``s = pg_sequence_last_value(<outbox>_commit_seq)``;
2. then, in a later statement, remember ``x``, the next xid the cluster will assign;
3. once some later snapshot has ``pg_snapshot_xmin >= x``, every number ``<= s`` is final.

Why: a transaction that took a number ``<= s`` did so before step 1, and it had its xid before
that (it had inserted outbox rows), so its xid is below ``x``. A snapshot's ``xmin`` is at most
every xid still running: it counts those below the snapshot's ``xmax``, it is itself at most
that ``xmax``, and a running xid it does not count is at or above that ``xmax`` (see below). So
``xmin >= x`` means no xid below ``x`` is still running: each of those
transactions has committed (and its rows and commit number are visible) or aborted (and they
are gone). Later transactions take numbers above ``s``. The horizon only ever moves forward;
when nothing is in flight, a poll's own snapshot already has ``xmin == x`` and the horizon is
the latest number at once.

**Not the snapshot's xmax.** ``pg_snapshot_xmax`` is one past the newest *completed* xid, not
the next one to be assigned: a transaction whose xid is the newest one, still committing while
no later xid has completed, is at or above it and in neither ``xmin`` nor ``xip``. Taking
``x = xmax`` called such a transaction's number final before its commit was visible, and the
relay skipped (and then deleted) its events: rarely, when the relay read the sequence inside
that commit's few microseconds. ``x`` is therefore read as ``xmax + age(xid(xmax))``: ``age``
measures from the next xid to be assigned when the calling transaction has none (an
autocommit ``SELECT`` has none), so this is the next xid, read after the statement's snapshot,
without spending one. (``pg_current_xact_id()`` would give the same bound but assign an xid at
every poll.)

**What holds it back.** ``pg_snapshot_xmin`` is the oldest transaction *holding an xid* in the
whole cluster (any database; prepared transactions included; read-only transactions without
an xid do not count). While such a transaction stays open the horizon cannot pass the numbers
taken after it started: an ``idle in transaction`` session, a forgotten ``PREPARE
TRANSACTION``, a long batch job. The relay reports how long it has been held back and by whom
(:func:`oldest_xid_holder`); operators bound it with ``idle_in_transaction_session_timeout`` (and
``transaction_timeout`` on PostgreSQL 17+) on the roles that write, and by resolving prepared
transactions.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import psycopg

from streams_app.postgres.schema import OutboxNames, literal

#: Pending (next xid, number) observations kept while held back; older ones are thinned out
#: (conservatively: a thinned observation is replaced by a later one, never an earlier one).
_MAX_PENDING = 4096


class Horizon:
    """The highest commit number known to be final, advanced by :meth:`advance`."""

    def __init__(self, outbox: str) -> None:
        names = OutboxNames(outbox)
        self._last_value_sql = (
            f"SELECT coalesce(pg_sequence_last_value({literal(names.sequence)}), 0)"
        )
        # xmin, and the next xid to be assigned (see "Not the snapshot's xmax" above).
        self._snapshot_sql = (
            "SELECT pg_snapshot_xmin(s)::text::bigint, "
            "pg_snapshot_xmax(s)::text::bigint + age(xid(pg_snapshot_xmax(s))) "
            "FROM pg_current_snapshot() AS s"
        )
        self.final = 0
        #: The newest commit number seen (final or not).
        self.latest = 0
        self._pending: deque[tuple[int, int]] = deque()

    @property
    def held_back(self) -> bool:
        """Are there commit numbers taken that are not known to be final yet?"""
        return self.latest > self.final

    async def advance(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """One observation (two statements, on an autocommit connection); the new horizon."""
        if not conn.autocommit:
            # Inside a transaction ``age`` counts from a value fixed at the transaction's start
            # (or from its own xid), so the bound would stop moving with the cluster.
            raise ValueError("Horizon.advance needs an autocommit connection")
        cur = await conn.execute(self._last_value_sql)
        row = await cur.fetchone()
        number = int(row[0]) if row else 0
        cur = await conn.execute(self._snapshot_sql)
        snap = await cur.fetchone()
        assert snap is not None
        return self.observe(number, int(snap[0]), int(snap[1]))

    def observe(self, number: int, xmin: int, next_xid: int) -> int:
        """Record "``number`` was read before ``next_xid`` was the next xid, and a snapshot
        with this ``xmin`` was taken after that"; the new horizon."""
        self.latest = max(self.latest, number)
        if number > self.final:
            if self._pending and self._pending[-1][1] >= number:
                pass  # an earlier observation with a smaller bound already covers it
            else:
                self._pending.append((next_xid, number))
                if len(self._pending) > _MAX_PENDING:
                    # Drop every other middle entry: each survivor still has a bound at least
                    # as large as the entries it stands for, so it never becomes final early.
                    kept = list(self._pending)
                    self._pending = deque(kept[:1] + kept[1:-1:2] + kept[-1:])
        while self._pending and self._pending[0][0] <= xmin:
            self.final = max(self.final, self._pending.popleft()[1])
        return self.final


@dataclass(frozen=True)
class XidHolder:
    """The session (or prepared transaction) with the oldest xid in the cluster."""

    kind: str  # "session" or "prepared"
    pid: int | None
    database: str | None
    state: str | None
    application: str | None
    age_seconds: float | None
    gid: str | None = None

    def describe(self) -> str:
        age = f"{self.age_seconds:.0f}s" if self.age_seconds is not None else "?"
        if self.kind == "prepared":
            return f"prepared transaction {self.gid!r} in database {self.database} ({age} old)"
        return (
            f"pid {self.pid} in database {self.database} ({self.state or 'unknown state'}, "
            f"application {self.application or '-'}, transaction open {age})"
        )


_HOLDER_SQL = """
    SELECT * FROM (
        SELECT 'session' AS kind, pid, datname::text, state, application_name,
               extract(epoch FROM now() - xact_start)::float8 AS age, NULL::text AS gid,
               age(backend_xid) AS xid_age
        FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
        UNION ALL
        SELECT 'prepared', NULL, database::text, NULL, NULL,
               extract(epoch FROM now() - prepared)::float8, gid, age(transaction)
        FROM pg_prepared_xacts
    ) AS holders
    ORDER BY xid_age DESC LIMIT 1
"""


async def oldest_xid_holder(conn: psycopg.AsyncConnection[Any]) -> XidHolder | None:
    """Who holds the cluster's oldest xid (no query text: it can hold data). Sessions of other
    roles show their state only to superusers and members of ``pg_read_all_stats``."""
    cur = await conn.execute(_HOLDER_SQL)
    row = await cur.fetchone()
    if row is None:
        return None
    kind, pid, database, state, application, age, gid, _ = row
    return XidHolder(kind, pid, database, state, application, age, gid)
