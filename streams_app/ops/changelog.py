"""``changelog reseed|wipe``: what to do when a table's changelog was lost under its stores.

A worker refuses to start when a table partition's local store is at a changelog offset beyond
its changelog's end (the changelog was deleted, and maybe recreated, since:
:class:`~streams_app.errors.ChangelogBehindStore`), and stops when a changelog is deleted while
it runs (:class:`~streams_app.errors.ChangelogMissing`). Kafka Streams would wipe the store and
restore the (now empty) changelog: the table is lost without a word. Here an operator chooses:

- **reseed**: write every key of the local store partition into its changelog partition, in one
  transaction per partition (the worker's own transactional id, so a transaction a crashed
  incarnation left open is aborted first), then record in the store the changelog offset that
  covers it. The changelog then holds the table as the store does: the committed state as of
  the worker's last commit that reached the store (after a clean stop, its last commit; after a
  crash, up to ``rocksdb_write_behind_interval`` less). A missing changelog is created first
  (compacted, the table's partition count).
- **wipe**: drop those store partitions; the next worker restores them from the changelog as
  it is, empty or not. The table's history is lost, knowingly.

Either runs with the app stopped: it refuses while the group has members (their next commit
would interleave with the re-seed), and holds the state directory's lock throughout (no local
worker starts meanwhile). Only the partitions beyond their changelog's end are touched; run it
on every machine whose state directory holds partitions of the table.

A changelog partition that already holds records (someone wrote to the recreated changelog)
is not re-seeded without ``--force``: the store's older values would win over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streams_app.app.app import App
from streams_app.errors import ConfigError, StreamsAppError
from streams_app.kafka.ops_admin import OpsAdmin
from streams_app.readback import app_input_topics
from streams_app.state.base import Store
from streams_app.state.directory import StateDirectory
from streams_app.state.factory import open_store, rocksdb_options
from streams_app.transport.base import (
    AdminClient,
    ProducerConfig,
    TopicPartition,
    TopicSpec,
    Transport,
)

#: The re-seed's transaction timeout: a large table partition takes a while to send.
RESEED_TRANSACTION_TIMEOUT_MS = 300_000


class ChangelogRepairRefused(StreamsAppError):
    """The app may still be running, or the changelog holds records the store would override."""


@dataclass(frozen=True)
class PartitionState:
    partition: int
    #: The store's changelog offset (None: never written).
    stored: int | None
    begin: int
    end: int

    @property
    def beyond(self) -> bool:
        return self.stored is not None and self.stored > self.end


async def repair(
    app: App,
    table_name: str,
    action: str,
    *,
    state_dir: Path | None = None,
    force: bool = False,
) -> list[str]:
    """Re-seed (``action="reseed"``) or wipe (``"wipe"``) the store partitions of
    ``table_name`` under ``state_dir`` that lie beyond their changelog; returns what was done,
    one line per partition."""
    table = app.tables.get(table_name)
    if table is None:
        known = ", ".join(sorted(app.tables)) or "none"
        raise ConfigError(
            "table", f"{table_name!r} is no table of app {app.id}", f"use one of: {known}"
        )
    conf = app.conf
    async with OpsAdmin(conf.bootstrap_servers, **conf.security()) as ops:
        members = (await ops.describe_group(app.id)).members
    if members:
        raise ChangelogRepairRefused(
            f"group {app.id!r} has {len(members)} live member(s): stop every worker of the app "
            "first"
        )
    root = Path(state_dir) if state_dir is not None else Path(conf.state_dir)
    if not (root / app.id).is_dir():
        raise ConfigError(
            "state_dir",
            f"{root / app.id} does not exist: no local state of app {app.id} here",
            "pass the --state-dir the workers run with",
        )
    try:
        directory = StateDirectory(root, app.id)
    except ConfigError as exc:
        raise ChangelogRepairRefused(f"a worker still uses {root / app.id}: {exc.problem}") from exc
    transport = app.transport()
    admin = transport.admin()
    store: Store | None = None
    try:
        store = open_store(conf.store, directory, table.name, rocksdb_options(conf))
        await admin.start()
        topic = table.changelog_topic_name
        local = sorted(store.local_partitions())
        if not local:
            return [f"no local partition of table {table.name!r} under {directory.path}"]
        exists = topic in await admin.partition_counts([topic])
        if not exists:
            if action == "wipe":
                for p in local:
                    store.partition(p).wipe()
                return [
                    f"changelog {topic!r} does not exist: wiped every local partition of table "
                    f"{table.name!r} ({', '.join(map(str, local))})"
                ]
            await _create_changelog(admin, app, table.name, topic, table.partitions)
        states = await _states(admin, store, topic, local)
        lines = [
            f"{topic}[{s.partition}]: the store is at offset {s.stored}, within the changelog "
            f"[{s.begin}, {s.end}]: left alone"
            for s in states
            if not s.beyond
        ]
        beyond = [s for s in states if s.beyond]
        if action == "wipe":
            for s in beyond:
                store.partition(s.partition).wipe()
                lines.append(
                    f"{topic}[{s.partition}]: wiped the store (it was at offset {s.stored}, the "
                    f"changelog ends at {s.end}); the next worker restores it from the changelog"
                )
            return lines
        crowded = [s for s in beyond if s.end > s.begin]
        if crowded and not force:
            raise ChangelogRepairRefused(
                "changelog partition(s) "
                + ", ".join(f"{topic}[{s.partition}] ({s.end - s.begin} offsets)" for s in crowded)
                + " already hold records: re-seeding would let the store's older values win "
                "over them. Check what wrote them; re-run with --force to re-seed anyway, or "
                "wipe instead"
            )
        for s in beyond:
            lines.append(await _reseed(transport, directory, store, topic, s, app.id))
        return lines
    finally:
        if store is not None:
            store.close()
        await admin.close()
        directory.close()


async def _states(
    admin: AdminClient, store: Store, topic: str, partitions: list[int]
) -> list[PartitionState]:
    tps = [TopicPartition(topic, p) for p in partitions]
    begins = await admin.beginning_offsets(tps)
    ends = await admin.end_offsets(tps)
    return [
        PartitionState(
            tp.partition, store.partition(tp.partition).changelog_offset, begins[tp], ends[tp]
        )
        for tp in tps
    ]


async def _create_changelog(
    admin: AdminClient, app: App, table: str, topic: str, partitions: int | None
) -> None:
    """The changelog as a worker creates it: compacted, with the table's partition count."""
    if partitions is None:
        counts = await admin.partition_counts(app_input_topics(app))
        found = sorted(set(counts.values()) - {1}) or sorted(set(counts.values()))
        if len(found) != 1:
            raise ConfigError(
                "partitions",
                f"table {table!r} does not say its partition count and its changelog {topic!r} "
                f"is gone (input topics have {found or 'none'})",
                "pass partitions= to app.Table, or create the changelog (cleanup.policy=compact, "
                "the table's partition count) and run this again",
            )
        partitions = found[0]
    conf = app.conf
    await admin.create_topics(
        [TopicSpec(topic, partitions, conf.topic_replication_factor, {"cleanup.policy": "compact"})]
    )


async def _reseed(
    transport: Transport,
    directory: StateDirectory,
    store: Store,
    topic: str,
    state: PartitionState,
    app_id: str,
) -> str:
    part = store.partition(state.partition)
    producer = transport.producer(
        ProducerConfig(
            transactional_id=f"{app_id}-{directory.process_id}",
            transaction_timeout_ms=RESEED_TRANSACTION_TIMEOUT_MS,
            client_id=f"{app_id}-changelog-reseed",
        )
    )
    await producer.start()
    try:
        await producer.begin_transaction()
        last = None
        count = 0
        for key, value in part.items():
            last = await producer.send(topic, key=key, value=value, partition=state.partition)
            count += 1
        await producer.flush()
        await producer.commit_transaction()
    finally:
        await producer.stop()
    # The store now covers the changelog up to its last record; restore reads the commit marker.
    offset = (await last).offset + 1 if last is not None else state.end
    part.write({}, offset)
    return (
        f"{topic}[{state.partition}]: re-seeded {count} key(s) from the local store (it was at "
        f"offset {state.stored}, the changelog ended at {state.end}); the store is now at "
        f"offset {offset}"
    )
