"""The lineage header: which input record an output record was produced from.

Every record a worker sends while processing names its source record, so that the Spark audit
(:mod:`streams_app.spark.audit`), the chaos verifiers and the test harness's
``assert_no_duplicates`` can tie each output to one input and count it.

**The format.** One header, ``src``, whose value is ``<topic>:<partition>:<offset>`` in ASCII
(``b"orders:3:1042"``), readable by any Kafka tool. A topic name cannot contain ``:`` (Kafka
allows letters, digits, ``.``, ``_`` and ``-``), so the value splits unambiguously from the
right.

**Why one header.** Until 2026-11-30 the worker wrote three (``src_topic``, ``src_partition``,
``src_offset``): about 55 bytes on an output record of about 30, which every batch, produce
request, socket write and broker append then carries. One header is about 20 bytes, and one
tuple a record for the producer's batch builder instead of three (BENCHMARKS.md, "One lineage
header instead of three"). The worker writes the three headers still with
``lineage_format="split"``, for downstream consumers that read them; every reader here accepts
both formats, so outputs written by older workers stay auditable.

The module imports nothing of the runtime or of pyspark: the writer (the record collector) and
every reader share it.
"""

from __future__ import annotations

from collections.abc import Iterable

#: The compact format's header: ``<topic>:<partition>:<offset>``.
SRC_HEADER = "src"
#: The split format's three headers (``lineage_format="split"``; what workers wrote before).
SRC_TOPIC_HEADER = "src_topic"
SRC_PARTITION_HEADER = "src_partition"
SRC_OFFSET_HEADER = "src_offset"


def source_prefix(topic: str, partition: int) -> bytes:
    """The compact value's part that is the same for every record of one input partition (the
    collector makes it once per partition and appends each record's offset)."""
    return b"%s:%d:" % (topic.encode(), partition)


def source_format(topic: str, partition: int) -> bytes:
    """:func:`source_prefix` as a format of the offset (``source_format(t, p) % offset`` is
    the compact value): one bytes object a record made, where ``prefix + b"%d" % offset``
    makes two (the writer's hot path, some 30 ns a record)."""
    return source_prefix(topic, partition).replace(b"%", b"%%") + b"%d"


def compact_value(topic: str, partition: int, offset: int) -> bytes:
    """The ``src`` header's value for input record ``topic[partition]@offset``."""
    return b"%s%d" % (source_prefix(topic, partition), offset)


def lineage_headers(
    topic: str, partition: int, offset: int, *, split: bool = False
) -> list[tuple[str, bytes]]:
    """The headers naming input record ``topic[partition]@offset``: the ``src`` header, or with
    ``split`` the three headers of the older format (for tests of readers and for producers of
    one's own that write lineage)."""
    if split:
        return [
            (SRC_TOPIC_HEADER, topic.encode()),
            (SRC_PARTITION_HEADER, b"%d" % partition),
            (SRC_OFFSET_HEADER, b"%d" % offset),
        ]
    return [(SRC_HEADER, compact_value(topic, partition, offset))]


def parse_compact(value: bytes) -> tuple[str, int, int] | None:
    """``(topic, partition, offset)`` of a ``src`` header's value; None if it is malformed."""
    parts = value.rsplit(b":", 2)
    if len(parts) != 3:
        return None
    try:
        return parts[0].decode("ascii"), int(parts[1]), int(parts[2])
    except (UnicodeDecodeError, ValueError):
        return None


def parse_lineage(headers: Iterable[tuple[str, bytes]]) -> tuple[str | None, int, int] | None:
    """``(topic, partition, offset)`` a record's headers name as its source, in either format;
    None if they name none (or name it unreadably). The topic is None for split-format headers
    without ``src_topic`` (written by hand, or by a producer of one's own)."""
    topic = partition = offset = None
    for key, value in headers:
        if key == SRC_HEADER and value is not None:
            return parse_compact(value)
        if key == SRC_TOPIC_HEADER:
            topic = value
        elif key == SRC_PARTITION_HEADER:
            partition = value
        elif key == SRC_OFFSET_HEADER:
            offset = value
    if partition is None or offset is None:
        return None
    try:
        return (
            None if topic is None else topic.decode("ascii"),
            int(partition),
            int(offset),
        )
    except (UnicodeDecodeError, ValueError, TypeError):  # TypeError: a null header value
        return None
