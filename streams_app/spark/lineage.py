"""Lineage headers: which input record an output record was produced from.

The runtime stamps every output record with the partition and offset of the input record that
produced it; the audit job (:mod:`streams_app.spark.audit`) joins output to input on them. Values
are the numbers in ASCII decimal (``b"3"``, ``b"1042"``), readable by any Kafka tool.

This module does not import pyspark: the runtime uses it to write the headers.
"""

from __future__ import annotations

#: Header naming the input partition an output record came from.
SRC_PARTITION_HEADER = "src_partition"
#: Header naming the input offset an output record came from.
SRC_OFFSET_HEADER = "src_offset"


def lineage_headers(partition: int, offset: int) -> list[tuple[str, bytes]]:
    """The headers to put on a record produced from input ``(partition, offset)``."""
    return [
        (SRC_PARTITION_HEADER, str(partition).encode("ascii")),
        (SRC_OFFSET_HEADER, str(offset).encode("ascii")),
    ]


def parse_lineage(
    headers: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...],
) -> tuple[int, int] | None:
    """``(partition, offset)`` from a record's headers, or None if they are absent or malformed."""
    found = {key: value for key, value in headers}
    try:
        return int(found[SRC_PARTITION_HEADER]), int(found[SRC_OFFSET_HEADER])
    except (KeyError, ValueError):
        return None
