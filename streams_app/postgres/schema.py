"""The tables streams_app keeps in PostgreSQL: the sinks' offsets, and the outbox.

Everything here is idempotent DDL run under one advisory lock (two sinks starting at once must
not race on ``CREATE TABLE IF NOT EXISTS``, which is not safe against itself).

**Offsets** (one table for every sink; ``streams_app_offsets`` by default)::

    group_id text, topic text, partition integer    -- primary key
    next_offset bigint        -- the next record to land; NULL: nothing landed yet
    generation bigint         -- ownership generation: bumped by every claim (the fencing token)
    kafka_generation integer  -- the consumer-group generation the claim was made under
    owner text                -- the member id and host/pid of the claimer
    claimed_at, committed_at timestamptz

**Outbox** (``outbox`` by default; ``<table>_commits``, ``<table>_commit_seq``)::

    outbox(id bigint identity, txid xid8 DEFAULT pg_current_xact_id(), topic text, key bytea,
           value bytea, header_keys text[], header_values bytea[], created_at, published_at)
    outbox_commits(seq bigint PRIMARY KEY, txid xid8 UNIQUE, committed_at)

A deferred constraint trigger on the outbox gives every transaction that wrote events one
``outbox_commits`` row when it reaches COMMIT, numbered from ``outbox_commit_seq``: the relay
publishes in that order (see :mod:`streams_app.postgres.horizon` for why, and why it is safe).
``streams_app_outboxes`` names each outbox's relay id (the Kafka transactional id and progress
key of its relay).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from streams_app.errors import ConfigError

#: One advisory lock key for all of streams_app's DDL (classid, objid form).
_DDL_LOCK = (0x5A5A, 1)
META_TABLE = "streams_app_outboxes"


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def qualified(name: str) -> tuple[str | None, str]:
    """``schema.table`` or ``table`` -> (schema or None, table)."""
    if not name or name.count(".") > 1 or any(not part for part in name.split(".")):
        raise ConfigError("table", f"{name!r} is not a table name", "use 'table' or 'schema.table'")
    schema, _, table = name.rpartition(".")
    return (schema or None), table


def sql_name(name: str, suffix: str = "") -> str:
    """The quoted (optionally schema-qualified) SQL name of ``name`` + ``suffix``."""
    schema, table = qualified(name)
    quoted = quote_ident(table + suffix)
    return f"{quote_ident(schema)}.{quoted}" if schema else quoted


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# -- offsets -----------------------------------------------------------------------------------


def offsets_ddl(table: str) -> list[str]:
    t = sql_name(table)
    return [
        f"""CREATE TABLE IF NOT EXISTS {t} (
            group_id text NOT NULL,
            topic text NOT NULL,
            partition integer NOT NULL,
            next_offset bigint,
            generation bigint NOT NULL,
            kafka_generation integer NOT NULL,
            owner text NOT NULL,
            claimed_at timestamptz NOT NULL DEFAULT now(),
            committed_at timestamptz,
            PRIMARY KEY (group_id, topic, partition)
        )"""
    ]


# -- outbox ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutboxNames:
    """The SQL names of one outbox's objects."""

    name: str

    @property
    def table(self) -> str:
        return sql_name(self.name)

    @property
    def commits(self) -> str:
        return sql_name(self.name, "_commits")

    @property
    def sequence(self) -> str:
        return sql_name(self.name, "_commit_seq")

    @property
    def function(self) -> str:
        return sql_name(self.name, "_stamp_commit")

    @property
    def trigger(self) -> str:
        return quote_ident(qualified(self.name)[1] + "_stamp_commit")

    @property
    def meta(self) -> str:
        schema, _ = qualified(self.name)
        return f"{quote_ident(schema)}.{META_TABLE}" if schema else META_TABLE


def outbox_ddl(name: str) -> list[str]:
    n = OutboxNames(name)
    return [
        f"CREATE SEQUENCE IF NOT EXISTS {n.sequence} AS bigint CACHE 1",
        f"""CREATE TABLE IF NOT EXISTS {n.table} (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
            topic text NOT NULL CHECK (topic <> ''),
            key bytea,
            value bytea,
            header_keys text[],
            header_values bytea[],
            created_at timestamptz NOT NULL DEFAULT now(),
            published_at timestamptz
        )""",
        f"CREATE INDEX IF NOT EXISTS {quote_ident(qualified(name)[1] + '_txid_idx')} "
        f"ON {n.table} (txid, id)",
        f"""CREATE TABLE IF NOT EXISTS {n.commits} (
            seq bigint PRIMARY KEY,
            txid xid8 NOT NULL UNIQUE,
            committed_at timestamptz NOT NULL DEFAULT clock_timestamp()
        )""",
        # Fires at COMMIT (deferred), once per row; only the first firing in a transaction does
        # anything: it numbers the transaction from the sequence. The GUC remembers, for this
        # transaction only (set_config(..., true)), that it is done.
        f"""CREATE OR REPLACE FUNCTION {n.function}() RETURNS trigger
            LANGUAGE plpgsql AS $body$
            DECLARE
                xid xid8 := pg_current_xact_id();
                flag text := 'streams_app.outbox_stamped_' || TG_RELID::text;
            BEGIN
                IF current_setting(flag, true) IS DISTINCT FROM xid::text THEN
                    INSERT INTO {n.commits} (seq, txid)
                    VALUES (nextval({literal(n.sequence)}), xid);
                    PERFORM set_config(flag, xid::text, true);
                END IF;
                RETURN NULL;
            END
            $body$""",
        # No CREATE OR REPLACE for constraint triggers, and DROP + CREATE would lock the table
        # against writers: create it only when it is missing.
        f"""DO $do$ BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_trigger
                           WHERE tgrelid = {literal(n.table)}::regclass
                             AND tgname = {literal(qualified(name)[1] + "_stamp_commit")}) THEN
                CREATE CONSTRAINT TRIGGER {n.trigger} AFTER INSERT ON {n.table}
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {n.function}();
            END IF;
        END $do$""",
        f"""CREATE TABLE IF NOT EXISTS {n.meta} (
            outbox text PRIMARY KEY,
            relay_id text NOT NULL,
            sequence_oid oid NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        )""",
    ]


