"""How keys and values become bytes and back.

A codec is chosen per topic and per table: ``"json"``, ``"raw"`` (bytes as they are), ``"str"``
(UTF-8) or a ``faust.Record`` subclass (JSON of its fields, decoded back into the model). Record
JSON carries only the model's fields, so Spark, Kafka tools and other languages read it as
plain JSON.

Topics decode *checked* (``resolve_codec(..., checked=True)``): a value that is JSON but not of
the declared type (``"qty": "two"`` for an ``int`` field, ``"7"`` for ``value_type=int``) is a
:class:`DecodeError` at the edge, so it goes to the dead-letter topic instead of crashing the
agent that would have used it (see :mod:`streams_app.record_types`). Tables decode what the
worker itself wrote, unchecked. Checking never changes the bytes written.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, TypeAlias

from streams_app.errors import RecordError
from streams_app.record_types import ModelCheck


class Codec(Protocol):
    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class DecodeError(RecordError, ValueError):
    """A record's key or value does not decode with the topic's codec (a poison record)."""


class TombstoneError(DecodeError):
    """A record without a value (a tombstone) on a topic whose values are a Record model."""


class RawCodec:
    name = "raw"

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, bytes):
            return obj
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        raise TypeError(f"the raw codec sends bytes, got {type(obj).__name__}")

    def loads(self, data: bytes) -> Any:
        return data


class StrCodec:
    name = "str"

    def dumps(self, obj: Any) -> bytes:
        return str(obj).encode()

    def loads(self, data: bytes) -> Any:
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"not UTF-8: {exc.reason}") from exc


_encoder = json.JSONEncoder(separators=(",", ":"), default=lambda o: _json_default(o))
_decoder = json.JSONDecoder()


def _json_default(obj: Any) -> Any:
    asdict = getattr(obj, "asdict", None)
    if callable(asdict):
        return asdict()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, bytes):
        return obj.decode()
    isoformat = getattr(obj, "isoformat", None)
    if callable(isoformat):
        return isoformat()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


class JsonCodec:
    name = "json"

    def dumps(self, obj: Any) -> bytes:
        if type(obj) is int:  # counts, sums, ids: 0.1 us instead of 1.7 us, same bytes
            return b"%d" % obj
        return _encoder.encode(obj).encode()

    def loads(self, data: bytes) -> Any:
        try:
            return _decoder.decode(data.decode())
        except (UnicodeDecodeError, ValueError) as exc:
            raise DecodeError(f"not JSON: {exc}") from exc


class CheckedJsonCodec(JsonCodec):
    """JSON whose decoded value must be of one Python type (``value_type=int`` and the like)."""

    _EXPECTED = {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        dict: "a JSON object",
        list: "a JSON array",
    }

    def __init__(self, kind: type[Any]) -> None:
        self.kind = kind
        self.name = f"json:{kind.__name__}"
        if kind is float:
            self._accepts: tuple[type[Any], ...] = (int, float)
        else:
            self._accepts = (kind,)
        self._no_bool = kind in (int, float)

    def loads(self, data: bytes) -> Any:
        value = super().loads(data)
        if not isinstance(value, self._accepts) or (self._no_bool and isinstance(value, bool)):
            expected = self._EXPECTED.get(self.kind, self.kind.__name__)
            raise DecodeError(f"expected {expected}, got {type(value).__name__}")
        return value


class RecordCodec:
    """A ``faust.Record`` model as the JSON object of its fields.

    ``checked``: decoded objects (and plain dicts sent as the model) must fit the model's field
    types (:mod:`streams_app.record_types`), else :class:`DecodeError`.
    """

    def __init__(self, model: type[Any], *, checked: bool = False) -> None:
        self.model = model
        self.name = f"record:{model.__name__}"
        fields = getattr(getattr(model, "_options", None), "fields", None)
        self._fields: frozenset[str] = frozenset(fields or ())
        self._check: ModelCheck | None = ModelCheck(model) if checked else None

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, self.model):
            return _encoder.encode(obj.asdict()).encode()
        if isinstance(obj, dict):  # allow sending a plain dict with the model's fields
            return _encoder.encode(self._build(obj).asdict()).encode()
        raise TypeError(f"expected {self.model.__name__}, got {type(obj).__name__}")

    def loads(self, data: bytes) -> Any:
        try:
            payload = _decoder.decode(data.decode())
        except (UnicodeDecodeError, ValueError) as exc:
            raise DecodeError(f"not JSON: {exc}") from exc
        if not isinstance(payload, dict):
            raise DecodeError(f"expected a JSON object for {self.model.__name__}")
        return self._build(payload)

    def _build(self, payload: dict[str, Any]) -> Any:
        data = {k: v for k, v in payload.items() if k in self._fields} if self._fields else payload
        if self._check is not None:
            problem = self._check.problem(data)
            if problem is not None:
                raise DecodeError(f"does not fit {self.model.__name__}: {problem}")
        try:
            return self.model(**data)
        except (TypeError, ValueError) as exc:
            raise DecodeError(f"does not fit {self.model.__name__}: {exc}") from exc


CodecSpec: TypeAlias = "str | type[Any] | Codec | None"

_NAMED: dict[str, Codec] = {"raw": RawCodec(), "str": StrCodec(), "json": JsonCodec()}


def resolve_codec(spec: CodecSpec, default: str = "json", *, checked: bool = False) -> Codec:
    """A codec from ``"json"``/``"raw"``/``"str"``, a Record subclass, ``str``/``bytes``, or one
    already made. ``checked``: decoded values must be of the declared type (topics)."""
    if spec is None:
        return _NAMED[default]
    if isinstance(spec, str):
        try:
            return _NAMED[spec]
        except KeyError:
            raise ValueError(
                f"unknown codec {spec!r}: use 'json', 'raw', 'str' or a faust.Record subclass"
            ) from None
    if spec is bytes:
        return _NAMED["raw"]
    if spec is str:
        return _NAMED["str"]
    if spec in (int, float, bool, dict, list):
        assert isinstance(spec, type)
        return CheckedJsonCodec(spec) if checked else _NAMED["json"]
    if isinstance(spec, type):
        if hasattr(spec, "asdict") and hasattr(spec, "_options"):
            return RecordCodec(spec, checked=checked)
        raise ValueError(f"no codec for {spec.__name__}: use a faust.Record subclass")
    if hasattr(spec, "dumps") and hasattr(spec, "loads"):
        return spec
    raise ValueError(f"cannot make a codec out of {spec!r}")
