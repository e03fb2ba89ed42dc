"""Checking decoded JSON against a ``faust.Record`` model's field types, at the edge.

A faust ``Record`` stores whatever it is given: ``Order(qty="two")`` is a valid object until an
agent does arithmetic with it, and then the agent crashes on a record that was bad from the
start. Faust's own answer is ``validation=True`` on the model, whose validators *coerce* rather
than check (``int("2")`` passes, an empty string fails every ``str`` field) and which few models
turn on. streams_app checks every record it decodes from a topic instead, with JSON's types:

======================================  ====================================================
field annotation                        accepted JSON value
======================================  ====================================================
``int``                                 an integer (not ``true``/``false``)
``float``                               a number (not ``true``/``false``)
``bool``                                ``true`` or ``false``
``str``, ``bytes``                      a string
``Decimal``                             a number, or a string holding a finite number
``datetime``, ``date``                  an ISO-8601 string (what the encoder writes), or a
                                        number (epoch seconds, kept as is: Faust apps send
                                        ``date=int(time())`` and Faust accepts it)
``list[X]``, ``set[X]``, ``tuple[X, ...]`` a JSON array (its items checked against ``X``)
``dict[K, V]``, ``Mapping[K, V]``       a JSON object (its values checked against ``V``)
a ``Record`` subclass                   a JSON object that fits that model
``Optional[X]``, ``X | None``           ``null`` or what ``X`` accepts
an ``Enum`` subclass                    one of its members' values
anything else (``Any``, custom types)   anything
======================================  ====================================================

A field without a default is required; ``null`` is accepted only for ``Optional`` fields and
fields whose default is ``None``. Unknown fields are ignored (the codec drops them). A model
declared with ``validation=True`` additionally runs Faust's own validators (min/max values,
lengths), as Faust would.

Problems are reported by field name and type only, never with the value: the message ends up
in logs and dead-letter headers, and values may be personal data.
"""

from __future__ import annotations

import collections.abc
import datetime
import decimal
import enum
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

#: Checks one value; returns what is wrong with it (None: nothing).
Check = Callable[[Any], "str | None"]

_NONE_TYPE = type(None)
_SEQUENCES = {list, set, frozenset, tuple}
_MAPPINGS = {dict}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _expect(what: str, ok: Callable[[Any], bool]) -> Check:
    def check(value: Any) -> str | None:
        return None if ok(value) else f"must be {what}, got {_json_type(value)}"

    return check


