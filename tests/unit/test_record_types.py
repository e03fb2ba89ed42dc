"""Typed records at the edge: a topic decodes only values of its declared type."""

from __future__ import annotations

import datetime
import decimal
import enum
from typing import Any, Optional

import faust
import pytest

from streams_app import App
from streams_app.codecs import DecodeError, resolve_codec
from streams_app.record_types import ModelCheck


class Order(faust.Record, serializer="json"):
    order_id: str
    user: str
    item: str
    qty: int


class Color(enum.Enum):
    RED = "red"


class Line(faust.Record, serializer="json"):
    sku: str
    price: float


class Basket(faust.Record, serializer="json"):
    id: str
    lines: list[Line]
    tags: dict[str, int]
    note: Optional[str] = None  # noqa: UP045 - the faust spelling
    first: Line | None = None
    color: Color = Color.RED
    total: decimal.Decimal = decimal.Decimal(0)
    at: datetime.datetime | None = None
    extra: Any = None


GOOD_ORDER = b'{"order_id":"o1","user":"u","item":"apple","qty":2}'


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            b'{"order_id":"o1","user":"u","item":"apple","qty":"two"}',
            "field 'qty' must be an integer, got string",
        ),
        (
            b'{"order_id":"o1","user":"u","item":"apple","qty":true}',
            "field 'qty' must be an integer, got boolean",
        ),
        (
            b'{"order_id":"o1","user":"u","item":"apple","qty":2.5}',
            "field 'qty' must be an integer, got number",
        ),
        (
            b'{"order_id":"o1","user":"u","item":"apple","qty":null}',
            "field 'qty' must be an integer, got null",
        ),
        (b'{"order_id":"o1","user":"u","item":"apple"}', "missing required field 'qty'"),
        (b'{"order_id":1,"user":"u","item":"apple","qty":2}', "field 'order_id' must be a string"),
        (b"[1,2]", "expected a JSON object"),
        (b"", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"{not json", "not JSON"),
    ],
)
def test_a_value_that_does_not_fit_the_model_is_a_decode_error(data: bytes, problem: str) -> None:
    codec = resolve_codec(Order, checked=True)
    with pytest.raises(DecodeError) as raised:
        codec.loads(data)
    assert problem in str(raised.value)
    assert "two" not in str(raised.value)  # never the value itself: it may be personal data


def test_values_that_fit_decode_unchanged_and_encode_to_the_same_bytes() -> None:
    codec = resolve_codec(Order, checked=True)
    order = codec.loads(GOOD_ORDER)
    assert order == Order(order_id="o1", user="u", item="apple", qty=2)
    # Checking never changes the bytes: the unchecked codec's (Faust's: the fields, then the
    # "__faust" metadata naming the model), which read back to the same record.
    written = codec.dumps(order)
    assert written == resolve_codec(Order).dumps(order)
    assert written.startswith(GOOD_ORDER[:-1] + b',"__faust":{"ns":')
    assert codec.loads(written) == order
    # Unknown fields are ignored, as before.
    assert codec.loads(GOOD_ORDER[:-1] + b',"__faust":{"ns":"x"}}') == order


def test_nested_models_containers_optionals_and_enums_are_checked() -> None:
    check = ModelCheck(Basket)
    good = {
        "id": "b",
        "lines": [{"sku": "s", "price": 1}],
        "tags": {"a": 1},
        "note": None,
        "first": {"sku": "t", "price": 2.5},
        "color": "red",
        "total": "10.50",
        "at": "2026-01-02T03:04:05+00:00",
        "extra": [1, "anything"],
    }
    assert check.problem(good) is None
    assert check.problem({"id": "b", "lines": [], "tags": {}}) is None  # defaults may be missing
    bad = {
        "lines": [{"sku": "s", "price": "1"}],
        "tags": {"a": "x"},
        "first": {"sku": "t"},
        "color": "blue",
        "total": "NaN",
        "at": "yesterday",
        "note": 3,
    }
    expected = {
        "lines": "field 'lines' item 0 (Line): field 'price' must be a number, got string",
        "tags": "field 'tags' entry 'a' must be an integer, got string",
        "first": "field 'first' (Line): missing required field 'price'",
        "color": "field 'color' must be one of the values of Color, got string",
        "total": "field 'total' must be a finite decimal number, got string",
        "at": "field 'at' must be an ISO-8601 date-time string or a number, got string",
        "note": "field 'note' must be a string, got number",
    }
    for name, value in bad.items():
        assert check.problem({**good, name: value}) == expected[name]
    # Epoch seconds in a datetime field, as Faust's own examples send them, are accepted.
    assert check.problem({**good, "at": 1_767_322_800}) is None
    assert check.problem({**good, "at": True}) is not None


def test_plain_json_types_are_checked_too() -> None:
    assert resolve_codec(int, checked=True).loads(b"42") == 42
    for spec, data in [
        (int, b'"7"'),
        (int, b"true"),
        (float, b'"1.5"'),
        (dict, b"[1]"),
        (list, b"{}"),
    ]:
        with pytest.raises(DecodeError):
            resolve_codec(spec, checked=True).loads(data)
    assert resolve_codec(float, checked=True).loads(b"2") == 2
    # Tables read back what the worker wrote: unchecked.
    assert resolve_codec(int).loads(b'"7"') == "7"


def test_topics_check_and_reject_tombstones_of_models_only() -> None:
    app = App("typed")
    orders = app.topic("orders", key_type=str, value_type=Order)
    counts = app.topic("counts", value_type=int)
    with pytest.raises(DecodeError):
        orders.value_codec.loads(b'{"order_id":"o1","user":"u","item":"apple","qty":"two"}')
    with pytest.raises(DecodeError):
        counts.value_codec.loads(b'"two"')
    assert not orders.accepts_tombstones
    assert counts.accepts_tombstones
    # Sending a plain dict that does not fit the model fails in the sender, not downstream.
    with pytest.raises(DecodeError):
        orders.encode("apple", {"order_id": "o1", "user": "u", "item": "apple", "qty": "two"})
