"""How far behind its inputs a worker is, per partition, from what it already knows.

No request is made: the end offset is the high watermark of the consumer's last fetch response
for the partition (every fetch response carries it, empty or not), the position is the task's
next offset to process, the committed offset what the group committed. A paused partition (its
task restores) is not fetched, so its end is unknown until processing starts. Read by
``/metrics`` (``streams_app_consumer_lag``), ``/assignment`` and the catch-up progress lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from streams_app.runtime.task import Task
from streams_app.runtime.task_manager import TaskManager
from streams_app.transport.base import ConsumerClient, TopicPartition


@dataclass(frozen=True)
class PartitionLag:
    tp: TopicPartition
    task: str
    state: str
    #: The next offset to process.
    position: int | None
    #: The group's committed offset (None: never committed).
    committed: int | None
    #: The high watermark of the last fetch (None: not fetched yet).
    end: int | None
    #: The last stable offset of the last fetch (below ``end``: a transaction is open).
    stable: int | None = None

    @property
    def lag(self) -> int | None:
        if self.end is None or self.position is None:
            return None
        return max(0, self.end - self.position)


def partition_lags(tasks: TaskManager, consumer: ConsumerClient) -> list[PartitionLag]:
    out: list[PartitionLag] = []
    for tp, task in sorted(tasks.by_tp.items()):
        out.append(
            PartitionLag(
                tp,
                str(task.id),
                task.state,
                task.offsets.get(tp),
                task.committed.get(tp),
                consumer.highwater(tp),
                consumer.last_stable_offset(tp),
            )
        )
    return out


def running_lag(tasks: TaskManager, consumer: ConsumerClient) -> tuple[int, int] | None:
    """Records behind on the running tasks' partitions, and how many partitions; None while a
    task restores or a partition's end is not known yet."""
    total = 0
    count = 0
    for entry in partition_lags(tasks, consumer):
        lag = entry.lag
        if entry.state != "running" or lag is None:
            return None
        total += lag
        count += 1
    return total, count


def input_waiting(task: Task, consumer: ConsumerClient) -> bool:
    """The task has something to commit, or records on the broker past its committed offset
    (as of the last fetch: the last stable offset, else the high watermark)."""
    if task.has_uncommitted:
        return True
    for tp in task.partitions:
        committed = task.committed.get(tp)
        if committed is None:
            return True
        end = consumer.last_stable_offset(tp)
        if end is None:
            end = consumer.highwater(tp)
        if end is not None and end > committed:
            return True
    return False
