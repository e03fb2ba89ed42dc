"""Walk a partition's stored batches over the network, Fetch after Fetch (read_uncommitted)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from streams_app.kafka.ops_admin import FetchedLog, OpsAdmin
from streams_app.ops.records import RecordBatch, parse_batches

#: Bytes per Fetch; doubled when a single batch is larger (up to the cap).
FETCH_BYTES = 1 << 20
_MAX_FETCH_BYTES = 64 << 20


@dataclass
class LogPosition:
    """The partition's offsets as of the latest Fetch."""

    log_start_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1


async def read_batches(
    admin: OpsAdmin,
    topic: str,
    partition: int,
    *,
    start: int | None = None,
    position: LogPosition | None = None,
    deep: bool = True,
) -> AsyncIterator[RecordBatch]:
    """Batches from ``start`` (default: the log start offset) up to the high watermark.

    A batch that begins before ``start`` (Fetch returns whole batches) is skipped unless it also
    ends at or after ``start``. ``position`` is updated after every Fetch.
    """
    position = position if position is not None else LogPosition()
    tp = (topic, partition)
    offset = start
    if offset is None:
        offset = (await admin.beginning_offsets([tp]))[tp]
    max_bytes = FETCH_BYTES
    while True:
        fetched: FetchedLog = await admin.fetch(tp, offset, max_bytes=max_bytes)
        position.log_start_offset = fetched.log_start_offset
        position.high_watermark = fetched.high_watermark
        position.last_stable_offset = fetched.last_stable_offset
        if offset >= fetched.high_watermark:
            return
        progressed = False
        for batch in parse_batches(fetched.records, deep=deep):
            if batch.last_offset < offset:
                continue
            yield batch
            offset = batch.last_offset + 1
            progressed = True
        if not progressed:
            if fetched.records and max_bytes < _MAX_FETCH_BYTES:
                max_bytes *= 2  # one batch larger than the fetch size
                continue
            # Nothing readable below the high watermark (e.g. compacted away): stop here.
            return
        max_bytes = FETCH_BYTES
