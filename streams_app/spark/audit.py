"""The audit job: did every input record reach the output exactly once?

A batch PySpark job over two topics and the lineage header that ties them
(:mod:`streams_app.lineage`: each output record names the input record it was produced from,
``src: <topic>:<partition>:<offset>``; outputs of workers that wrote the three split headers
are read alike). It reads the input topic and the output topic twice each, ``read_committed``
and ``read_uncommitted``, and reports per input partition:

``input_records``
    committed input records (what the topology should have processed);
``outputs``
    committed output records produced from that partition;
``duplicates``
    committed output records beyond the first for the same input record (at-least-once
    retries and replays show up here; exactly-once must have none);
``missing`` = ``gaps`` + ``unprocessed``
    committed input records with no committed output. ``gaps`` lie below the highest input
    offset the output has reached (lost records); ``unprocessed`` lie above it (the topology may
    simply not be there yet: audit after it drained its input);
``aborted_outputs``
    output records visible ``read_uncommitted`` but not ``read_committed``: written in
    transactions that aborted (or were still open when the audit read the topic). These are
    normal under exactly-once, provided none of their work is lost (``missing``) or doubled;
``aborted_reads``
    committed outputs produced from an input record that is not committed (it belongs to an
    aborted or open input transaction): a consumer read what it must not have;
``unknown_sources``
    committed outputs naming an input record that does not exist in the input at all.

What the topics cannot show: whether a committed transaction was visible only partially to
some reader at some moment (read_committed readers see a transaction all at once by
construction), or which aborted output records belonged to the same transaction (records carry
no transaction id). Output records without lineage are counted in a row whose ``partition`` is
null. The audit reads one input topic: it does not compare the topic a lineage names with it.

Every step is a DataFrame join or aggregation, so the job scales with the Spark cluster; only the
per-partition report (one row per input partition) reaches the driver.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from streams_app.lineage import SRC_HEADER, SRC_OFFSET_HEADER, SRC_PARTITION_HEADER
from streams_app.spark.reader import IsolationLevel, header, read_batch

_NO_LINEAGE = -1
REPORT_COLUMNS = (
    "partition",
    "input_records",
    "outputs",
    "duplicates",
    "missing",
    "gaps",
    "unprocessed",
    "aborted_outputs",
    "aborted_reads",
    "unknown_sources",
    "first_duplicate",
    "first_gap",
)


@dataclass(frozen=True)
class PartitionAudit:
    """One input partition's line of the report (``partition`` None: outputs without lineage)."""

    partition: int | None
    input_records: int
    outputs: int
    duplicates: int
    missing: int
    gaps: int
    unprocessed: int
    aborted_outputs: int
    aborted_reads: int
    unknown_sources: int
    first_duplicate: int | None
    first_gap: int | None

    @property
    def exactly_once(self) -> bool:
        """No duplicates, nothing missing, nothing read from aborted or unknown input."""
        return not (
            self.duplicates
            or self.missing
            or self.aborted_reads
            or self.unknown_sources
            or self.partition is None
        )

    def as_dict(self) -> dict[str, int | None]:
        return asdict(self)


def _lineage(
    frame: DataFrame, source_header: str, partition_header: str, offset_header: str
) -> DataFrame:
    # The compact header (``topic:partition:offset``, split from the right: the topic has no
    # ``:``) where a record has it, else the split format's two headers.
    parts = F.split(header(source_header), ":")
    compact = F.size(parts) >= 3
    partition = (
        F.when(compact, F.element_at(parts, -2)).otherwise(header(partition_header)).try_cast("int")
    )
    offset = F.when(compact, F.element_at(parts, -1)).otherwise(header(offset_header))
    offset = offset.try_cast("long")
    readable = partition.isNotNull() & offset.isNotNull()
    return frame.select(
        F.col("partition").alias("out_partition"),
        F.col("offset").alias("out_offset"),
        # Outputs without (readable) lineage are grouped under partition -1 (None in the report):
        # a real value, so the full outer joins below keep them in one row.
        F.when(readable, partition).otherwise(F.lit(_NO_LINEAGE)).alias("src_partition"),
        F.when(readable, offset).alias("src_offset"),
    )


