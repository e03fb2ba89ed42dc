"""Moved to :mod:`streams_app.lineage`, the one definition of the lineage format the runtime
writes and the audit, the verifiers and the harness read. This module keeps its former names
importable: the header names, and the two-header builder and parser of input ``(partition,
offset)`` that tests and producers of one's own used (the audit still reads what they write).

This module does not import pyspark.
"""

from __future__ import annotations

from collections.abc import Iterable

from streams_app.lineage import (
    SRC_HEADER,
    SRC_OFFSET_HEADER,
    SRC_PARTITION_HEADER,
    SRC_TOPIC_HEADER,
)
from streams_app.lineage import parse_lineage as _parse

__all__ = [
    "SRC_HEADER",
    "SRC_OFFSET_HEADER",
    "SRC_PARTITION_HEADER",
    "SRC_TOPIC_HEADER",
    "lineage_headers",
    "parse_lineage",
]


def lineage_headers(partition: int, offset: int) -> list[tuple[str, bytes]]:
    """The split format's ``src_partition`` and ``src_offset`` headers for input ``(partition,
    offset)`` (no topic: the audit reads one input topic). New code:
    :func:`streams_app.lineage.lineage_headers`."""
    return [
        (SRC_PARTITION_HEADER, b"%d" % partition),
        (SRC_OFFSET_HEADER, b"%d" % offset),
    ]


def parse_lineage(headers: Iterable[tuple[str, bytes]]) -> tuple[int, int] | None:
    """``(partition, offset)`` from a record's headers in either format, or None if they are
    absent or malformed."""
    source = _parse(headers)
    return None if source is None else (source[1], source[2])
