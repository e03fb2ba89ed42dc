"""Foreign-key table-table joins, inner and left (KIP-213; Kafka Streams'
``KTable#join(KTable, Function)``; docs/joins.md).

Each left row joins the right row whose key is ``foreign_key(left value)``; the right table
needs no co-partitioning with the left. Four steps, each in the transaction of the record that
causes it (so the chain is exactly once end to end):

1. **Left update** (a listener of the left table): a row whose foreign key changed withdraws its
   old subscription; a row with a foreign key subscribes (``<app>-<join>-subscription``, keyed by
   the foreign key's bytes, so Kafka's default partitioner routes it to the right table's
   partition holding that key), carrying its key, a hash of its value and its partition. A
   deleted row emits a tombstone; a row without a foreign key emits ``(left, None)`` (left) or
   a tombstone (inner) at once.
2. **Subscription** (read in the right table's task): recorded in the subscription store
   (``state/subscriptions.py``), answered with the right row now (``<app>-<join>-response``, to
   the left row's partition).
3. **Right update** (a listener of the right table): every subscriber of the key is answered
   with the new right row (None: deleted).
4. **Response** (read in the left row's task): dropped if the left row changed since (its hash
   differs: a newer answer is on its way) or is gone; else the result: ``joiner(left, right)``,
   or for a missing right row ``joiner(left, None)`` (left) or a tombstone (inner).

Results are keyed by the left key; their time is the larger of the two rows' record times.
Intermediate results depend on how subscriptions and responses interleave (as in Kafka
Streams); the final result per left key is defined.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from streams_app.app.joins import INNER
from streams_app.runtime.joins.base import JoinProcessor, TableListener
from streams_app.runtime.joins.runtime import register
from streams_app.runtime.joins.sources import row_time
from streams_app.state.subscriptions import SubscriptionTransaction, value_hash
from streams_app.topology.contract import MISSING, Event
from streams_app.topology.description import FOREIGN_KEY

if TYPE_CHECKING:
    from streams_app.runtime.actor import Feeder
    from streams_app.topology.contract import TaskScope


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class _Door:
    """One internal topic's feeder (the dispatcher wants ``label`` and ``forward``)."""

    def __init__(self, label: str, forward: Any) -> None:
        self.label = label
        self.forward = forward


