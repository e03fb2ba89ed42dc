"""Connecting to PostgreSQL: where a DSN points (never what it holds), retrying while it is down.

A DSN may carry a password, so nothing here ever logs or raises it: errors and log lines name
the database as ``host:port/dbname`` (:func:`describe`). A database that is down is retried with
a doubling backoff for as long as the caller wants; a database that refuses us for good (wrong
password, no such database, no permission) is not retried: it is a configuration error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import conninfo

from streams_app.errors import ConfigError, DatabaseUnavailable

log = logging.getLogger(__name__)

#: SQLSTATE classes that retrying cannot fix: 28 invalid authorization, 3D no such database,
#: 42 insufficient privilege / undefined objects at connect time.
_FATAL_CONNECT_STATES = ("28", "3D", "42")


def describe(dsn: str) -> str:
    """``host:port/dbname`` of a DSN or URL: what operators need, without user or password."""
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    host = str(parts.get("host") or parts.get("hostaddr") or "localhost")
    port = str(parts.get("port") or "5432")
    db = str(parts.get("dbname") or parts.get("user") or "")
    hosts = host.split(",")
    ports = port.split(",")
    if len(ports) < len(hosts):
        ports += [ports[-1]] * (len(hosts) - len(ports))
    where = ",".join(f"{h}:{p}" for h, p in zip(hosts, ports, strict=False))
    return f"{where}/{db}" if db else where


def error_summary(exc: BaseException) -> str:
    """An error as it may be logged: its class and SQLSTATE, no server text (it can quote data)."""
    state = getattr(exc, "sqlstate", None)
    return f"{type(exc).__name__}{f' [{state}]' if state else ''}"


def is_fatal(exc: BaseException) -> bool:
    state = getattr(exc, "sqlstate", None) or ""
    return state.startswith(_FATAL_CONNECT_STATES)


def is_connection_lost(exc: BaseException, conn: psycopg.AsyncConnection[Any] | None) -> bool:
    """Did ``exc`` happen because the database went away (as opposed to a statement failing)?"""
    if conn is not None and (conn.broken or conn.closed):
        return True
    if isinstance(exc, psycopg.OperationalError):
        # 57P01-57P03: admin shutdown, crash shutdown, cannot connect now; 08: connection errors.
        state = getattr(exc, "sqlstate", None) or ""
        return not state or state.startswith(("08", "57P"))
    return False


async def connect(
    dsn: str,
    *,
    what: str,
    autocommit: bool = False,
    options: str | None = None,
    stopping: Callable[[], bool] = lambda: False,
    backoff: float = 0.5,
    backoff_max: float = 15.0,
    attempts: int | None = None,
) -> psycopg.AsyncConnection[Any]:
    """An async connection, retried with backoff while the server is down.

    Raises :class:`ConfigError` at once when the server refuses us for good (authentication,
    unknown database), :class:`DatabaseUnavailable` after ``attempts`` failures (None: retry
    until ``stopping()`` says to give up).
    """
    where = describe(dsn)
    delay = backoff
    tried = 0
    while True:
        tried += 1
        try:
            kwargs: dict[str, Any] = {"autocommit": autocommit, "connect_timeout": 10}
            if options:
                kwargs["options"] = options
            return await psycopg.AsyncConnection.connect(dsn, **kwargs)
        except psycopg.OperationalError as exc:
            if is_fatal(exc):
                primary = getattr(getattr(exc, "diag", None), "message_primary", None) or ""
                raise ConfigError(
                    "postgres_dsn",
                    f"PostgreSQL at {where} refused the {what} ({error_summary(exc)}: {primary})",
                    "fix the user, password or database name in the DSN",
                ) from None
            if (attempts is not None and tried >= attempts) or stopping():
                raise DatabaseUnavailable(where, error_summary(exc)) from None
            log.warning(
                "%s: PostgreSQL at %s is unavailable (%s); retrying in %.1fs",
                what,
                where,
                error_summary(exc),
                delay,
            )
        except psycopg.ProgrammingError as exc:
            raise ConfigError(
                "postgres_dsn", f"the DSN does not parse ({type(exc).__name__})", "fix the DSN"
            ) from None
        await asyncio.sleep(delay)
        delay = min(delay * 2, backoff_max)


async def close_quietly(*steps: Callable[[], Awaitable[object]] | None) -> None:
    """Run each shutdown step in order (None: nothing to close), whatever the others raised:
    a process that stops closes everything it can, and a failed close changes nothing."""
    for step in steps:
        if step is not None:
            with contextlib.suppress(Exception):
                await step()
