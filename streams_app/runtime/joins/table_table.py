"""Table-table joins, inner, left and outer (Kafka Streams' ``KTableKTableInnerJoin``,
``...LeftJoin``, ``...OuterJoin``, without a cache and without old values; docs/joins.md).

Both tables are built from co-partitioned topics, so a key's two rows live in the same task.
Each update of either table (after the table applied it) emits what the join holds for its key
now: the new joined value, or a tombstone where the join had a value and has none any more (a
tombstone Kafka Streams also sends where the join had no value: the same "redundant"
tombstones, so the change streams are identical). The result's timestamp is the larger of the
two rows' record times (each table keeps its rows' times for this, ``Table.keep_times``).

The joined value of a key is also readable as a table (``JoinedTable``), computed from the two
tables on read: nothing else is stored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from streams_app.app.joins import LEFT, OUTER
from streams_app.runtime.joins.base import JoinProcessor, TableListener
from streams_app.runtime.joins.runtime import register
from streams_app.runtime.joins.sources import row_time
from streams_app.topology.contract import MISSING, Event
from streams_app.topology.description import TABLE_TABLE

if TYPE_CHECKING:
    from streams_app.app.table import Table


@register
class TableTableJoin(JoinProcessor):
    kind = TABLE_TABLE

    def table_listeners(self) -> Iterable[tuple[str, TableListener]]:
        join = self.join
        how = join.how
        left, right = join.left_table, join.right_table

        def listener(this_outer: bool, other_outer: bool, is_left: bool, other: Table) -> Any:
            async def changed(event: Event, key: Any, old: Any, new: Any) -> None:
                await self._changed(event, key, old, new, this_outer, other_outer, is_left, other)

            return changed

        outer = how == OUTER
        return (
            (left.name, listener(outer or how == LEFT, outer, True, right)),
            (right.name, listener(outer, outer or how == LEFT, False, left)),
        )

    async def _changed(
        self,
        event: Event,
        key: Any,
        old: Any,
        new: Any,
        this_outer: bool,
        other_outer: bool,
        is_left: bool,
        other: Table,
    ) -> None:
        partner = other.get(key, MISSING)
        timestamp = event.timestamp
        if partner is MISSING:
            if not this_outer or (new is MISSING and old is MISSING):
                return
        else:
            partner_time = row_time(other, event.task, key)
            if partner_time is not None and partner_time > timestamp:
                timestamp = partner_time
        if new is MISSING and (partner is MISSING or not other_outer):
            await self.emit(event.task, key, None, timestamp, event)  # the join has no value
            return
        mine = None if new is MISSING else new
        theirs = None if partner is MISSING else partner
        value = self.join.result(mine, theirs) if is_left else self.join.result(theirs, mine)
        await self.emit(event.task, key, value, timestamp, event)
