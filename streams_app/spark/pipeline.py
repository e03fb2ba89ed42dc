"""The orders topology's data pipeline: reservations in, hourly reserved quantities out.

The orders topology writes one :class:`~topologies.orders.models.Reserved` record to ``inventory``
per order whose stock it reserved (key: the item). The pipeline runs two streaming queries on the
committed records of that topic, each with its own checkpoint:

``files``
    every committed reservation, once, as Parquet under ``<home>/reservations`` (the lake table:
    the order's fields, its ``hour`` and its Kafka coordinates);
``postgres``
    the reserved quantity and the number of orders per item and hour (``hour`` = the Kafka record
    timestamp truncated to the hour, UTC), in the table ``reserved_per_item_hour``. Each
    micro-batch is aggregated on its own and *added* to the stored totals, in the same database
    transaction that records the batch id, so a replayed batch is skipped instead of counted twice.

The two queries do not depend on each other: either can be stopped, crash and resume on its
own checkpoint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from streams_app.spark.progress import BatchReporter
from streams_app.spark.reader import read_stream
from streams_app.spark.sinks import (
    PostgresSink,
    PostgresTable,
    Trigger,
    join_path,
    latest_file_sink_batch,
    read_files,
    write_files,
    write_postgres,
)
from topologies.orders.models import Reserved

log = logging.getLogger(__name__)

INVENTORY_TOPIC = "inventory"
HOURLY_TABLE = PostgresTable(
    "reserved_per_item_hour",
    key_columns=("item", "hour"),
    value_columns=("reserved_qty", "orders"),
    accumulate=True,
)
HOURLY_DDL = """
CREATE TABLE IF NOT EXISTS reserved_per_item_hour (
    item text NOT NULL,
    hour timestamptz NOT NULL,
    reserved_qty bigint NOT NULL,
    orders bigint NOT NULL,
    PRIMARY KEY (item, hour)
)"""
#: The columns of the Parquet reservations table.
RESERVATION_COLUMNS = (
    "order_id",
    "item",
    "qty",
    "stock_after",
    "hour",
    "timestamp",
    "topic",
    "partition",
    "offset",
)


def reservations(frame: DataFrame) -> DataFrame:
    """Decoded ``inventory`` records -> one row per reservation, with its hour."""
    return frame.withColumn("hour", F.date_trunc("hour", F.col("timestamp"))).select(
        *RESERVATION_COLUMNS
    )


def hourly_totals(reservations_batch: DataFrame) -> DataFrame:
    """Reserved quantity and order count per item and hour, of one batch of reservations."""
    return reservations_batch.groupBy("item", "hour").agg(
        F.sum("qty").alias("reserved_qty"), F.count(F.lit(1)).alias("orders")
    )


@dataclass
class OrdersPipeline:
    """The pipeline's configuration and, once started, its queries.

    ``home`` holds the checkpoints and the Parquet table; on a cluster it must be storage every
    executor and the driver share (HDFS, S3, a shared volume). ``postgres_dsn=None`` runs the
    files query only.
    """

    spark: SparkSession
    bootstrap_servers: str
    home: str
    postgres_dsn: str | None = None
    topic: str = INVENTORY_TOPIC
    trigger: Trigger = field(default_factory=Trigger)
    max_offsets_per_trigger: int | None = None
    #: Extra connector options: Kafka security (``spark.security.kafka_security_options``).
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    queries: list[StreamingQuery] = field(default_factory=list, init=False)
    #: Logs one line per micro-batch and query (see :mod:`streams_app.spark.progress`).
    reporter: BatchReporter = field(default_factory=BatchReporter, init=False)

    @property
    def files_path(self) -> str:
        return join_path(self.home, "reservations")

    def checkpoint(self, query: str) -> str:
        return join_path(self.home, "checkpoints", query)

    def source(self) -> DataFrame:
        frame = read_stream(
            self.spark,
            self.bootstrap_servers,
            self.topic,
            Reserved,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            options=self.kafka_options,
        )
        return reservations(frame)

    def files_frame(self) -> DataFrame:
        """What the files query writes: every committed reservation."""
        return self.source()

    def postgres_frame(self) -> DataFrame:
        """What the postgres query hands its sink (which aggregates each batch)."""
        return self.source()

    def postgres_sink(self) -> PostgresSink:
        if not self.postgres_dsn:
            raise ValueError("the pipeline has no PostgreSQL DSN")
        return PostgresSink(self.postgres_dsn, HOURLY_TABLE, transform=hourly_totals)

    def create_tables(self) -> None:
        sink = self.postgres_sink()
        with sink.connect() as conn:
            conn.execute(HOURLY_DDL)
        sink.setup()

    def start(self, only: Sequence[str] = ("files", "postgres")) -> list[StreamingQuery]:
        """Start the queries (``files``, ``postgres``) and return them."""
        if "files" in only:
            committed_before = latest_file_sink_batch(self.spark, self.files_path)
            query = write_files(
                self.files_frame(),
                self.files_path,
                self.checkpoint("files"),
                trigger=self.trigger,
                query_name=f"{self.topic}-files",
            )
            self.queries.append(query)
            self.reporter.watch(query, committed_before=committed_before)
        if "postgres" in only and self.postgres_dsn:
            self.create_tables()
            sink = self.postgres_sink()
            query = write_postgres(
                self.postgres_frame(),
                sink,
                self.checkpoint("postgres"),
                trigger=self.trigger,
                query_name=f"{self.topic}-postgres",
            )
            self.queries.append(query)
            self.reporter.watch(query, notes=sink.notes)
        return self.queries

    def await_termination(self, stop: threading.Event | None = None) -> None:
        """Wait until every query ended (``available_now``) or one ended, or ``stop`` is set.

        A failed query raises its error here. Waiting is done in one-second steps so that a
        signal handler only has to set ``stop``: PySpark's own SIGINT handler calls into the JVM
        from inside the handler, which breaks the Py4J call the main thread is waiting in.
        """
        stop = stop or threading.Event()
        while not stop.is_set():
            self.reporter.poll()
            if self.trigger.available_now:
                if all(query.awaitTermination(1) for query in self.queries):
                    self.reporter.poll()
                    return
            elif self.spark.streams.awaitAnyTermination(1):
                break
        self.reporter.poll()
        for query in self.queries:
            error = query.exception()
            if error is not None:
                raise error

    def stop(self) -> None:
        """Stop the queries (a batch in flight is abandoned; it is redone on the next start)."""
        for query in self.queries:
            if query.isActive:
                query.stop()

    def run(self, stop: threading.Event | None = None) -> None:
        """Start, wait (see :meth:`await_termination`), then stop every query."""
        self.start()
        try:
            self.await_termination(stop)
        finally:
            self.stop()

    def file_rows(self) -> DataFrame:
        return read_files(self.spark, self.files_path)
