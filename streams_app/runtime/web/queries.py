"""Interactive queries: ``/tables/<name>/<key>``, a table's committed value, from whoever owns it.

The key's partition is the one Kafka's default partitioner gives the key's bytes (murmur2, as
Kafka Streams' ``queryMetadataForKey`` and Faust's table routing assume: a table is written
while processing records keyed like the table). The task that owns that partition owns the
table partition; which worker holds the task is the group's map distributed at the last
assignment (:mod:`streams_app.kafka.assignor`).

- This worker owns it and the task is running: the value from the local store, which only
  ever holds what Kafka committed (never a write of an open transaction).
- This worker owns it but the task is restoring: 503, the store is behind the changelog.
- Another worker owns it: ``307 Temporary Redirect`` to the same path on that worker (HTTP
  clients follow it; the JSON body names the owner for those that do not). The redirect carries
  ``?forwarded=1``: a worker that receives a forwarded query for a partition it does not own
  answers 503 instead of redirecting again, so two workers with different views during a
  rebalance cannot bounce a client forever.
- Nobody known owns it (a rebalance is under way, or the owner published no address): 503.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from streams_app.codecs import DecodeError, JsonCodec, RecordCodec
from streams_app.runtime.task import RUNNING, TaskId
from streams_app.state.windowed import SlidingValue
from streams_app.transport.base import TopicPartition

if TYPE_CHECKING:
    from streams_app.app.table import Table
    from streams_app.runtime.view import WorkerView


@dataclass
class Answer:
    status: int
    body: dict[str, Any]
    #: Where to redirect (307), if anywhere.
    location: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Owner:
    """Where a table partition lives right now."""

    partition: int
    task: TaskId
    #: The address of the worker holding the task (None: unknown).
    address: str | None
    #: Whether it is this worker.
    local: bool


def jsonable(value: Any) -> Any:
    """A decoded key or value as JSON (records as their fields, bytes as text or base64)."""
    return json.loads(json.dumps(value, default=_default))


def _default(obj: Any) -> Any:
    asdict = getattr(obj, "asdict", None)
    if callable(asdict):
        return asdict()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        raw = bytes(obj)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode()}
    isoformat = getattr(obj, "isoformat", None)
    if callable(isoformat):
        return isoformat()
    return repr(obj)


def parse_key(table: Table, text: str) -> Any:
    """The key as the table's key codec reads it from the path's text (JSON keys as JSON).
    Windowed tables: the user's key (the answer lists its windows)."""
    try:
        return table.user_key_codec.loads(text.encode())
    except DecodeError:
        # A plain word for a table of JSON-string keys (Faust's str keys): the string itself.
        return table.user_key_codec.loads(json.dumps(text).encode())


def owner_of(worker: WorkerView, table: Table, raw_key: bytes) -> Owner | None:
    """Which task and worker hold ``raw_key``'s partition of ``table`` (None before the
    worker planned its topology)."""
    plan = worker.plan
    if plan is None:
        return None
    changelog = plan.changelog_topics[table.name]
    count = plan.partition_counts[changelog]
    partition = worker.transport.partition_for_key(raw_key, count)
    task_id = TaskId(plan.groups[count], partition)
    parts = worker.parts
    if parts is not None and task_id in parts.tasks.tasks:
        return Owner(partition, task_id, worker.web_url, True)
    address = None
    if parts is not None:
        hosts = parts.consumer.partition_hosts()
        for topic in plan.input_topics:
            if plan.partition_counts.get(topic) == count:
                address = hosts.get(TopicPartition(topic, partition))
                if address is not None:
                    break
    local = address is not None and address == worker.web_url
    return Owner(partition, task_id, address, local)


def query_table(worker: WorkerView, name: str, key_text: str, *, forwarded: bool) -> Answer:
    table = worker.app.tables.get(name)
    if table is None:
        return Answer(404, {"error": f"no table {name!r}", "tables": sorted(worker.app.tables)})
    try:
        key = parse_key(table, key_text)
        raw_key = table.partition_key_bytes(key)
    except (DecodeError, TypeError, ValueError) as exc:
        hint = (
            " (the table's keys are JSON: quote strings, e.g. /tables/NAME/%22apple%22)"
            if isinstance(table.user_key_codec, JsonCodec | RecordCodec)
            else ""
        )
        return Answer(
            400,
            {
                "error": f"the key does not decode with table {name!r}'s key codec: "
                f"{type(exc).__name__}{hint}"
            },
        )
    owner = owner_of(worker, table, raw_key)
    base = {"table": name, "key": jsonable(key)}
    if owner is None:
        return Answer(503, {**base, "error": "the worker is starting"}, headers=_retry())
    base["partition"] = owner.partition
    parts = worker.parts
    if owner.local and parts is not None and owner.task in parts.tasks.tasks:
        task = parts.tasks.tasks[owner.task]
        if task.state != RUNNING:
            return Answer(
                503,
                {**base, "error": f"task {owner.task} is restoring; its store is behind"},
                headers=_retry(),
            )
        store = worker.stores[name]
        if table.window is not None:
            return _windows(worker, table, key, owner.partition, base)
        raw = store.partition(owner.partition).get(table.key_codec.dumps(key))
        if raw is None:
            return Answer(404, {**base, "owner": worker.web_url, "error": "no committed value"})
        return Answer(
            200,
            {**base, "owner": worker.web_url, "value": jsonable(table.value_codec.loads(raw))},
        )
    if owner.address is None or owner.local or forwarded:
        why = (
            "the owner was not known to the worker this query was forwarded to (a rebalance is "
            "under way?)"
            if forwarded
            else "no worker publishing an address owns it (a rebalance is under way?)"
        )
        return Answer(503, {**base, "owner": owner.address, "error": why}, headers=_retry())
    return Answer(
        307,
        {**base, "owner": owner.address},
        location=owner.address.rstrip("/"),
    )


def _windows(
    worker: WorkerView, table: Table, key: Any, partition: int, base: dict[str, Any]
) -> Answer:
    """Every committed window of ``key`` in a windowed table, in start order (one prefix seek,
    see ``state.windowed``); Kafka Streams' ``fetch(key, from, to)`` over all time."""
    codec = table.key_codec
    prefix = getattr(codec, "prefix", None)
    assert callable(prefix), "a windowed table's key codec is a WindowKeyCodec"
    windows = []
    for raw_window, raw in worker.stores[table.name].partition(partition).iter_prefix(prefix(key)):
        window = codec.loads(raw_window)
        value = table.value_codec.loads(raw)
        if isinstance(value, SlidingValue):
            value = value.value  # the aggregate; its max timestamp is the runtime's business
        windows.append(
            {
                "start": window.start,
                "end": window.end,
                "value": jsonable(value),
            }
        )
    if not windows:
        return Answer(404, {**base, "owner": worker.web_url, "error": "no committed window"})
    return Answer(200, {**base, "owner": worker.web_url, "windows": windows})


def _retry() -> dict[str, str]:
    return {"Retry-After": "1"}
