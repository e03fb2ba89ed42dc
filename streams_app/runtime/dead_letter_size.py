"""Dead letters that fit: a copy the broker would refuse is truncated, never a reason to stop.

A dead letter is the failed record plus ``dlq.*`` headers, so it is larger than the record the
broker accepted: a value just under ``message.max.bytes`` gives a copy over
``max_request_size``, which the producer refuses. Stopping the worker then (what it did before
issue 35, item 4) blocks every partition on one bad record, at every restart.

So the copy is cut to fit, in steps, each used only when the one before does not fit:

0. **fit**: the whole record if it fits ``max_request_size``; else the value is cut to the
   first bytes that fit (then the original headers are dropped, then the key cut, should they
   be what is too large);
1. **small**: at most :data:`SMALL_BYTES` of the value and of the key, no original headers:
   for a topic whose ``max.message.bytes`` is below ``max_request_size`` and could not be read
   at start (the broker refuses the copy at commit, the transaction is aborted, and the record,
   when it comes round again, is dead-lettered this way);
2. **bare**: no key, no value, no original headers: the ``dlq.*`` headers alone.

A truncated copy says so in ``dlq.truncated`` (what was cut: ``value``, ``headers``, ``key``)
and ``dlq.original.size`` (the value's size in bytes); the source topic, partition and offset
and the error are in the usual headers, so the whole record can still be read from its topic
while retention keeps it. Only a bare copy that is refused too stops the worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

H_TRUNCATED = "dlq.truncated"
H_ORIGINAL_SIZE = "dlq.original.size"

FIT, SMALL, BARE = 0, 1, 2
#: Bytes of value (and of key) a "small" copy keeps.
SMALL_BYTES = 1024
#: A record batch's header (61 bytes in Kafka's v2 format) and the worst case of a record's own
#: varints (length, attributes, timestamp and offset deltas, key and value lengths, header
#: count), with room to spare: what a record adds to its key, value and headers.
OVERHEAD = 61 + 40
#: Per header: the two length varints, at their worst.
HEADER_OVERHEAD = 10

Headers = Sequence[tuple[str, bytes]]


def record_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """An upper bound of the bytes a record takes in a batch of its own."""
    size = OVERHEAD + len(key or b"") + len(value or b"")
    return size + sum(HEADER_OVERHEAD + len(k.encode()) + len(v) for k, v in headers)


@dataclass(frozen=True)
class Copy:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    #: What was cut ("" when nothing was).
    truncated: str
    original_size: int


def fit(
    key: bytes | None,
    value: bytes | None,
    original: Headers,
    ours: Headers,
    limit: int,
    step: int = FIT,
) -> Copy:
    """The dead letter to send at ``step``: ``original`` are the record's own headers, ``ours``
    the ``dlq.*`` ones; ``limit`` is ``max_request_size``."""
    size = len(value or b"")
    cut: list[str] = []
    kept: list[tuple[str, bytes]] = list(original)
    if step >= BARE:
        cut += [name for name, part in (("value", value), ("headers", kept), ("key", key)) if part]
        key, value, kept = None, None, []
    elif step >= SMALL:
        if value is not None and len(value) > SMALL_BYTES:
            value = value[:SMALL_BYTES]
            cut.append("value")
        if kept:
            kept = []
            cut.append("headers")
        if key is not None and len(key) > SMALL_BYTES:
            key = key[:SMALL_BYTES]
            cut.append("key")
    # Room for our truncation headers too (short words and a number).
    marks = [(H_TRUNCATED, b"value,headers,key"), (H_ORIGINAL_SIZE, str(size).encode())]

    def room(k: bytes | None, hs: Headers) -> int:
        """Bytes of value that still fit next to key ``k`` and headers ``hs``."""
        return limit - record_size(k, None, [*hs, *ours, *marks])

    if value is not None and len(value) > room(key, kept):
        if room(key, kept) < 0 and kept:  # the record's own headers alone are too large
            kept = []
            cut.append("headers")
        if len(value) > room(key, kept):
            value = value[: max(0, room(key, kept))]
            cut.append("value")
    if key is not None and room(key, kept) < len(value or b""):
        if kept:
            kept = []
            cut.append("headers")
        if room(key, kept) < len(value or b""):
            excess = record_size(key, value, [*ours, *marks]) - limit
            key = key[: max(0, len(key) - excess)]
            cut.append("key")
    headers = [*kept, *ours]
    truncated = ",".join(dict.fromkeys(cut))
    if truncated:
        headers += [(H_TRUNCATED, truncated.encode()), (H_ORIGINAL_SIZE, str(size).encode())]
    return Copy(key, value, headers, truncated, size)
