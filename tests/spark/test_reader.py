"""Record models become Spark schemas, and Kafka values decode into typed columns."""

from __future__ import annotations

import datetime as dt
from typing import Optional

import faust
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streams_app.errors import ConfigError
from streams_app.spark.reader import KAFKA_COLUMNS, decode, header
from streams_app.spark.schema import record_schema
from topologies.orders.models import Reserved

pytestmark = pytest.mark.spark


class Line(faust.Record, serializer="json"):
    sku: str
    price: float


class Basket(faust.Record, serializer="json"):
    basket_id: str
    placed_at: dt.datetime
    note: Optional[str]  # noqa: UP045 - the typing form must work too
    tags: list[str]
    lines: list[Line]
    extras: dict[str, int]


def test_schema_from_the_models_annotations() -> None:
    assert record_schema(Reserved) == StructType(
        [
            StructField("order_id", StringType()),
            StructField("item", StringType()),
            StructField("qty", LongType()),
            StructField("stock_after", LongType()),
        ]
    )
    basket = {f.name: f.dataType for f in record_schema(Basket).fields}
    assert basket["placed_at"] == TimestampType()
    assert basket["note"] == StringType()
    assert basket["tags"] == ArrayType(StringType())
    assert basket["lines"] == ArrayType(
        StructType([StructField("sku", StringType()), StructField("price", DoubleType())])
    )
    assert basket["extras"] == MapType(StringType(), LongType())


def test_a_type_without_a_spark_equivalent_is_refused_by_name() -> None:
    class Odd(faust.Record, serializer="json"):
        when: dt.timedelta

    with pytest.raises(ConfigError, match=r"Odd\.when"):
        record_schema(Odd)


def kafka_rows(spark: SparkSession, values: list[bytes]):  # type: ignore[no-untyped-def]
    """A frame shaped like the Kafka connector's output."""
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [StructField("key", StringType()), StructField("value", BinaryType())]
                    )
                ),
            ),
        ]
    )
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [
        (b"k", v, "t", 0, i, now, 0, [("src_partition", b"3"), ("src_offset", b"42")])
        for i, v in enumerate(values)
    ]
    return spark.createDataFrame(rows, schema)


def test_values_decode_into_typed_columns(spark: SparkSession) -> None:
    placed = dt.datetime(2026, 11, 22, 13, 32, 53, 303069, tzinfo=dt.UTC)
    basket = Basket(
        basket_id="b1",
        placed_at=placed,
        note=None,
        tags=["x"],
        lines=[Line(sku="s", price=2.5)],
        extras={"n": 1},
    )
    frame = decode(kafka_rows(spark, [bytes(basket.dumps())]), Basket)
    assert tuple(frame.columns) == (*KAFKA_COLUMNS, *record_schema(Basket).fieldNames())
    row = frame.select(
        "*", header("src_partition").alias("p"), header("missing").alias("m")
    ).collect()[0]
    assert row.key == "k" and row.basket_id == "b1" and row.note is None
    assert row.placed_at.replace(tzinfo=None) == placed.astimezone().replace(tzinfo=None)
    assert row.lines[0].price == 2.5 and row.extras == {"n": 1} and row.tags == ["x"]
    assert (row.p, row.m) == ("3", None)


def test_a_value_that_is_not_the_models_json_fails_the_batch(spark: SparkSession) -> None:
    frame = decode(kafka_rows(spark, [b'{"order_id": "o", "qty": 1}', b"not json"]), Reserved)
    with pytest.raises(Exception, match="MALFORMED_RECORD_IN_PARSING"):  # a Py4JJavaError
        frame.collect()
    lenient = decode(
        kafka_rows(spark, [b'{"order_id": "o", "qty": 1}', b"not json"]),
        Reserved,
        on_decode_error="null",
    )
    assert [(r.order_id, r.qty) for r in lenient.collect()] == [("o", 1), (None, None)]
