"""Read topology output topics into Spark: only committed records, decoded into typed columns.

Topology workers write their outputs in Kafka transactions. A reader that is not
``read_committed`` would see records of transactions that later abort (and of ones still open),
so every read here sets ``kafka.isolation.level=read_committed``. A committed transaction's
records then appear together, never partially; an aborted one never; an open one holds the
partition's last stable offset back until it commits, aborts or times out.

The streaming source keeps its position in the query's checkpoint (never in a Kafka consumer
group) and starts from the earliest offset the first time. ``failOnDataLoss`` stays on: the
offset gaps transaction markers leave are not data loss to the connector, but offsets that were
deleted by retention before the pipeline read them are, and the query must stop rather than skip
them silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from streams_app.errors import ConfigError
from streams_app.spark.schema import model_fields, record_schema

#: The Kafka metadata columns every decoded frame keeps next to the record's own fields.
KAFKA_COLUMNS = ("key", "topic", "partition", "offset", "timestamp", "timestamp_type", "headers")

IsolationLevel = Literal["read_committed", "read_uncommitted"]
OnDecodeError = Literal["fail", "null"]


def kafka_options(
    bootstrap_servers: str,
    topics: str | Iterable[str],
    *,
    isolation_level: IsolationLevel = "read_committed",
    options: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The connector options shared by the streaming and the batch reader."""
    names = [topics] if isinstance(topics, str) else list(topics)
    settings = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": ",".join(names),
        "kafka.isolation.level": isolation_level,
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "includeHeaders": "true",
    }
    settings.update(options or {})
    return settings


def read_stream(
    spark: SparkSession,
    bootstrap_servers: str,
    topics: str | Iterable[str],
    model: type[Any] | None = None,
    *,
    max_offsets_per_trigger: int | None = None,
    on_decode_error: OnDecodeError = "fail",
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A streaming frame of the committed records of ``topics``, decoded with ``model``.

    The query that consumes it needs a ``checkpointLocation`` (the sinks in
    :mod:`streams_app.spark.sinks` require one); ``startingOffsets`` only applies when that
    checkpoint is new. ``max_offsets_per_trigger`` bounds one micro-batch.
    """
    extra = dict(options or {})
    if max_offsets_per_trigger is not None:
        extra["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    reader = spark.readStream.format("kafka")
    for key, value in kafka_options(bootstrap_servers, topics, options=extra).items():
        reader = reader.option(key, value)
    return decode(reader.load(), model, on_decode_error=on_decode_error)


def read_batch(
    spark: SparkSession,
    bootstrap_servers: str,
    topics: str | Iterable[str],
    model: type[Any] | None = None,
    *,
    isolation_level: IsolationLevel = "read_committed",
    on_decode_error: OnDecodeError = "fail",
    options: Mapping[str, str] | None = None,
) -> DataFrame:
    """A batch frame of ``topics`` from the earliest offsets to the latest ones, decoded.

    ``read_committed`` ends at each partition's last stable offset; ``read_uncommitted`` at the
    high watermark, with the records of aborted and open transactions included.
    """
    extra = {"endingOffsets": "latest"}
    extra.update(options or {})
    settings = kafka_options(
        bootstrap_servers, topics, isolation_level=isolation_level, options=extra
    )
    settings.pop("failOnDataLoss")  # a batch read reports what is there
    reader = spark.read.format("kafka")
    for key, value in settings.items():
        reader = reader.option(key, value)
    return decode(reader.load(), model, on_decode_error=on_decode_error)


def decode(
    raw: DataFrame, model: type[Any] | None = None, *, on_decode_error: OnDecodeError = "fail"
) -> DataFrame:
    """Turn the connector's columns into ``key`` (UTF-8), the model's fields and the metadata.

    Without a model the value stays as ``value`` (binary). ``on_decode_error="fail"`` stops the
    query on a value that is not JSON of the model (nothing of that batch is committed);
    ``"null"`` reads such a value's fields as nulls.
    """
    metadata = [
        F.col("key").cast("string").alias("key"),
        F.col("topic"),
        F.col("partition"),
        F.col("offset"),
        F.col("timestamp"),
        F.col("timestampType").alias("timestamp_type"),
        F.col("headers"),
    ]
    if model is None:
        return raw.select(*metadata, F.col("value"))
    clash = sorted(set(model_fields(model)) & {*KAFKA_COLUMNS, "value"})
    if clash:
        raise ConfigError(
            "model",
            f"{model.__qualname__} has fields named like Kafka metadata columns: {clash}",
            "rename those fields, or decode the value yourself with from_json",
        )
    mode = "FAILFAST" if on_decode_error == "fail" else "PERMISSIVE"
    value = F.from_json(F.col("value").cast("string"), record_schema(model), {"mode": mode})
    return raw.select(*metadata, value.alias("_value")).select(
        *KAFKA_COLUMNS, *(F.col("_value")[name].alias(name) for name in model_fields(model))
    )


def header(name: str) -> Column:
    """The first value of the Kafka header ``name`` as a string (null when absent)."""
    matching = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    return F.try_element_at(matching, F.lit(1))["value"].cast("string")
