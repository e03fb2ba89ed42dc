"""Exactly-once sinks for the pipeline's streaming queries.

Structured Streaming replays a micro-batch after a crash: batch ``N``'s offsets are written to the
checkpoint's offset log before it runs and to its commit log after the sink finished, so a batch
whose commit entry is missing runs again, with the same ``N`` and the same offsets, when the query
restarts. A sink is exactly-once when it can tell that it already holds batch ``N``:

- **files** (:func:`write_files`): Spark's file sink writes each batch's files first and then
  lists them in ``<path>/_spark_metadata/N`` in one atomic step. Files of a batch that died
  half-way are never listed, a replayed batch that was already listed is skipped, and every reader
  that goes through Spark (``spark.read.parquet(path)``) sees only the listed files.
- **PostgreSQL** (:class:`PostgresSink` in ``foreachBatch``): ``foreachBatch`` alone is
  at-least-once. The sink writes the batch's rows and the row ``(query id, batch id)`` into a
  bookkeeping table in *one* database transaction; a batch whose row is already there is skipped.
  The query id is the one kept in the checkpoint, so it survives restarts and changes only when
  the checkpoint is new (and batch ids start again from 0).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.types import TimestampNTZType, TimestampType

from streams_app.errors import ConfigError, StreamsAppError
from streams_app.spark.progress import SinkNote

log = logging.getLogger(__name__)

#: The bookkeeping table: one row per micro-batch a PostgresSink has written.
BATCHES_TABLE = "streams_app_spark_batches"
#: The Spark local property holding the running query's id while foreachBatch runs.
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


@dataclass(frozen=True)
class Trigger:
    """When micro-batches run: every ``interval``, or ``available_now`` (what is there, then
    stop)."""

    available_now: bool = False
    interval: str = "10 seconds"

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        if self.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=self.interval)


def write_files(
    frame: DataFrame,
    path: str,
    checkpoint: str,
    *,
    fmt: str = "parquet",
    partition_by: Sequence[str] = (),
    trigger: Trigger | None = None,
    query_name: str | None = None,
) -> StreamingQuery:
    """Start a query appending ``frame`` to files under ``path``, exactly once.

    Read the result back through Spark (``spark.read.parquet(path)``), which lists the committed
    files from ``path/_spark_metadata``; a plain directory listing also shows the orphans of
    batches that crashed before their commit.
    """
    writer = (
        frame.writeStream.format(fmt)
        .outputMode("append")
        .option("path", path)
        .option("checkpointLocation", checkpoint)
    )
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    if query_name:
        writer = writer.queryName(query_name)
    return (trigger or Trigger()).apply(writer).start()


def latest_file_sink_batch(spark: SparkSession, path: str) -> int:
    """The highest batch id a file sink at ``path`` has committed (listed in its
    ``_spark_metadata`` log), -1 for none. Spark's file sink skips any batch at or below it."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    log_dir = jvm.org.apache.hadoop.fs.Path(join_path(path, "_spark_metadata"))
    fs = log_dir.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(log_dir):
        return -1
    latest = -1
    for status in fs.listStatus(log_dir):
        name = status.getPath().getName().split(".")[0]
        if name.isdigit():
            latest = max(latest, int(name))
    return latest


def join_path(base: str, *parts: str) -> str:
    """Join path parts; ``base`` may be a local path or a URI (hdfs://, s3a://, file:/)."""
    return "/".join([base.rstrip("/"), *parts])


def read_files(spark: SparkSession, path: str, fmt: str = "parquet") -> DataFrame:
    """What a file sink committed under ``path`` (through its ``_spark_metadata`` log)."""
    return spark.read.format(fmt).load(path)


