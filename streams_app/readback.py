"""Read back what an app committed, the way a downstream consumer sees it: the Python API for
app teams, scripts and tests (the CLI's ``status``, ``tables`` and ``--wait-committed`` use it).

- :func:`read_topics`: every record of some topics up to their end offsets, ``read_committed``
  by default, so exactly what committed transactions produced, in partition order;
- :func:`read_table`: a table's committed contents, from its changelog (``read_committed``, the
  latest value per key, tombstones delete); :func:`read_table_versions` a versioned table's
  versions; :func:`read_table_key` one key's, from the one changelog partition holding it;
- :func:`group_progress` and :func:`wait_committed`: per input partition, the group's committed
  offset against the end offset, and waiting until the group has committed everything written
  so far (what a test or a deployment script needs instead of polling raw offsets);
- :func:`wait_app_committed`: the same for an :class:`~streams_app.app.app.App`'s own group and
  inputs.

See docs/operations.md ("Read-back from Python").
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiokafka.errors as aerrors
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2

from streams_app.aio import within
from streams_app.kafka.ops_admin import OpsAdmin, OpsAdminError
from streams_app.lineage import parse_lineage
from streams_app.state.composite import STREAM_TIME
from streams_app.state.versioned import VersionedRecord, key_versions, latest_value

if TYPE_CHECKING:
    from streams_app.app.app import App
    from streams_app.app.table import Table


@dataclass(frozen=True)
class ReadRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]

    @property
    def lineage(self) -> tuple[str | None, int, int] | None:
        """``(topic, partition, offset)`` of the input record this one was produced from, read
        from its lineage header(s) in either format (:mod:`streams_app.lineage`)."""
        return parse_lineage(self.headers)

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


async def read_topics(
    bootstrap: str,
    topics: Collection[str],
    *,
    isolation_level: str = "read_committed",
    timeout: float = 60.0,
    security: dict[str, Any] | None = None,
    partitions: Mapping[str, Collection[int]] | None = None,
) -> dict[str, list[ReadRecord]]:
    """Every record of ``topics`` up to the end offsets at call time, per topic, in partition
    order (only the ``partitions`` given for a topic named there). ``read_committed`` stops at
    the last stable offset, so a transaction still open would make this wait: it raises
    TimeoutError after ``timeout`` seconds in that case."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        **(security or {}),
    )
    await consumer.start()
    try:
        tps: list[TopicPartition] = []
        for topic in topics:
            found = consumer.partitions_for_topic(topic)
            if found is None:
                await consumer._client.force_metadata_update()
                found = consumer.partitions_for_topic(topic) or set()
            if partitions is not None and topic in partitions:
                found = set(found) & set(partitions[topic])
            tps.extend(TopicPartition(topic, p) for p in sorted(found))
        out: dict[str, list[ReadRecord]] = {t: [] for t in topics}
        if not tps:
            return out
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)  # LSO when read_committed
        by_tp: dict[TopicPartition, list[ReadRecord]] = {tp: [] for tp in tps}
        remaining = {tp for tp in tps if ends[tp] > 0}

        async def drain() -> None:
            while remaining:
                batch = await consumer.getmany(*remaining, timeout_ms=500)
                for tp, records in batch.items():
                    by_tp[tp].extend(
                        ReadRecord(
                            r.topic,
                            r.partition,
                            r.offset,
                            r.timestamp,
                            r.key,
                            r.value,
                            tuple(r.headers),
                        )
                        for r in records
                        if r.offset < ends[tp]
                    )
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)

        await within(drain(), timeout)
        for tp in tps:
            out[tp.topic].extend(by_tp[tp])
        return out
    finally:
        await consumer.stop()


async def last_stable_equals_high_watermark(
    bootstrap: str, topics: Collection[str], security: dict[str, Any] | None = None
) -> dict[TopicPartition, tuple[int, int]]:
    """Partitions whose last stable offset is below the high watermark (open transactions)."""
    result: dict[TopicPartition, tuple[int, int]] = {}
    committed = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", **(security or {})
    )
    uncommitted = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_uncommitted", **(security or {})
    )
    await committed.start()
    await uncommitted.start()
    try:
        tps: list[TopicPartition] = []
        for t in topics:
            partitions = committed.partitions_for_topic(t)
            if not partitions:  # not in the metadata cache yet: ask for it
                await committed._client.force_metadata_update()
                partitions = committed.partitions_for_topic(t) or set()
            tps.extend(TopicPartition(t, p) for p in sorted(partitions))
        if not tps:
            return result
        lso = await committed.end_offsets(tps)
        hw = await uncommitted.end_offsets(tps)
        for tp in tps:
            if lso[tp] != hw[tp]:
                result[tp] = (lso[tp], hw[tp])
        return result
    finally:
        await committed.stop()
        await uncommitted.stop()


