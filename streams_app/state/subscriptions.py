"""The right side's subscription store of a foreign-key join (KIP-213).

A foreign-key join routes each left row's *subscription* (its foreign key, its own key, and a
hash of its value) to the right table's partition that holds the foreign key. The right side
keeps them here, so that an update of a right row can answer every left row pointing at it: one
prefix scan of the foreign key. Each answer carries the hash back; the left side drops an answer
whose hash no longer matches its row's current value (the row changed meanwhile: a newer
answer is on its way). This is the view of that store over a task's
:class:`~streams_app.state.base.PartitionTransaction`, committed like every table.

**Layout.** ``u32 length | foreign key | u32 length | left key`` (:class:`SubscriptionKeyCodec`,
the foreign key first, so a prefix seek finds a right row's subscribers in left-key byte
order), value ``16-byte hash | u32 left partition`` (:class:`SubscriptionValueCodec`): the
partition the answer goes back to (the response topic is partitioned like the left table).
Kafka Streams stores the same (``CombinedKey``, ``SubscriptionWrapper``).

The hash is :func:`value_hash` of the left value's bytes (BLAKE2b, 128 bits; Kafka Streams uses
Murmur3-128). Only equality matters, and both ends compute it from the same codec's bytes.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, NamedTuple

from streams_app.codecs import Codec, DecodeError
from streams_app.state.base import PartitionTransaction
from streams_app.state.composite import PendingKeys, key_prefix, read_key

_GONE: Any = object()
_VALUE = struct.Struct(">16sI")


def value_hash(value: bytes) -> bytes:
    """The 16-byte hash a subscription carries of its left value's bytes."""
    return hashlib.blake2b(value, digest_size=16).digest()


class Subscription(NamedTuple):
    """One left row subscribed to a foreign key."""

    left_key: Any
    value_hash: bytes
    #: The left table's partition holding the row (where the answer goes).
    partition: int


class SubscriptionKeyCodec:
    """``(foreign key, left key)`` <-> ``u32 length | fk | u32 length | left key``."""

    name = "subscription"

    def __init__(self, foreign_key_codec: Codec, left_key_codec: Codec) -> None:
        self.foreign_key_codec = foreign_key_codec
        self.left_key_codec = left_key_codec

    def dumps(self, obj: Any) -> bytes:
        foreign_key, left_key = obj
        return key_prefix(self.foreign_key_codec, foreign_key) + key_prefix(
            self.left_key_codec, left_key
        )

    def loads(self, data: bytes) -> tuple[Any, Any]:
        foreign_key, at = read_key(self.foreign_key_codec, data, 0)
        left_key, end = read_key(self.left_key_codec, data, at)
        if end != len(data):
            raise DecodeError("not a subscription key: length does not match")
        return foreign_key, left_key

    def prefix(self, foreign_key: Any) -> bytes:
        return key_prefix(self.foreign_key_codec, foreign_key)


class SubscriptionValueCodec:
    """``(hash, partition)`` <-> ``16-byte hash | u32 partition``."""

    def dumps(self, obj: Any) -> bytes:
        digest, partition = obj
        return _VALUE.pack(digest, partition)

    def loads(self, data: bytes) -> tuple[bytes, int]:
        if len(data) != _VALUE.size:
            raise DecodeError("not a subscription value")
        digest, partition = _VALUE.unpack(data)
        return digest, partition


class SubscriptionTransaction:
    """A task's subscriptions in one partition of the right table: committed plus pending."""

    __slots__ = ("_pending", "codec", "tx")

    def __init__(self, tx: PartitionTransaction, codec: SubscriptionKeyCodec) -> None:
        self.tx = tx
        self.codec = codec
        self._pending = PendingKeys(tx)

    def subscribe(self, foreign_key: Any, left_key: Any, digest: bytes, partition: int) -> None:
        """The left row ``left_key`` (now with a value hashing to ``digest``) points at
        ``foreign_key``; a subscription of the same row replaces its older one."""
        entry = (foreign_key, left_key)
        self.tx.set(entry, (digest, partition))
        self._pending.touch(entry)

    def unsubscribe(self, foreign_key: Any, left_key: Any) -> None:
        """The row no longer points at ``foreign_key`` (its foreign key changed, or it went)."""
        entry = (foreign_key, left_key)
        if self.tx.get(entry, _GONE) is not _GONE:
            self.tx.delete(entry)
            self._pending.touch(entry)

    def get(self, foreign_key: Any, left_key: Any) -> Subscription | None:
        found = self.tx.get((foreign_key, left_key), _GONE)
        return None if found is _GONE else Subscription(left_key, found[0], found[1])

    def subscribers(self, foreign_key: Any) -> list[Subscription]:
        """Every left row pointing at ``foreign_key``, in left-key byte order."""
        prefix = self.codec.prefix(foreign_key)
        found: dict[bytes, Subscription] = {}
        loads = self.tx.value_codec.loads
        for raw_key, raw_value in self.tx.partition.iter_prefix(prefix):
            _, left_key = self.codec.loads(raw_key)
            digest, partition = loads(raw_value)
            found[raw_key] = Subscription(left_key, digest, partition)
        for entry in self._pending.of(foreign_key):
            raw_key = self.codec.dumps(entry)
            value = self.tx.get(entry, _GONE)
            if value is _GONE:
                found.pop(raw_key, None)
            else:
                found[raw_key] = Subscription(entry[1], value[0], value[1])
        return [found[k] for k in sorted(found)]
