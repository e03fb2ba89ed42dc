"""The app side of the outbox: add an event inside your own database transaction.

::

    from streams_app.postgres import outbox

    async with conn.transaction():                    # psycopg AsyncConnection
        await conn.execute("INSERT INTO orders ...", ...)
        await outbox.add(conn, topic="orders", key=order.item, value=order)

    with conn.transaction():                          # or a synchronous psycopg Connection
        conn.execute("INSERT INTO orders ...", ...)
        outbox.add(conn, topic="orders", key=order.item, value=order)

The event commits with your rows or not at all; the relay (``streams-app outbox relay``)
publishes it to Kafka exactly once. ``topic`` may be a streams_app :class:`Topic` (its codecs
encode key and value) or a name (keys: ``bytes`` or ``str``; values: ``bytes``, ``str``, or
anything JSON-able, faust Records included). Events of one key reach Kafka in the order their
transactions committed (see :mod:`streams_app.postgres.horizon`). The tables are created by
``streams-app outbox init`` (or :func:`streams_app.postgres.schema.init_outbox`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, NamedTuple, overload

import psycopg

from streams_app.codecs import resolve_codec
from streams_app.postgres.schema import sql_name

if TYPE_CHECKING:
    from streams_app.app.topic import Topic

Headers = Mapping[str, bytes | str] | Sequence[tuple[str, bytes | str]] | None

_json = resolve_codec("json", default="json")


class OutboxEvent(NamedTuple):
    topic: Any  # str or Topic
    key: Any = None
    value: Any = None
    headers: Headers = None


@lru_cache(maxsize=64)
def _insert_sql(table: str) -> str:
    return (
        f"INSERT INTO {sql_name(table)} (topic, key, value, header_keys, header_values) "
        "VALUES (%s, %s, %s, %s, %s)"
    )


def encode(
    topic: str | Topic, key: Any, value: Any, headers: Headers
) -> tuple[str, bytes | None, bytes | None, list[str] | None, list[bytes] | None]:
    """The row's column values for one event."""
    name = topic if isinstance(topic, str) else topic.name
    if not name:
        raise ValueError("outbox.add: topic is empty")
    if isinstance(topic, str):
        raw_key = _bytes(key, json_ok=False)
        raw_value = _bytes(value, json_ok=True)
    else:
        raw_key, raw_value = topic.encode(key, value)
    keys: list[str] | None = None
    values: list[bytes] | None = None
    if headers:
        items = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
        keys = [k for k, _ in items]
        values = [v.encode() if isinstance(v, str) else bytes(v) for _, v in items]
    return name, raw_key, raw_value, keys, values


def _bytes(obj: Any, *, json_ok: bool) -> bytes | None:
    if obj is None:
        return None
    if isinstance(obj, bytes):
        return obj
    if isinstance(obj, (bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, str):
        return obj.encode()
    if json_ok:
        return _json.dumps(obj)
    raise TypeError(
        f"outbox.add: a key must be bytes or str, got {type(obj).__name__} "
        "(or pass a streams_app Topic as topic= to use its key codec)"
    )


@overload
def add(
    conn: psycopg.AsyncConnection[Any],
    *,
    topic: str | Topic,
    key: Any = ...,
    value: Any = ...,
    headers: Headers = ...,
    table: str = ...,
) -> Awaitable[None]: ...


@overload
def add(
    conn: psycopg.Connection[Any],
    *,
    topic: str | Topic,
    key: Any = ...,
    value: Any = ...,
    headers: Headers = ...,
    table: str = ...,
) -> None: ...


def add(
    conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any],
    *,
    topic: str | Topic,
    key: Any = None,
    value: Any = None,
    headers: Headers = None,
    table: str = "outbox",
) -> Awaitable[None] | None:
    """Insert one event into ``table`` on ``conn``, inside the caller's transaction.

    With an ``AsyncConnection`` it returns an awaitable (``await outbox.add(...)``); with a
    ``Connection`` it runs at once.
    """
    params = encode(topic, key, value, headers)
    query = _insert_sql(table)
    if isinstance(conn, psycopg.AsyncConnection):
        return _add_async(conn, query, params)
    conn.execute(query, params)
    return None


async def _add_async(conn: psycopg.AsyncConnection[Any], query: str, params: Any) -> None:
    await conn.execute(query, params)


async def add_many(
    conn: psycopg.AsyncConnection[Any], events: Iterable[OutboxEvent], *, table: str = "outbox"
) -> int:
    """Insert many events in one round trip (``executemany``), inside the caller's transaction."""
    rows = [encode(e.topic, e.key, e.value, e.headers) for e in events]
    if rows:
        async with conn.cursor() as cur:
            await cur.executemany(_insert_sql(table), rows)
    return len(rows)