_COORDINATOR_NOT_READY = (
    aerrors.GroupCoordinatorNotAvailableError,
    aerrors.CoordinatorLoadInProgressError,
    aerrors.NotCoordinatorError,
)


async def group_lag(
    bootstrap: str,
    group_id: str,
    topics: Collection[str],
    *,
    security: dict[str, Any] | None = None,
) -> dict[tuple[str, int], int]:
    """Per input partition, how far the group's committed offset is behind the end offset.

    An empty answer means everything written to ``topics`` so far has been processed and
    committed: the worker commits the position after the transaction markers (see
    ``Worker._sync_positions``), so a drained partition has committed == end exactly. While the
    group's coordinator is not available (a new broker still creating ``__consumer_offsets``,
    or a coordinator moving), nothing counts as committed: callers poll this until it is empty.
    """
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **(security or {})
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **(security or {}))
    await consumer.start()
    try:
        await admin.start()
        tps: list[TopicPartition] = []
        for topic in topics:
            partitions = consumer.partitions_for_topic(topic)
            if partitions is None:
                await consumer._client.force_metadata_update()
                partitions = consumer.partitions_for_topic(topic) or set()
            tps.extend(TopicPartition(topic, p) for p in sorted(partitions))
        ends = await consumer.end_offsets(tps)
        try:
            found = await admin.list_consumer_group_offsets(group_id, partitions=tps)
        except _COORDINATOR_NOT_READY:
            found = {}
        lag: dict[tuple[str, int], int] = {}
        for tp in tps:
            meta = found.get(tp)
            committed = meta.offset if meta is not None and meta.offset >= 0 else 0
            if ends[tp] > committed:
                lag[(tp.topic, tp.partition)] = ends[tp] - committed
        return lag
    finally:
        await consumer.stop()
        await admin.close()


# -- tables ------------------------------------------------------------------------------------


async def read_table(
    app: App,
    table: str | Table,
    *,
    timeout: float = 60.0,
    bootstrap: str | None = None,
) -> dict[Any, Any]:
    """A table's committed contents, decoded with its codecs: ``{key: value}``.

    Read from the table's changelog topic, ``read_committed``, up to the last stable offset at
    call time: what every worker restoring the table would see, and nothing an open transaction
    holds. The latest record per key wins and a tombstone (null value) deletes the key. Empty
    when the changelog does not exist yet (no worker has run). A windowed table: ``{WindowKey:
    stored}``; a versioned table: each key's latest value, a key whose latest version is a
    tombstone left out, as ``table[key]`` reads it (:func:`read_table_versions` has them all).
    """
    found = _table_of(app, table)
    contents = decode_changelog(found, await _read_changelog(app, found, timeout, bootstrap))
    if found.versioned_ms is None:
        return contents
    return {
        key: last.value
        for key, versions in key_versions(contents.items()).items()
        if (last := latest_value(versions)) is not None
    }


async def read_table_versions(
    app: App,
    table: str | Table,
    *,
    timeout: float = 60.0,
    bootstrap: str | None = None,
) -> dict[Any, list[VersionedRecord]]:
    """A versioned table's committed versions, read as :func:`read_table` reads: ``{key:
    [VersionedRecord(value, valid_from, valid_to)]}``, oldest first, a tombstone version's value
    None (so a deleted key is there, its latest value None); every version the changelog still
    holds, as the owner's ``/tables/NAME/KEY`` lists them."""
    found = _table_of(app, table)
    if found.versioned_ms is None:
        raise ValueError(f"table {found.name!r} is not versioned: read_table() reads it")
    records = await _read_changelog(app, found, timeout, bootstrap)
    return key_versions(decode_changelog(found, records).items())


def _table_of(app: App, table: str | Table) -> Table:
    name = table if isinstance(table, str) else table.name
    found = app.tables.get(name)
    if found is None:
        raise KeyError(f"app {app.id!r} has no table {name!r} (it has {sorted(app.tables)})")
    return found


async def _read_changelog(
    app: App, table: Table, timeout: float, bootstrap: str | None
) -> list[ReadRecord]:
    changelog = table.changelog_topic_name
    records = await read_topics(
        bootstrap or app.conf.bootstrap_servers,
        [changelog],
        timeout=timeout,
        security=app.conf.security(),
    )
    return records[changelog]