def audit_frame(
    spark: SparkSession,
    bootstrap_servers: str,
    input_topic: str,
    output_topic: str,
    *,
    source_header: str = SRC_HEADER,
    partition_header: str = SRC_PARTITION_HEADER,
    offset_header: str = SRC_OFFSET_HEADER,
) -> DataFrame:
    """The report as a DataFrame, one row per input partition (see the module docstring).

    Four scans (each topic at both isolation levels), two unions grouped by record coordinates
    instead of joins, one full outer join of input records with the outputs naming them, and
    per-partition aggregates: a handful of shuffles, whatever the topics' sizes.
    """

    def scan(topic: str, isolation: IsolationLevel) -> DataFrame:
        return read_batch(spark, bootstrap_servers, topic, isolation_level=isolation)

    keys = ["src_partition", "src_offset"]
    # Every input record that exists, and whether it is committed (1) or not (0: its
    # transaction aborted or is still open).
    inputs = (
        scan(input_topic, "read_committed")
        .select(*_coordinates(keys), F.lit(1).alias("committed"))
        .unionByName(
            scan(input_topic, "read_uncommitted").select(
                *_coordinates(keys), F.lit(0).alias("committed")
            )
        )
        .groupBy(*keys)
        .agg(F.max("committed").alias("committed"))
    )
    headers = (source_header, partition_header, offset_header)
    outputs = _lineage(scan(output_topic, "read_committed"), *headers)
    copies = outputs.groupBy(*keys).agg(F.count(F.lit(1)).alias("copies"))

    # One row per input record and per source named by an output: committed is null for a
    # source that is no input record, copies is null for an input nothing was produced from.
    records = inputs.join(copies, keys, "full")
    reached = (
        records.where((F.col("committed") == 1) & F.col("copies").isNotNull())
        .groupBy("src_partition")
        .agg(F.max("src_offset").alias("reached"))
    )
    committed_input = F.col("committed") == 1
    missing = committed_input & F.col("copies").isNull()
    gap = missing & (F.col("src_offset") < F.col("reached"))

    def total(condition: Column, value: Column | None = None) -> Column:
        return F.sum(F.when(condition, value if value is not None else F.lit(1)).otherwise(0))

    stats = (
        records.join(reached, "src_partition", "left")
        .groupBy("src_partition")
        .agg(
            total(committed_input).alias("input_records"),
            F.sum(F.coalesce(F.col("copies"), F.lit(0))).alias("outputs"),
            # Outputs without lineage all share one (null) source: copies, not duplicates.
            total(
                F.col("src_offset").isNotNull() & (F.col("copies") > 1), F.col("copies") - 1
            ).alias("duplicates"),
            F.min(F.when(F.col("copies") > 1, F.col("src_offset"))).alias("first_duplicate"),
            total(missing).alias("missing"),
            total(gap).alias("gaps"),
            F.min(F.when(gap, F.col("src_offset"))).alias("first_gap"),
            total(F.col("committed") == 0, F.col("copies")).alias("aborted_reads"),
            total(F.col("committed").isNull(), F.col("copies")).alias("unknown_sources"),
        )
    )

    # Output records only read_uncommitted sees: their transactions aborted (or are open).
    aborted = (
        outputs.select("out_partition", "out_offset", "src_partition", F.lit(1).alias("c"))
        .unionByName(
            _lineage(scan(output_topic, "read_uncommitted"), *headers).select(
                "out_partition", "out_offset", "src_partition", F.lit(0).alias("c")
            )
        )
        .groupBy("out_partition", "out_offset")
        .agg(F.max("c").alias("c"), F.max("src_partition").alias("src_partition"))
        .where(F.col("c") == 0)
        .groupBy("src_partition")
        .agg(F.count(F.lit(1)).alias("aborted_outputs"))
    )

    report = stats.join(aborted, "src_partition", "full")
    counts = [
        "input_records",
        "outputs",
        "duplicates",
        "missing",
        "gaps",
        "aborted_outputs",
        "aborted_reads",
        "unknown_sources",
    ]
    report = report.select(
        F.when(F.col("src_partition") != _NO_LINEAGE, F.col("src_partition")).alias("partition"),
        *(F.coalesce(F.col(c), F.lit(0)).cast("long").alias(c) for c in counts),
        "first_duplicate",
        "first_gap",
    ).withColumn("unprocessed", F.col("missing") - F.col("gaps"))
    return report.select(*REPORT_COLUMNS).orderBy(F.col("partition").asc_nulls_first())


def _coordinates(names: list[str]) -> list[Column]:
    return [F.col("partition").alias(names[0]), F.col("offset").alias(names[1])]


def audit(
    spark: SparkSession,
    bootstrap_servers: str,
    input_topic: str,
    output_topic: str,
    *,
    source_header: str = SRC_HEADER,
    partition_header: str = SRC_PARTITION_HEADER,
    offset_header: str = SRC_OFFSET_HEADER,
) -> list[PartitionAudit]:
    """Run the audit and bring the (small) per-partition report to the driver."""
    frame = audit_frame(
        spark,
        bootstrap_servers,
        input_topic,
        output_topic,
        source_header=source_header,
        partition_header=partition_header,
        offset_header=offset_header,
    )
    return [
        PartitionAudit(**{name: row[name] for name in REPORT_COLUMNS}) for row in frame.collect()
    ]


def format_report(rows: list[PartitionAudit]) -> str:
    """The report as a fixed-width table, one line per input partition."""
    header_line = " ".join(f"{name:>15}" for name in REPORT_COLUMNS)
    lines = [header_line]
    for row in rows:
        values = row.as_dict()
        lines.append(
            " ".join(
                f"{'-' if values[name] is None else values[name]!s:>15}" for name in REPORT_COLUMNS
            )
        )
    return "\n".join(lines)
