"""How keys and values become bytes and back.

A codec is chosen per topic and per table: ``"json"``, ``"raw"`` (bytes as they are), ``"str"``
(UTF-8) or a ``faust.Record`` subclass (JSON of its fields, decoded back into the model). Record
JSON carries only the model's fields, so Spark, Kafka tools and other languages read it as
plain JSON.
"""

from __future__ import annotations

import json
from typing import Any, Protocol, TypeAlias


class Codec(Protocol):
    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class DecodeError(ValueError):
    """A record's key or value does not decode with the topic's codec (a poison record)."""


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


class RecordCodec:
    """A ``faust.Record`` model as the JSON object of its fields."""

    def __init__(self, model: type[Any]) -> None:
        self.model = model
        self.name = f"record:{model.__name__}"
        fields = getattr(getattr(model, "_options", None), "fields", None)
        self._fields: frozenset[str] = frozenset(fields or ())

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
        try:
            return self.model(**data)
        except (TypeError, ValueError) as exc:
            raise DecodeError(f"does not fit {self.model.__name__}: {exc}") from exc


CodecSpec: TypeAlias = "str | type[Any] | Codec | None"

_NAMED: dict[str, Codec] = {"raw": RawCodec(), "str": StrCodec(), "json": JsonCodec()}


def resolve_codec(spec: CodecSpec, default: str = "json") -> Codec:
    """A codec from ``"json"``/``"raw"``/``"str"``, a Record subclass, ``str``/``bytes``, or one
    already made."""
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
        return _NAMED["json"]
    if isinstance(spec, type):
        if hasattr(spec, "asdict") and hasattr(spec, "_options"):
            return RecordCodec(spec)
        raise ValueError(f"no codec for {spec.__name__}: use a faust.Record subclass")
    if hasattr(spec, "dumps") and hasattr(spec, "loads"):
        return spec
    raise ValueError(f"cannot make a codec out of {spec!r}")