_ANY_KEY: Any = object()


def decode_changelog(
    table: Table, records: Iterable[ReadRecord], key: Any = _ANY_KEY
) -> dict[Any, Any]:
    """The store entries a table's changelog records leave, decoded with the table's store
    codecs: the latest record per store key wins, a tombstone (null value) deletes it. With
    ``key``, only that user key's entries: a plain table's one, a windowed table's windows of
    it, a versioned table's versions of it (a versioned table's stream time entry belongs to no
    key: it is kept only without ``key``)."""
    entries: dict[Any, Any] = {}
    for record in records:
        if record.key is None:
            continue
        stored = table.key_codec.loads(record.key)
        if key is not _ANY_KEY and _user_key(table, stored) != key:
            continue
        if record.value is None:
            entries.pop(stored, None)
        else:
            entries[stored] = table.value_codec.loads(record.value)
    return entries


def _user_key(table: Table, stored: Any) -> Any:
    """The user's key of a store key (windowed: ``WindowKey``; versioned: ``(key,
    valid_from)``, or the stream time entry, which is nobody's)."""
    if table.window is not None:
        return stored.key
    if table.versioned_ms is not None:
        return _ANY_KEY if stored is STREAM_TIME else stored[0]
    return stored


async def partition_count(admin: OpsAdmin, topic: str) -> int:
    """The topic's partition count; 0 when it does not exist (yet)."""
    try:
        return len(await admin.partitions(topic))
    except OpsAdminError:
        return 0