@register
class ForeignKeyJoin(JoinProcessor):
    kind = FOREIGN_KEY

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        join = self.join
        self.left_join = join.how != INNER
        self.left, self.right = join.left_table, join.right_table
        extractor = join.key
        assert extractor is not None
        self.extract = extractor
        self.subscriptions_topic = join.topics["subscription"]
        self.responses_topic = join.topics["response"]

    # -- the doors ---------------------------------------------------------------------------

    def feeders(self) -> Iterable[tuple[str, Feeder]]:
        return (
            (self.subscriptions_topic.name, _Door(f"{self.label}:subscription", self._subscribed)),
            (self.responses_topic.name, _Door(f"{self.label}:response", self._answered)),
        )

    def table_listeners(self) -> Iterable[tuple[str, TableListener]]:
        return ((self.left.name, self._left_changed), (self.right.name, self._right_changed))

    def open(self, task: TaskScope) -> SubscriptionTransaction:
        codec: Any = self.join.stores["subscriptions"].key_codec
        return SubscriptionTransaction(self.store(task, "subscriptions"), codec)

    def _hash(self, left_value: Any) -> bytes:
        return value_hash(self.left.value_codec.dumps(left_value))

    def _foreign_key(self, left_value: Any) -> Any:
        return None if left_value is MISSING or left_value is None else self.extract(left_value)

    # -- 1. left update ----------------------------------------------------------------------

    async def _left_changed(self, event: Event, key: Any, old: Any, new: Any) -> None:
        old_fk, new_fk = self._foreign_key(old), self._foreign_key(new)
        pk = self.left.key_codec.dumps(key)
        if old_fk is not None and old_fk != new_fk:
            await self._subscription(old_fk, {"pk": _b64(pk)}, event.timestamp)
        if new is MISSING:
            await self.emit(event.task, key, None, event.timestamp, event)
            return
        if new_fk is None:
            value = self.join.result(new, None) if self.left_join else None
            await self.emit(event.task, key, value, event.timestamp, event)
            return
        await self._subscription(
            new_fk,
            {
                "pk": _b64(pk),
                "hash": _b64(self._hash(new)),
                "partition": event.partition,
                "ts": event.timestamp,
            },
            event.timestamp,
        )

    async def _subscription(self, foreign_key: Any, body: dict[str, Any], ts: int) -> None:
        # At the left record's time, as Kafka Streams does: the right task takes it in time
        # order with the right table's updates.
        await self.subscriptions_topic.send(
            key=self.right.key_codec.dumps(foreign_key),
            value=json.dumps(body).encode(),
            timestamp=ts / 1000,
        )

    # -- 2. subscription, in the right row's task ---------------------------------------------

    async def _subscribed(self, event: Event) -> None:
        if event.raw_key is None or event.value is None:
            return
        foreign_key = self.right.key_codec.loads(event.raw_key)
        body = json.loads(event.value)
        pk_bytes = _unb64(body["pk"])
        assert pk_bytes is not None
        left_key = self.left.key_codec.loads(pk_bytes)
        subscriptions: SubscriptionTransaction = self.state(event.task)
        digest = _unb64(body.get("hash"))
        if digest is None:  # withdrawn
            subscriptions.unsubscribe(foreign_key, left_key)
            return
        subscriptions.subscribe(foreign_key, left_key, digest, body["partition"])
        right = self.right.get(foreign_key, MISSING)
        right_ts = row_time(self.right, event.task, foreign_key) if right is not MISSING else None
        await self._respond(
            pk_bytes, digest, body["partition"], right, body["ts"], right_ts, event.timestamp
        )

    async def _respond(
        self,
        pk: bytes,
        digest: bytes,
        partition: int,
        right: Any,
        left_ts: int,
        right_ts: int | None,
        now: int,
    ) -> None:
        """An answer to ``pk``'s subscription, sent at ``now`` (the time of the record that
        made it), carrying the result's time (the larger of the two rows')."""
        body = {
            "hash": _b64(digest),
            "right": None if right is MISSING else _b64(self.right.value_codec.dumps(right)),
            "ts": left_ts if right_ts is None else max(left_ts, right_ts),
        }
        await self.responses_topic.send(
            key=pk, value=json.dumps(body).encode(), partition=partition, timestamp=now / 1000
        )

    # -- 3. right update ---------------------------------------------------------------------

    async def _right_changed(self, event: Event, key: Any, old: Any, new: Any) -> None:
        subscriptions: SubscriptionTransaction = self.state(event.task)
        for subscriber in subscriptions.subscribers(key):
            await self._respond(
                self.left.key_codec.dumps(subscriber.left_key),
                subscriber.value_hash,
                subscriber.partition,
                new,
                event.timestamp,
                None,
                event.timestamp,
            )

    # -- 4. response, in the left row's task --------------------------------------------------

    async def _answered(self, event: Event) -> None:
        if event.raw_key is None or event.value is None:
            return
        key = self.left.key_codec.loads(event.raw_key)
        body = json.loads(event.value)
        left = self.left.get(key, MISSING)
        if left is MISSING or _b64(self._hash(left)) != body["hash"]:
            return  # the row went or changed since: a newer answer is on its way
        raw_right = _unb64(body["right"])
        left_ts = row_time(self.left, event.task, key)
        ts = body["ts"] if left_ts is None else max(body["ts"], left_ts)
        if raw_right is None:
            value = self.join.result(left, None) if self.left_join else None
        else:
            value = self.join.result(left, self.right.value_codec.loads(raw_right))
        await self.emit(event.task, key, value, ts, event)
