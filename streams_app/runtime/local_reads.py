"""Reading a table outside of a record: the committed state of the partitions this worker holds.

Pages, tasks, timers without a task of their own, and ``table.local_items()`` read a table with
no record being processed, so no task's open transaction is theirs to read through. They read
what the worker's stores hold, which is only ever what Kafka committed (state/base.py): the
writes of the transaction still open are not seen until it commits (one ``commit_interval``
later under exactly-once), the isolation KIP-892 proposes for Kafka Streams' interactive
queries under exactly-once. Nothing an abort takes back ever reaches a page.

Which partitions: the active tasks' (standbys lag, and are not this worker's to answer for);
every partition for a global table. A task still restoring answers with what it has restored
so far (committed, but behind; ``/tables`` answers 503 for it instead). A key is looked up
first in the partition Kafka's partitioner gives it (where records keyed like the table put
it, and where ``table_route`` sends its requests), then in the worker's other partitions, as
Faust's store searches every partition it holds: a key written while processing records of
another key (Faust's ``tabletest`` sends key ``"0"`` to an explicit partition) is still found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from streams_app.topology.contract import MISSING, TableLike

if TYPE_CHECKING:
    from streams_app.runtime.task_manager import TaskManager
    from streams_app.state.base import Store
    from streams_app.topology.plan import TopologyPlan

#: ``(key bytes, partition count) -> partition``: Kafka's default partitioner (the transport's).
Partitioner = Callable[[bytes, int], int]


def held_partitions(table: TableLike, plan: TopologyPlan, tasks: TaskManager) -> list[int]:
    """The partitions of ``table`` this worker answers for, in ascending order."""
    if table.is_global:
        return list(range(plan.table_partitions[table.name]))
    return sorted(
        task.id.partition
        for task in list(tasks.tasks.values())
        if table.name in tasks.plan.tables_by_group.get(task.id.group, ())
    )


def items(table: TableLike, store: Store, partitions: Iterable[int]) -> Iterator[tuple[Any, Any]]:
    """Every committed item of ``partitions``, decoded."""
    loads_key, loads_value = table.key_codec.loads, table.value_codec.loads
    for partition in partitions:
        for raw_key, raw_value in store.partition(partition).items():
            yield loads_key(raw_key), loads_value(raw_value)


def lookup(
    table: TableLike,
    store: Store,
    partitions: list[int],
    key: Any,
    partitioner: Partitioner,
    count: int,
) -> Any:
    """``key``'s committed value (``MISSING`` if no held partition has it): its own partition
    (of ``count``) first, then the others held here."""
    if not partitions:
        return MISSING
    raw_key = table.key_codec.dumps(key)
    order = partitions
    try:
        own: int | None = partitioner(table.partition_key_bytes(key), count)
    except (TypeError, ValueError):
        own = None
    if own in partitions:
        order = [own, *(p for p in partitions if p != own)]
    for partition in order:
        raw = store.partition(partition).get(raw_key)
        if raw is not None:
            return table.value_codec.loads(raw)
    return MISSING
