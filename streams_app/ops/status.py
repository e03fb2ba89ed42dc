"""``status``: an app's group, who owns which task, how far each input is committed, and the
open transactions of its workers.

Tasks are named as the runtime names them (and as Kafka Streams prints them): ``<group>_<p>``,
where ``group`` numbers the app's co-partitioned input topic groups by partition count and
``p`` is the partition. A task's owner is the group member assigned its partitions.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams_app.app.app import App
from streams_app.kafka.ops_admin import GroupDescription, GroupMember, OpsAdmin
from streams_app.ops.transactions import TransactionRow, list_transactions
from streams_app.readback import PartitionProgress, app_input_topics, progress_with


@dataclass(frozen=True)
class TaskLine:
    group: int
    progress: PartitionProgress
    owner: GroupMember | None

    @property
    def task(self) -> str:
        return f"{self.group}_{self.progress.partition}"


@dataclass
class AppStatus:
    app_id: str
    group: GroupDescription
    tasks: list[TaskLine]
    transactions: list[TransactionRow]
    at_ms: int
    #: Input partitions whose last stable offset is below the end: (LSO, end). An open
    #: transaction holds read_committed readers (the app's workers) at the LSO.
    held: dict[tuple[str, int], tuple[int, int]]

    @property
    def lag(self) -> int:
        return sum(line.progress.lag for line in self.tasks)

    @property
    def caught_up(self) -> bool:
        return bool(self.tasks) and self.lag == 0


def _task_groups(counts: dict[str, int]) -> dict[int, int]:
    """Partition count -> task group index, as the runtime's TopologyPlan numbers them."""
    return {count: index for index, count in enumerate(sorted(set(counts.values())))}


async def app_status(admin: OpsAdmin, app: App) -> AppStatus:
    group_id = app.conf.id
    group = await admin.describe_group(group_id)
    committed = await admin.committed_offsets(group_id)
    existing = set(await admin.list_topics())
    topics = {t for t in app_input_topics(app) if t in existing}
    topics |= {topic for topic, _ in committed if topic in existing}
    progress = await progress_with(admin, group_id, sorted(topics))
    counts: dict[str, int] = {}
    for line in progress:
        counts[line.topic] = max(counts.get(line.topic, 0), line.partition + 1)
    groups = _task_groups(counts)
    owners = {tp: member for member in group.members for tp in member.assignment}
    tasks = [
        TaskLine(groups[counts[p.topic]], p, owners.get((p.topic, p.partition))) for p in progress
    ]
    tasks.sort(key=lambda t: (t.group, t.progress.partition, t.progress.topic))
    listing = await list_transactions(admin, prefix=f"{group_id}-")
    tps = [(p.topic, p.partition) for p in progress]
    stable = await admin.end_offsets(tps, committed=True)
    ends = await admin.end_offsets(tps)
    held = {tp: (stable[tp], ends[tp]) for tp in tps if stable[tp] < ends[tp]}
    return AppStatus(group_id, group, tasks, listing.rows, listing.at_ms, held)
