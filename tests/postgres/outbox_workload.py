"""A concurrent outbox workload and its exactly-once check (the relay tests and the shop test).

Writers are transactions the way applications write them: take an xid with a first write, lock
the key's counter row, bump it and add an event carrying the new count, commit. So each key's
committed events carry 1, 2, 3, ... in their commit order, whatever order their xids or ids
are in. Some writers hold their transaction open for a while after adding the event (their ids
become visible long after larger ones: the outbox's visibility trap); some roll back (their
events must never appear, and their counter bumps roll back with them, so the committed counts
stay gapless).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass, field

import psycopg

from streams_app.postgres import outbox
from streams_app.postgres.relay import H_OUTBOX_ID
from streams_app.readback import ReadRecord

KEYS = [f"key-{i:02d}" for i in range(40)]
#: The slow writers' keys: a long transaction holds its keys' locks, so sharing them would
#: only make the fast writers queue behind it (the test would measure lock waits).
SLOW_KEYS = [f"slow-{i:02d}" for i in range(8)]


@dataclass
class Written:
    committed: list[tuple[str, int, str]] = field(default_factory=list)  # key, n, event id
    rolled_back: list[str] = field(default_factory=list)  # event ids
    long_transactions: int = 0


async def prepare(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS writer_log (w int, at timestamptz)")
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS counters (k text PRIMARY KEY, n int NOT NULL)"
        )
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO counters VALUES (%s, 0) ON CONFLICT DO NOTHING",
                [(k,) for k in KEYS + SLOW_KEYS],
            )


async def write_events(
    dsn: str,
    topic: str,
    events: int,
    *,
    seed: int,
    writers: int = 6,
    slow_writers: int = 2,
    rollback_share: float = 0.08,
    pause: float = 0.0,
    tag: str = "",
) -> Written:
    """Write at least ``events`` committed events with concurrent writers; returns what
    committed and what rolled back."""
    written = Written()
    done = asyncio.Event()

    async def writer(w: int, slow: bool) -> None:
        rng = random.Random(seed * 1000 + w)
        conn = await psycopg.AsyncConnection.connect(dsn)
        try:
            t = 0
            while not done.is_set():
                t += 1
                pool = SLOW_KEYS if slow else KEYS
                keys = sorted(rng.sample(pool, rng.choice((1, 1, 1, 2, 3))))  # sorted: no deadlocks
                rollback = rng.random() < rollback_share
                added: list[tuple[str, int, str]] = []
                try:
                    async with conn.transaction():
                        await conn.execute(
                            "INSERT INTO writer_log VALUES (%s, clock_timestamp())", (w,)
                        )  # the transaction takes its xid here, before any key lock
                        for key in keys:
                            cur = await conn.execute(
                                "UPDATE counters SET n = n + 1 WHERE k = %s RETURNING n", (key,)
                            )
                            n = (await cur.fetchone())[0]  # type: ignore[index]
                            event_id = f"{tag}{w}-{t}-{key}"
                            await outbox.add(
                                conn,
                                topic=topic,
                                key=key,
                                value={"k": key, "n": n, "id": event_id, "rb": rollback},
                            )
                            added.append((key, n, event_id))
                        if slow:
                            written.long_transactions += 1
                            await asyncio.sleep(rng.uniform(0.2, 1.0))  # a long transaction
                        if rollback:
                            raise psycopg.Rollback()
                except psycopg.errors.DeadlockDetected:
                    continue
                if rollback:
                    written.rolled_back += [e for _, _, e in added]
                else:
                    written.committed += added
                    if len(written.committed) >= events:
                        done.set()
                if pause:
                    await asyncio.sleep(pause)
        finally:
            await conn.close()

    await asyncio.gather(*(writer(w, slow=w < slow_writers) for w in range(writers + slow_writers)))
    return written


def merge(*parts: Written) -> Written:
    out = Written()
    for part in parts:
        out.committed += part.committed
        out.rolled_back += part.rolled_back
        out.long_transactions += part.long_transactions
    return out


@dataclass
class Report:
    published: int
    duplicates: int
    missing: int
    rolled_back_published: int
    order_violations: int
    #: Records published after one with a larger outbox id (same partition): the visibility
    #: trap was exercised (a relay following "last id" would have skipped these).
    id_inversions: int

    def exactly_once(self) -> bool:
        return (
            self.duplicates,
            self.missing,
            self.rolled_back_published,
            self.order_violations,
        ) == (
            0,
            0,
            0,
            0,
        )


def check(records: list[ReadRecord], written: Written) -> Report:
    values = [json.loads(r.value or b"null") for r in records]
    counts = Counter(v["id"] for v in values)
    expected = {e for _, _, e in written.committed}
    rolled_back = set(written.rolled_back)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    missing = len(expected - set(counts))
    # Per key, the first appearance of each count must be 1, 2, 3, ... in Kafka order.
    seen: dict[str, list[int]] = {}
    for v in values:
        if v["id"] in expected:
            seq = seen.setdefault(v["k"], [])
            if v["n"] not in seq:
                seq.append(v["n"])
    violations = sum(1 for seq in seen.values() for a, b in itertools.pairwise(seq) if b < a)
    inversions = 0
    last_id: dict[int, int] = {}
    for r in records:
        raw = r.header(H_OUTBOX_ID)
        if raw is None:
            continue
        oid = int(raw)
        if oid < last_id.get(r.partition, -1):
            inversions += 1
        last_id[r.partition] = max(last_id.get(r.partition, -1), oid)
    return Report(
        published=len(records),
        duplicates=duplicates,
        missing=missing,
        rolled_back_published=sum(1 for e in counts if e in rolled_back),
        order_violations=violations,
        id_inversions=inversions,
    )


async def outbox_rows(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cur = await conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        row = await cur.fetchone()
    return int(row[0]) if row else 0
