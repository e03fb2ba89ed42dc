"""Spark schemas derived from faust ``Record`` models.

A topology declares its records once, as ``faust.Record`` classes; the pipeline reads the same
JSON, so its Spark schema is computed from the model's field annotations rather than written a
second time by hand. Every field is nullable: JSON may omit one, and a missing field must read as
null, not fail the batch. Fields the model does not declare (faust's own ``"__faust"`` envelope, or
fields a newer producer added) are ignored.
"""

from __future__ import annotations

import datetime as dt
import decimal
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streams_app.errors import ConfigError

_SCALARS: Mapping[type, DataType] = {
    str: StringType(),
    # JSON integers are unbounded; 64 bits covers every Kafka offset, count and id we write.
    int: LongType(),
    float: DoubleType(),
    bool: BooleanType(),
    bytes: BinaryType(),
    dt.datetime: TimestampType(),
    dt.date: DateType(),
    decimal.Decimal: DecimalType(38, 18),
}


def model_fields(model: type[Any]) -> Mapping[str, Any]:
    """The declared fields of a faust Record (name -> annotation), in declaration order."""
    options = getattr(model, "_options", None)
    fields = getattr(options, "fields", None)
    if not isinstance(fields, Mapping):
        raise ConfigError(
            "model",
            f"{getattr(model, '__qualname__', model)!r} is not a faust.Record subclass",
            "pass the topic's Record model (e.g. topologies.orders.models.Reserved)",
        )
    return fields


def record_schema(model: type[Any]) -> StructType:
    """The Spark schema of ``model``'s JSON: one nullable column per declared field."""
    return StructType(
        [
            StructField(name, spark_type(annotation, f"{model.__qualname__}.{name}"), True)
            for name, annotation in model_fields(model).items()
        ]
    )


def spark_type(annotation: Any, where: str = "field") -> DataType:
    """The Spark type of one field annotation (Optional, list, dict and nested Records too)."""
    if isinstance(annotation, str):
        raise ConfigError(
            where,
            f"the annotation {annotation!r} is an unresolved string",
            "define the model in a module faust can resolve the annotation in",
        )
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:
            return spark_type(present[0], where)
        raise ConfigError(where, f"the union {annotation!r} has no single Spark type", _FIX)
    if origin in (list, tuple, set, frozenset, Sequence):
        item = args[0] if args else str
        return ArrayType(spark_type(item, where), containsNull=True)
    if origin in (dict, Mapping):
        key, value = args if len(args) == 2 else (str, str)
        if key is not str:
            raise ConfigError(where, "JSON object keys are strings", "use dict[str, ...]")
        return MapType(StringType(), spark_type(value, where), valueContainsNull=True)
    if isinstance(annotation, type) and hasattr(annotation, "_options"):
        return record_schema(annotation)
    raise ConfigError(where, f"the type {annotation!r} has no Spark equivalent", _FIX)


_FIX = (
    "use str, int, float, bool, bytes, datetime, date, Decimal, Optional[...], list[...], "
    "dict[str, ...] or a nested Record"
)