@dataclass(frozen=True)
class PostgresTable:
    """Where a batch's rows go and how they merge with the rows already there.

    ``key_columns`` must carry a primary key or unique constraint in PostgreSQL. With
    ``accumulate`` the value columns are added to the stored ones (running totals from per-batch
    partial aggregates), otherwise they replace them. Without key columns rows are appended.
    Within one batch, rows with the same key are summed (``accumulate``) or one of them is kept.
    """

    name: str
    key_columns: tuple[str, ...]
    value_columns: tuple[str, ...]
    accumulate: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        return self.key_columns + self.value_columns

    @property
    def identifier(self) -> sql.Identifier:
        return sql.Identifier(*self.name.split("."))


class PostgresSink:
    """A ``foreachBatch`` function landing each micro-batch in PostgreSQL exactly once.

    Use it as ``frame.writeStream.foreachBatch(sink)`` (or through :func:`write_postgres`). Each
    call runs one transaction on the driver:

    1. insert ``(query id, batch id)`` into the bookkeeping table; if it is already there (a
       replay after a crash, or a concurrent zombie run that got there first: the primary key
       makes the second one wait and then see it) the batch is skipped;
    2. stream the batch's rows to the driver, ``COPY`` them into a temporary table and merge that
       into the target with one ``INSERT ... ON CONFLICT``;
    3. commit. A crash anywhere before the commit leaves nothing behind, so the replay writes
       the batch; a crash after it leaves the bookkeeping row, so the replay skips it.

    Rows travel through the driver with ``toLocalIterator``: memory holds one partition at a
    time, and one connection does the writing. That suits aggregates and moderate batches (COPY
    moves 10^5 rows/s); for bigger batches, let executors COPY into a staging table keyed by
    ``(query id, batch id)`` and keep step 1 and the final merge in the driver's transaction.

    ``transform`` is applied to each batch first (for example a per-batch aggregation).
    """

    def __init__(
        self,
        dsn: str,
        table: PostgresTable,
        *,
        transform: Callable[[DataFrame], DataFrame] | None = None,
        batches_table: str = BATCHES_TABLE,
    ) -> None:
        if table.accumulate and not table.key_columns:
            raise ConfigError(
                "PostgresTable.accumulate", "needs key columns to add to", "name key_columns"
            )
        self.dsn = dsn
        self.table = table
        self.transform = transform
        self.batches_table = batches_table
        self._ready = False
        #: What happened to each batch id this sink saw in this process (for the batch log).
        self.notes: dict[int, SinkNote] = {}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        query_id = batch.sparkSession.sparkContext.getLocalProperty(_QUERY_ID_PROPERTY)
        if not query_id:
            raise StreamsAppError(
                "PostgresSink runs only inside a streaming query's foreachBatch "
                f"(no {_QUERY_ID_PROPERTY} local property is set)"
            )
        self.write_batch(batch, query_id, batch_id)

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        # Rows carry their own UTC offsets; the session zone only matters for what we print.
        return psycopg.connect(self.dsn, options="-c timezone=UTC")

    def setup(self) -> None:
        """Create the bookkeeping table if it is missing (the target table is the caller's)."""
        with self.connect() as conn:
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} ("
                    " query_id text NOT NULL,"
                    " batch_id bigint NOT NULL,"
                    " target text NOT NULL,"
                    " row_count bigint,"
                    " committed_at timestamptz NOT NULL DEFAULT now(),"
                    " PRIMARY KEY (query_id, batch_id))"
                ).format(sql.Identifier(*self.batches_table.split(".")))
            )
        self._ready = True

    def write_batch(self, batch: DataFrame, query_id: str, batch_id: int) -> int | None:
        """Write one batch in one transaction: its row count, None if it was written before."""
        if not self._ready:
            self.setup()
        frame = self.transform(batch) if self.transform else batch
        with self.connect() as conn, conn.transaction():
            claimed = conn.execute(
                sql.SQL(
                    "INSERT INTO {} (query_id, batch_id, target) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING batch_id"
                ).format(sql.Identifier(*self.batches_table.split("."))),
                (query_id, batch_id, self.table.name),
            ).fetchone()
            if claimed is None:
                log.debug(
                    "batch %d of query %s is already in PostgreSQL; skipped", batch_id, query_id
                )
                self.notes[batch_id] = SinkNote(skipped=True)
                return None
            count = self.write_rows(conn, frame)
            conn.execute(
                sql.SQL(
                    "UPDATE {} SET row_count = %s WHERE query_id = %s AND batch_id = %s"
                ).format(sql.Identifier(*self.batches_table.split("."))),
                (count, query_id, batch_id),
            )
        log.debug(
            "batch %d of query %s: %d rows into %s", batch_id, query_id, count, self.table.name
        )
        self.notes[batch_id] = SinkNote(rows=count, target=self.table.name)
        return count

    def write_rows(self, conn: psycopg.Connection[tuple[Any, ...]], frame: DataFrame) -> int:
        """COPY ``frame`` into a temporary table and merge it into the target; the row count."""
        table = self.table
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in table.columns)
        conn.execute(
            sql.SQL(
                "CREATE TEMPORARY TABLE streams_app_batch (LIKE {} INCLUDING DEFAULTS) "
                "ON COMMIT DROP"
            ).format(table.identifier)
        )
        count = 0
        with conn.cursor().copy(
            sql.SQL("COPY streams_app_batch ({}) FROM STDIN").format(columns)
        ) as copy:
            for row in _rows(frame, table.columns):
                copy.write_row(row)
                count += 1
        conn.execute(_merge_statement(table))
        return count