def key_partition(table: Table, key: Any, partitions: int) -> int:
    """The changelog partition holding ``key`` of ``table``: where Kafka's default partitioner
    (murmur2) sends records keyed like it, which is where the table was written (Kafka Streams'
    and Faust's assumption, as the workers' ``/tables`` routing)."""
    return (int(murmur2(table.partition_key_bytes(key))) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class KeyRead:
    """One key of a table read from its changelog partition (:func:`read_table_key`)."""

    partition: int
    #: Changelog records read (that one partition's, up to its last stable offset).
    records: int
    #: The key's committed value, or for a windowed table ``{WindowKey: value}`` of its windows
    #: (a versioned table: its latest value, None if that is a tombstone).
    value: Any
    found: bool
    #: A versioned table: the key's versions, oldest first, tombstones included (value None).
    versions: tuple[VersionedRecord, ...] = ()


async def read_table_key(
    app: App,
    table: str | Table,
    key: Any,
    *,
    timeout: float = 60.0,
    bootstrap: str | None = None,
    admin: OpsAdmin | None = None,
) -> KeyRead:
    """One key's committed value (a windowed table: its committed windows; a versioned table:
    its latest value and its versions), read from the one changelog partition that holds it,
    ``read_committed`` (as :func:`read_table`, which reads them all). Not found when the
    changelog does not exist yet, or when a versioned table's latest version of the key is a
    tombstone. ``admin``: one the caller holds (else one is opened for the call)."""
    found = _table_of(app, table)
    changelog = found.changelog_topic_name
    bootstrap = bootstrap or app.conf.bootstrap_servers
    if admin is None:
        async with OpsAdmin(bootstrap, **app.conf.security()) as own:
            count = await partition_count(own, changelog)
    else:
        count = await partition_count(admin, changelog)
    if not count:
        return KeyRead(-1, 0, {} if found.window is not None else None, False)
    partition = key_partition(found, key, count)
    records = (
        await read_topics(
            bootstrap,
            [changelog],
            timeout=timeout,
            security=app.conf.security(),
            partitions={changelog: [partition]},
        )
    )[changelog]
    return key_read(found, key, partition, records)


def key_read(table: Table, key: Any, partition: int, records: list[ReadRecord]) -> KeyRead:
    """:func:`read_table_key`'s answer from the records of ``key``'s changelog partition."""
    latest = decode_changelog(table, records, key)
    if table.window is not None:
        return KeyRead(partition, len(records), dict(sorted(latest.items())), bool(latest))
    if table.versioned_ms is not None:
        versions = key_versions(latest.items()).get(key, [])
        last = latest_value(versions)
        return KeyRead(
            partition,
            len(records),
            None if last is None else last.value,
            last is not None,
            tuple(versions),
        )
    return KeyRead(partition, len(records), latest.get(key), key in latest)


# -- committed progress of a group -------------------------------------------------------------


@dataclass(frozen=True)
class PartitionProgress:
    """One input partition of a group: its committed offset against the end of the log."""

    topic: str
    partition: int
    #: The group's committed offset (the next record to process); None: never committed.
    committed: int | None
    #: The high watermark when read.
    end: int
    #: Records written and not yet committed as processed (from the log start if never
    #: committed).
    lag: int


async def progress_with(
    admin: OpsAdmin, group_id: str, topics: Collection[str] | None
) -> list[PartitionProgress]:
    """:func:`group_progress` through an admin client the caller already holds."""
    committed = await admin.committed_offsets(group_id)
    names = sorted(set(topics) if topics is not None else {topic for topic, _ in committed})
    tps: list[tuple[str, int]] = []
    for name in names:
        tps.extend((name, p) for p in await admin.partitions(name))
    ends = await admin.end_offsets(tps)
    missing = [tp for tp in tps if tp not in committed]
    starts = await admin.beginning_offsets(missing)
    out = []
    for tp in tps:
        done = committed.get(tp)
        base = done if done is not None else starts[tp]
        out.append(PartitionProgress(tp[0], tp[1], done, ends[tp], max(0, ends[tp] - base)))
    return out


async def group_progress(
    bootstrap: str,
    group_id: str,
    topics: Collection[str] | None = None,
    *,
    security: dict[str, Any] | None = None,
) -> list[PartitionProgress]:
    """Committed offset, end offset and lag of every partition of ``topics`` (default: every
    topic the group has committed offsets for)."""
    async with OpsAdmin(bootstrap, **(security or {})) as admin:
        return await progress_with(admin, group_id, topics)


async def wait_committed(
    bootstrap: str,
    group_id: str,
    topics: Collection[str] | None = None,
    *,
    timeout: float = 60.0,
    poll: float = 0.2,
    security: dict[str, Any] | None = None,
    outputs: Collection[str] = (),
) -> list[PartitionProgress]:
    """Wait until ``group_id`` has committed everything written to ``topics`` so far.

    With ``outputs``, also wait until none of their partitions holds an open transaction: a
    transaction's commit marker reaches ``__consumer_offsets`` and the output partitions
    separately, so right after the offsets show up a ``read_committed`` reader of an output
    could still stop short of the records that transaction committed.

    Done when, on every partition, the committed offset has reached the end offset, and the end
    offsets did not move while that was checked (so records a repartition step wrote in the
    meantime are not missed). A worker commits the position after a trailing transaction marker,
    so "committed == end" means everything was processed. Kafka offers no event for this, so
    it polls every ``poll`` seconds. Returns the final progress; raises :class:`TimeoutError`
    naming the lagging partitions after ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with OpsAdmin(bootstrap, **(security or {})) as admin:
        while True:
            progress = await progress_with(admin, group_id, topics)
            if progress and all(p.lag == 0 for p in progress):
                again = await admin.end_offsets([(p.topic, p.partition) for p in progress])
                if all(again[(p.topic, p.partition)] == p.end for p in progress) and not (
                    outputs
                    and await last_stable_equals_high_watermark(bootstrap, outputs, security)
                ):
                    return progress
            if loop.time() > deadline:
                behind = [p for p in progress if p.lag] or progress
                detail = ", ".join(
                    f"{p.topic}[{p.partition}] committed "
                    f"{'nothing' if p.committed is None else p.committed} of {p.end}"
                    for p in behind[:8]
                )
                raise TimeoutError(
                    f"group {group_id!r} has not committed everything after {timeout:g}s: "
                    f"{detail or 'no input partitions found'}"
                )
            await asyncio.sleep(poll)


def app_input_topics(app: App) -> list[str]:
    """The topics an app's agents consume (its repartition topics appear once it has run)."""
    return sorted({agent.channel.name for agent in app.agents})


async def wait_app_committed(
    app: App, *, timeout: float = 60.0, poll: float = 0.2
) -> list[PartitionProgress]:
    """:func:`wait_committed` for the app's own group, over its agents' input topics and every
    topic the group has committed offsets for (its repartition topics); its other declared
    topics and its tables' changelogs are the outputs that must hold no open transaction."""
    conf = app.conf
    async with OpsAdmin(conf.bootstrap_servers, **conf.security()) as admin:
        committed = await admin.committed_offsets(conf.id)
    topics = set(app_input_topics(app)) | {topic for topic, _ in committed}
    outputs = (set(app.topics) | {t.changelog_topic_name for t in app.tables.values()}) - topics
    return await wait_committed(
        conf.bootstrap_servers,
        conf.id,
        topics,
        timeout=timeout,
        poll=poll,
        security=conf.security(),
        outputs=sorted(outputs),
    )
