"""Which partition of an internal topic holds a transactional id or a group.

A transactional id's coordinator logs it to partition ``abs(hash(id)) % n`` of
``__transaction_state``, and a group's to the same partition of ``__consumer_offsets``
(``hash`` is Java's ``String.hashCode``, ``abs`` Kafka's ``Utils.abs``, ``n`` the topic's
partition count). The operators' tools read those logs; a worker checks the group's partition for
offsets a transaction it gave up left pending (``transport/kafka.py``).
"""

from __future__ import annotations

#: The group coordinators' log: a transaction's offsets are written there (TxnOffsetCommit).
CONSUMER_OFFSETS = "__consumer_offsets"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """The partition of a transactional id or group id (Kafka's ``Utils.abs(hash) % n``)."""
    h = java_string_hash(key)
    positive = 0 if h == -(1 << 31) else abs(h)
    return positive % partitions
