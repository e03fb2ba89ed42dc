"""``reset``: start an app over from its inputs, like Kafka Streams' application reset tool.

What it does (Kafka Streams' ``StreamsResetter`` plus ``KafkaStreams#cleanUp``):

1. the group's committed offsets are deleted and every input partition's offset is set to its
   earliest offset, so the next worker reprocesses everything still in the inputs;
2. the app's internal topics are deleted: table changelogs and ``group_by`` repartition topics
   (``<agent>-<source>-<label>-repartition``, Faust's naming, or ``<app id>-...-repartition``);
   the next worker creates them afresh;
3. the local state (RocksDB tables) under the state directory is wiped, so nothing restored
   from the old changelogs survives.

Output topics and dead-letter topics are left alone: they hold what downstream readers already
consumed (Kafka Streams does the same); reprocessing appends to them.

It refuses to run while the app could still be running: a live member in the group, an open
transaction of one of its workers (its offsets or changelog records could still commit), or a
worker holding the local state directory's lock.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from streams_app.app.app import App
from streams_app.errors import ConfigError, StreamsAppError
from streams_app.kafka.ops_admin import GroupMember, OpsAdmin
from streams_app.ops.transactions import TransactionRow, list_transactions
from streams_app.readback import app_input_topics
from streams_app.state.directory import StateDirectory
from streams_app.topology.plan import dead_letter_topic

TP = tuple[str, int]


class ResetRefused(StreamsAppError):
    """The app may still be running; the message says what to stop first."""


@dataclass
class ResetPlan:
    app_id: str
    #: Earliest offset of every input partition (what the group's offsets are set to).
    input_offsets: dict[TP, int]
    #: Internal topics that exist and will be deleted.
    internal_topics: list[str]
    #: Topics of the app that are kept (outputs, dead letters).
    kept_topics: list[str]
    #: ``<state_dir>/<app id>`` when it exists (its tables are wiped).
    state_path: Path | None
    state_dir: Path
    members: list[GroupMember] = field(default_factory=list)
    open_transactions: list[TransactionRow] = field(default_factory=list)


def internal_topics(app: App, topics: list[str]) -> list[str]:
    """The app's changelogs and repartition topics among ``topics``."""
    # Not a source topic serving as a table's changelog: an input (nor the input of a join
    # buffer declared with changelog="input": a join store, not listed).
    changelogs = app.own_changelogs()
    prefix = f"{app.id}-"
    # Repartition topics are named after the agent that re-keys, as Faust names them
    # (``<agent>-<source>-<label>-repartition``), not after the app: both prefixes count.
    repartition_prefixes = (prefix, *(f"{agent.name}-" for agent in app.agents))
    return sorted(
        t
        for t in topics
        if t in changelogs
        or (t.startswith(prefix) and t.endswith("-changelog"))
        or (t.startswith(repartition_prefixes) and t.endswith("-repartition"))
    )


async def plan_reset(admin: OpsAdmin, app: App, state_dir: Path | None = None) -> ResetPlan:
    existing = await admin.list_topics()
    internal = internal_topics(app, existing)
    inputs = [t for t in app_input_topics(app) if t in existing and t not in internal]
    tps = [(t, p) for t in inputs for p in await admin.partitions(t)]
    earliest = await admin.beginning_offsets(tps)
    declared = set(app.topics) | {dead_letter_topic(app.conf, t) for t in inputs}
    kept = sorted(t for t in existing if t in declared and t not in internal and t not in inputs)
    root = Path(state_dir) if state_dir is not None else Path(app.conf.state_dir)
    path = root / app.id
    group = await admin.describe_group(app.id)
    listing = await list_transactions(admin, prefix=f"{app.id}-")
    return ResetPlan(
        app_id=app.id,
        input_offsets=earliest,
        internal_topics=internal,
        kept_topics=kept,
        state_path=path if path.exists() else None,
        state_dir=root,
        members=list(group.members),
        open_transactions=[row for row in listing.rows if row.open],
    )


def check_refusals(plan: ResetPlan) -> None:
    if plan.members:
        who = ", ".join(f"{m.client_id} on {m.host.lstrip('/')}" for m in plan.members)
        raise ResetRefused(
            f"group {plan.app_id!r} has {len(plan.members)} live member(s) ({who}): stop every "
            "worker of the app first (a reset under a running worker would be undone by its "
            "next commit)"
        )
    if plan.open_transactions:
        ids = ", ".join(
            f"{row.transactional_id} ({row.state}, timeout {row.timeout_ms / 1000:g}s)"
            for row in plan.open_transactions
        )
        raise ResetRefused(
            f"open transaction(s) of the app's workers: {ids}. Their coordinator aborts them "
            "when their timeout passes; run the reset again then"
        )


async def execute_reset(admin: OpsAdmin, app: App, plan: ResetPlan) -> None:
    """Carry the plan out (after :func:`check_refusals`); holds the state directory's lock
    throughout, so no local worker can start in the middle."""
    check_refusals(plan)
    directory = None
    if plan.state_path is not None:
        try:
            directory = StateDirectory(plan.state_dir, app.id)
        except ConfigError as exc:
            raise ResetRefused(f"a worker still uses {plan.state_path}: {exc.problem}") from exc
    try:
        await admin.delete_group(app.id)
        if plan.input_offsets:
            await admin.commit_offsets(app.id, plan.input_offsets)
        if plan.internal_topics:
            await admin.delete_topics(plan.internal_topics)
            await _wait_deleted(admin, plan.internal_topics)
        if directory is not None:
            shutil.rmtree(directory.tables_path, ignore_errors=True)
    finally:
        if directory is not None:
            directory.close()


async def _wait_deleted(admin: OpsAdmin, topics: list[str], timeout: float = 60.0) -> None:
    """Topic deletion finishes in the background; a worker started before it has would find a
    topic that is about to disappear. Kafka offers no event for this: poll the metadata."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while set(topics) & set(await admin.list_topics()):
        if loop.time() > deadline:
            raise StreamsAppError(f"topics {topics} were not deleted within {timeout:g}s")
        await asyncio.sleep(0.2)