def _register_relay_sql(name: str) -> str:
    """Keep the relay id while the outbox's sequence is the same object; a recreated outbox
    (new sequence, numbering from 1 again) gets a new id, so an old relay position never
    skips its events."""
    n = OutboxNames(name)
    return f"""
        INSERT INTO {n.meta} AS m (outbox, relay_id, sequence_oid)
        VALUES ({literal(name)}, gen_random_uuid()::text, {literal(n.sequence)}::regclass::oid)
        ON CONFLICT (outbox) DO UPDATE SET
            relay_id = CASE WHEN m.sequence_oid = EXCLUDED.sequence_oid
                            THEN m.relay_id ELSE EXCLUDED.relay_id END,
            sequence_oid = EXCLUDED.sequence_oid
        RETURNING relay_id
    """


def relay_id_sql(name: str) -> str:
    n = OutboxNames(name)
    return f"""
        SELECT relay_id, sequence_oid = to_regclass({literal(n.sequence)})::oid
        FROM {n.meta} WHERE outbox = {literal(name)}
    """


async def apply(conn: psycopg.AsyncConnection[Any], statements: Sequence[str]) -> None:
    """Run DDL in one transaction under streams_app's DDL lock."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _DDL_LOCK)
        for statement in statements:
            await conn.execute(statement)


async def ensure_offsets_table(conn: psycopg.AsyncConnection[Any], table: str) -> None:
    await apply(conn, offsets_ddl(table))


async def init_outbox(conn: psycopg.AsyncConnection[Any], name: str = "outbox") -> str:
    """Create (or bring up to date) the outbox ``name``; returns its relay id."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _DDL_LOCK)
        for statement in outbox_ddl(name):
            await conn.execute(statement)
        cur = await conn.execute(_register_relay_sql(name))
        row = await cur.fetchone()
    assert row is not None
    return str(row[0])


def init_outbox_sync(conn: psycopg.Connection[Any], name: str = "outbox") -> str:
    """:func:`init_outbox` for a synchronous connection (services, scripts)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _DDL_LOCK)
        for statement in outbox_ddl(name):
            conn.execute(statement)
        row = conn.execute(_register_relay_sql(name)).fetchone()
    assert row is not None
    return str(row[0])


async def check_commit_sequence(conn: psycopg.AsyncConnection[Any], name: str) -> None:
    """The horizon (:mod:`streams_app.postgres.horizon`) needs every commit number taken at
    the moment it is handed out: a sequence that caches numbers per session hands out, later,
    numbers below its last value, and the relay would skip those commits. ``init`` creates it
    with ``CACHE 1``; this catches an ``ALTER SEQUENCE`` since."""
    sequence = OutboxNames(name).sequence
    cur = await conn.execute(
        f"SELECT seqcache FROM pg_sequence WHERE seqrelid = {literal(sequence)}::regclass"
    )
    row = await cur.fetchone()
    if row is not None and int(row[0]) != 1:
        raise ConfigError(
            "table",
            f"outbox {name!r}: its commit sequence {sequence} caches {int(row[0])} numbers per "
            "session, so numbers are not taken in the order they are handed out and the relay "
            "could skip commits",
            f"run ALTER SEQUENCE {sequence} CACHE 1",
        )


async def outbox_relay_id(conn: psycopg.AsyncConnection[Any], name: str) -> str:
    """The outbox's relay id; a ConfigError naming the fix if the outbox is not initialised."""
    fix = f"run `streams-app outbox init --dsn ... --table {name}`"
    try:
        cur = await conn.execute(relay_id_sql(name))
        row = await cur.fetchone()
    except psycopg.errors.UndefinedTable:
        await conn.rollback()
        raise ConfigError("table", f"outbox {name!r} does not exist", fix) from None
    if row is None or not row[1]:
        raise ConfigError("table", f"outbox {name!r} is not initialised (or was recreated)", fix)
    return str(row[0])