def _rows(frame: DataFrame, columns: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    """The frame's rows as tuples, one partition at a time.

    Timestamps are sent as ISO 8601 strings with their UTC offset: PySpark would otherwise turn
    them into naive datetimes in the driver's local time zone.
    """
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(
            "PostgresTable.columns",
            f"the batch has no column(s) {missing} (it has {frame.columns})",
            "select and name the batch's columns like the table's",
        )
    types = dict((f.name, f.dataType) for f in frame.schema.fields)
    selected = []
    for name in columns:
        if isinstance(types[name], TimestampType):
            selected.append(
                F.date_format(F.col(name), "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX").alias(name)
            )
        elif isinstance(types[name], TimestampNTZType):
            selected.append(F.date_format(F.col(name), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS").alias(name))
        else:
            selected.append(F.col(name))
    for row in frame.select(*selected).toLocalIterator(prefetchPartitions=True):
        yield tuple(row)


def _merge_statement(table: PostgresTable) -> sql.Composed:
    ident = table.identifier
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in table.columns)
    if not table.key_columns:
        return sql.SQL("INSERT INTO {} ({}) SELECT {} FROM streams_app_batch").format(
            ident, columns, columns
        )
    keys = sql.SQL(", ").join(sql.Identifier(c) for c in table.key_columns)
    if table.accumulate:
        source = sql.SQL("SELECT {}, {} FROM streams_app_batch GROUP BY {}").format(
            keys,
            sql.SQL(", ").join(
                sql.SQL("sum({})").format(sql.Identifier(c)) for c in table.value_columns
            ),
            keys,
        )
        updates = [
            sql.SQL("{} = {}.{} + EXCLUDED.{}").format(
                sql.Identifier(c), ident, sql.Identifier(c), sql.Identifier(c)
            )
            for c in table.value_columns
        ]
    else:
        source = sql.SQL("SELECT DISTINCT ON ({}) {} FROM streams_app_batch").format(keys, columns)
        updates = [
            sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
            for c in table.value_columns
        ]
    action = (
        sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(updates))
        if updates
        else sql.SQL("DO NOTHING")
    )
    return sql.SQL("INSERT INTO {} ({}) {} ON CONFLICT ({}) {}").format(
        ident, columns, source, keys, action
    )


def write_postgres(
    frame: DataFrame,
    sink: PostgresSink,
    checkpoint: str,
    *,
    trigger: Trigger | None = None,
    query_name: str | None = None,
) -> StreamingQuery:
    """Start a query writing ``frame``'s micro-batches through ``sink``."""
    sink.setup()
    writer = frame.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    if query_name:
        writer = writer.queryName(query_name)
    return (trigger or Trigger()).apply(writer).start()
