"""One log line per micro-batch and sink, so a running pipeline is never silent.

Spark keeps each streaming query's recent progress reports (``query.recentProgress``: batch id,
input rows, durations). The pipeline's waiting loop polls them once a second and logs every
batch it has not logged yet, at INFO on ``streams_app.spark.progress`` (the pipeline command
shows that logger by default)::

    inventory-files: batch 3: 120 records in 1.4s
    inventory-postgres: batch 3: 120 records in 0.9s; 14 rows merged into reserved_per_item_hour
    inventory-postgres: batch 4: 8 records: already committed, skipped (0.2s)

"Already committed, skipped" is a replay after a crash that the sink recognised: for PostgreSQL
the batch id was already in its bookkeeping table (the sink notes it), for files the batch was
already listed in the sink's ``_spark_metadata`` log when the query started (Spark's file sink
skips those). Polling the progress instead of registering a ``StreamingQueryListener`` keeps
everything on the driver's main thread: no callback server thread to outlive a dead driver.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


@dataclass
class SinkNote:
    """What a sink says about one batch it handled (filled in by the sink, read here)."""

    rows: int | None = None
    target: str = ""
    skipped: bool = False


@dataclass
class _Watched:
    query: StreamingQuery
    label: str
    notes: Mapping[int, SinkNote]
    #: Batches at or below this id were committed by the sink before this run (replays).
    committed_before: int
    logged: set[int] = field(default_factory=set)


class BatchReporter:
    """Logs each finished micro-batch of the queries it watches, once."""

    def __init__(self) -> None:
        self._watched: list[_Watched] = []
        self.lines = 0

    def watch(
        self,
        query: StreamingQuery,
        *,
        label: str | None = None,
        notes: Mapping[int, SinkNote] | None = None,
        committed_before: int = -1,
    ) -> None:
        self._watched.append(
            _Watched(
                query,
                label or query.name or str(query.id),
                notes if notes is not None else {},
                committed_before,
            )
        )

    def poll(self) -> None:
        for watched in self._watched:
            for progress in watched.query.recentProgress:
                self._report(watched, progress)

    def _report(self, watched: _Watched, progress: Mapping[str, Any]) -> None:
        batch_id = int(progress["batchId"])
        durations = progress.get("durationMs") or {}
        if batch_id in watched.logged or "addBatch" not in durations:
            return  # logged already, or a trigger that found no new data (no batch ran)
        watched.logged.add(batch_id)
        self.lines += 1
        records = int(progress.get("numInputRows") or 0)
        seconds = float(durations.get("triggerExecution", 0)) / 1000
        note = watched.notes.get(batch_id)
        if (note is not None and note.skipped) or batch_id <= watched.committed_before:
            log.info(
                "%s: batch %d: %d records: already committed, skipped (%.1fs)",
                watched.label,
                batch_id,
                records,
                seconds,
            )
        elif note is not None and note.rows is not None:
            log.info(
                "%s: batch %d: %d records in %.1fs; %d rows merged into %s",
                watched.label,
                batch_id,
                records,
                seconds,
                note.rows,
                note.target,
            )
        else:
            log.info("%s: batch %d: %d records in %.1fs", watched.label, batch_id, records, seconds)
