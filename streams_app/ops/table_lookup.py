"""``tables NAME KEY``: one key's committed value, from the worker that owns it when the app runs,
else from the one changelog partition that holds it.

A running worker answers from its local store (``GET /tables/NAME/KEY``, see
``runtime.web.queries``), which holds exactly what Kafka committed: the same answer as the
changelog, without reading it. Its address comes from the group (each member publishes its web
server in its subscription); the member assigned the key's partition is asked first, then the
others (a worker that does not own the key redirects to the one that does). A worker that
cannot answer for sure (a task restoring, a rebalance: 503) or cannot be reached leaves it to
the changelog: only the key's partition is read (``readback.read_table_key``), ``read_committed``
up to its last stable offset, instead of the whole changelog.

Both answer alike for every kind of table: a windowed table's windows of the key, a versioned
table's latest value and every version its store (and so its changelog) still holds, a
tombstone as the latest version meaning "not found" (as the owner's 404 says).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from streams_app.app.app import App
from streams_app.app.table import Table
from streams_app.kafka.ops_admin import GroupMember, OpsAdmin
from streams_app.readback import (
    KeyRead,
    app_input_topics,
    key_partition,
    partition_count,
    read_table_key,
)
from streams_app.state.windowed import WindowKey

log = logging.getLogger(__name__)

#: Seconds a worker gets to answer before the changelog is read instead.
WORKER_TIMEOUT = 5.0


@dataclass(frozen=True)
class Lookup:
    table: str
    key: Any
    #: The changelog partition holding the key (-1: the changelog does not exist yet).
    partition: int
    #: The committed value; a windowed table: ``[(start, end, value)]``, oldest first.
    value: Any
    found: bool
    #: Who answered: the worker's address, or None (the changelog partition was read).
    worker: str | None = None
    #: Changelog records read (0 when a worker answered).
    records_read: int = 0
    #: A versioned table: the key's versions ``[(valid_from, value)]``, oldest first, a
    #: tombstone's value None (``value`` is the latest, None and not found if a tombstone).
    versions: list[tuple[int, Any]] | None = None


def _key_text(table: Table, key: Any) -> str | None:
    """The key as ``/tables`` reads it from a path (the table's key codec, as text)."""
    try:
        return table.user_key_codec.dumps(key).decode()
    except (UnicodeDecodeError, TypeError, ValueError):
        return None  # not text: the changelog it is


def _candidates(members: tuple[GroupMember, ...], owned: set[tuple[str, int]]) -> list[str]:
    """Web addresses to ask, the owner of the key's partition first."""
    owners = [m.web for m in members if m.web and owned & set(m.assignment)]
    others = [m.web for m in members if m.web and m.web not in owners]
    return [w for w in dict.fromkeys([*owners, *others]) if w]


async def _ask(url: str) -> tuple[int, dict[str, Any]] | None:
    try:
        timeout = aiohttp.ClientTimeout(total=WORKER_TIMEOUT)
        async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as answer:
            body = json.loads(await answer.text())
            return answer.status, body if isinstance(body, dict) else {}
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.info("%s did not answer (%s): reading the changelog instead", url, exc)
        return None


async def from_workers(admin: OpsAdmin, app: App, table: Table, key: Any) -> Lookup | None:
    """The key's committed value from a running worker, or None if none could say."""
    text = _key_text(table, key)
    if text is None:
        return None
    group = await admin.describe_group(app.conf.id)
    if not any(m.web for m in group.members):
        return None
    count = await partition_count(admin, table.changelog_topic_name)
    owned: set[tuple[str, int]] = set()
    if count:
        partition = key_partition(table, key, count)
        for topic in app_input_topics(app):
            if await partition_count(admin, topic) == count:
                owned.add((topic, partition))
    path = f"/tables/{quote(table.name, safe='')}/{quote(text, safe='')}"
    for web in _candidates(group.members, owned):
        answer = await _ask(web.rstrip("/") + path)
        if answer is None:
            continue
        found = from_answer(table, key, web, *answer)
        if found is not None:
            return found
    return None


def from_answer(
    table: Table, key: Any, web: str, status: int, body: dict[str, Any]
) -> Lookup | None:
    """What a worker's ``/tables/NAME/KEY`` answer (``runtime.web.queries``) says of ``key``;
    None if it cannot say for sure (a restoring task, a rebalance: ask another, or read the
    changelog)."""
    owner = str(body.get("owner") or web)
    partition = int(body.get("partition", -1))
    versions = _versions(table, body)
    if status == 200 and "windows" in body:
        windows = [(w["start"], w["end"], w["value"]) for w in body["windows"]]
        return Lookup(table.name, key, partition, windows, True, owner)
    if status == 200:
        return Lookup(table.name, key, partition, body.get("value"), True, owner, versions=versions)
    if status == 404 and "partition" in body:  # the owner, running: nothing committed
        # (a versioned table: no version, or the latest is a tombstone, listed with them)
        empty: Any = [] if table.window is not None else None
        return Lookup(table.name, key, partition, empty, False, owner, versions=versions)
    log.info("%s answered %d (%s)", web, status, body.get("error"))
    return None


def _versions(table: Table, body: dict[str, Any]) -> list[tuple[int, Any]] | None:
    """A versioned table's versions as the owner's ``/tables`` lists them (``runtime.web.
    queries``: ``[{"valid_from", "value"}]``, oldest first)."""
    if table.versioned_ms is None:
        return None
    return [(int(v["valid_from"]), v["value"]) for v in body.get("versions") or ()]


async def lookup_key(
    admin: OpsAdmin, app: App, table: Table, key: Any, *, bootstrap: str, timeout: float
) -> Lookup:
    """``key``'s committed value in ``table``: from a worker if one can say, else from the
    changelog partition holding it."""
    found = await from_workers(admin, app, table, key)
    if found is not None:
        return found
    read = await read_table_key(app, table, key, timeout=timeout, bootstrap=bootstrap, admin=admin)
    return from_changelog(table, key, read)


def from_changelog(table: Table, key: Any, read: KeyRead) -> Lookup:
    """The answer of the key's changelog partition, in the shape a worker's has."""
    value = read.value
    if table.window is not None:
        value = [
            (window.start, window.end, table.window.aggregate(stored))
            for window, stored in read.value.items()
            if isinstance(window, WindowKey)
        ]
    versions = None
    if table.versioned_ms is not None:
        versions = [(v.timestamp, v.value) for v in read.versions]
    return Lookup(table.name, key, read.partition, value, read.found, None, read.records, versions)