def _decimal_ok(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    try:
        return decimal.Decimal(str(value)).is_finite()
    except decimal.InvalidOperation:
        return False


def _iso_ok(parse: Callable[[str], Any]) -> Callable[[Any], bool]:
    def ok(value: Any) -> bool:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return True  # epoch seconds, as Faust apps send (``date=int(time())``): kept as is
        if not isinstance(value, str):
            return False
        try:
            parse(value)
        except ValueError:
            return False
        return True

    return ok


_SCALARS: dict[Any, Check] = {
    bool: _expect("true or false", lambda v: isinstance(v, bool)),
    int: _expect("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: _expect("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    str: _expect("a string", lambda v: isinstance(v, str)),
    bytes: _expect("a string", lambda v: isinstance(v, str)),
    decimal.Decimal: _expect("a finite decimal number", _decimal_ok),
    datetime.datetime: _expect(
        "an ISO-8601 date-time string or a number", _iso_ok(datetime.datetime.fromisoformat)
    ),
    datetime.date: _expect(
        "an ISO-8601 date string or a number", _iso_ok(datetime.date.fromisoformat)
    ),
}


def is_record_model(annotation: Any) -> bool:
    """A ``faust.Record`` subclass (recognised by shape: faust stays an optional import here)."""
    return (
        isinstance(annotation, type)
        and hasattr(annotation, "_options")
        and hasattr(annotation, "asdict")
        and hasattr(getattr(annotation, "_options", None), "fields")
    )


def check_for(annotation: Any, _seen: dict[type, ModelCheck] | None = None) -> Check | None:
    """The check for a value of ``annotation`` (None: any value is accepted)."""
    seen = {} if _seen is None else _seen
    if annotation is Any or annotation is object:
        return None
    scalar = _SCALARS.get(annotation)
    if scalar is not None:
        return scalar
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in args if a is not _NONE_TYPE]
        nullable = len(options) != len(args)
        checks = [check_for(a, seen) for a in options]
        if any(c is None for c in checks):
            return None
        return _union([c for c in checks if c is not None], nullable)
    if is_record_model(annotation):
        model_check = seen.get(annotation)
        if model_check is None:
            model_check = ModelCheck(annotation, seen)
        return model_check.check_nested
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        values = {member.value for member in annotation}
        return _expect(f"one of the values of {annotation.__name__}", lambda v: v in values)
    container = origin if origin is not None else annotation
    if container in _SEQUENCES or _is_abc(container, "Sequence", "Set", "MutableSequence"):
        item: Any = None
        if container is not tuple:
            item = args[0] if args else None
        elif len(args) == 2 and args[1] is Ellipsis:  # tuple[X, ...]; tuple[X, Y]: not checked
            item = args[0]
        return _sequence(check_for(item, seen) if item is not None else None)
    if container in _MAPPINGS or _is_abc(container, "Mapping", "MutableMapping"):
        value_check = check_for(args[1], seen) if len(args) == 2 else None
        return _mapping(value_check)
    return None


def _is_abc(container: Any, *names: str) -> bool:
    return any(container is getattr(collections.abc, name) for name in names)


def _union(checks: list[Check], nullable: bool) -> Check:
    def check(value: Any) -> str | None:
        if value is None and nullable:
            return None
        problems = [c(value) for c in checks]
        if any(p is None for p in problems):
            return None
        return problems[0] if len(problems) == 1 else " or ".join(p for p in problems if p)

    return check


def _sequence(item: Check | None) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, list):
            return f"must be an array, got {_json_type(value)}"
        if item is not None:
            for index, element in enumerate(value):
                problem = item(element)
                if problem is not None:
                    return f"item {index} {problem}"
        return None

    return check


def _mapping(values: Check | None) -> Check:
    def check(value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"must be an object, got {_json_type(value)}"
        if values is not None:
            for key, element in value.items():
                problem = values(element)
                if problem is not None:
                    return f"entry {str(key)[:40]!r} {problem}"
        return None

    return check


class ModelCheck:
    """The field checks of one ``Record`` model, built once per model."""

    def __init__(self, model: type[Any], _seen: dict[type, ModelCheck] | None = None) -> None:
        seen = {} if _seen is None else _seen
        seen[model] = self  # before the fields: a model may refer to itself
        options = model._options
        self.model = model
        self.name = model.__name__
        defaults: Mapping[str, Any] = getattr(options, "defaults", {}) or {}
        self.required: tuple[str, ...] = tuple(f for f in options.fields if f not in defaults)
        fields: list[tuple[str, Check]] = []
        for name, annotation in options.fields.items():
            check = check_for(annotation, seen)
            if check is None:
                continue
            if name in defaults and defaults[name] is None:
                check = _union([check], nullable=True)
            fields.append((name, check))
        self.fields = tuple(fields)

    def problem(self, payload: Mapping[str, Any]) -> str | None:
        """What is wrong with ``payload`` as this model (None: it fits)."""
        for name in self.required:
            if name not in payload:
                return f"missing required field {name!r}"
        for name, check in self.fields:
            if name in payload:
                problem = check(payload[name])
                if problem is not None:
                    return f"field {name!r} {problem}"
        return None

    def check_nested(self, value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"must be an object ({self.name}), got {_json_type(value)}"
        problem = self.problem(value)
        return None if problem is None else f"({self.name}): {problem}"
