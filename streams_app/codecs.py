"""How keys and values become bytes and back, byte for byte as Faust does by default.

A topic or table names a *serializer* (``"raw"``, ``"json"``, our ``"str"``, or a codec
object) and a *type* (``str``, ``int``, a ``faust.Record`` subclass, ...). As in Faust, the
serializer turns bytes into a payload and the type converts the payload:

- topics: keys default to the app's ``key_serializer`` (``"raw"``), values to its
  ``value_serializer`` (``"json"``); so ``value_type=str`` is a JSON string (``b'"hello"'``) and
  ``key_type=str`` the plain UTF-8 bytes;
- tables: keys and values are JSON (a Record's own ``serializer`` option wins);
- a Record is the JSON object of its fields plus Faust's ``"__faust": {"ns": ...}`` metadata
  (unless the model says ``include_metadata=False``); reading accepts it with or without that
  metadata, and ``isodates=True`` fields come back as ``datetime``;
- ``bytes`` values are never re-encoded (Faust sends them as they are); the raw serializer
  takes ``str`` too (UTF-8).

One deliberate difference: ``value_type=bytes`` without a serializer reads raw bytes (Faust
would JSON-decode them, so a Faust app cannot read back its own raw writes).

Topics decode *checked* (``codec_for(..., checked=True)``): a value that is JSON but not of the
declared type (``"qty": "two"`` for an ``int`` field, ``"7"`` for ``value_type=int``) is a
:class:`DecodeError` at the edge, so it goes to the dead-letter topic instead of crashing the
agent that would have used it (see :mod:`streams_app.record_types`). Tables decode what the
worker itself wrote, unchecked. Checking never changes the bytes written.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from json.encoder import encode_basestring_ascii
from typing import Any, Protocol, TypeAlias

from faust.utils.json import JSONEncoder as _FaustJSONEncoder
from msgspec.json import Decoder as _FastJSONDecoder

from streams_app.errors import RecordError
from streams_app.record_types import ModelCheck


class Codec(Protocol):
    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class DecodeError(RecordError, ValueError):
    """A record's key or value does not decode with the topic's codec (a poison record)."""


class TombstoneError(DecodeError):
    """A record without a value (a tombstone) on a topic whose values are a Record model."""


_BYTES_LIKE = (bytes, bytearray, memoryview)


class RawCodec:
    name = "raw"

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, bytes):
            return obj
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        if isinstance(obj, str):  # as Faust's raw codec: text goes out as UTF-8
            return obj.encode()
        raise TypeError(f"the raw codec sends bytes or str, got {type(obj).__name__}")

    def loads(self, data: bytes) -> Any:
        return data


class StrCodec:
    """Plain UTF-8 text (streams_app's ``"str"`` serializer; Faust has no such name)."""

    name = "str"

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, _BYTES_LIKE):
            return bytes(obj)
        return str(obj).encode()

    def loads(self, data: bytes) -> Any:
        try:
            return data.decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"not UTF-8: {exc.reason}") from exc


# Faust's own encoder (datetimes as ISO 8601 with "Z", Decimal and UUID as strings, models
# through __json__), made once, compact: the same bytes as faust.utils.json.dumps.
_encoder = _FaustJSONEncoder(separators=(",", ":"))
_decoder = json.JSONDecoder()


def _encode(obj: Any) -> bytes:
    text: str = _encoder.encode(obj)
    return text.encode()


def _json_text(text: str) -> bytes:
    """A ``str`` as JSON, as ``_encoder`` writes it (ensure_ascii) without its type dispatch."""
    return encode_basestring_ascii(text).encode()


def json_dumps(obj: Any) -> bytes:
    if type(obj) is int:  # counts, sums, ids: 0.1 us instead of 1.7 us, same bytes
        return b"%d" % obj
    return _encode(obj)


#: msgspec's JSON decoder (C): 1.1 us for the benchmark's 100-byte object against 5.7 us for
#: the standard library's on the loaded machine (BENCHMARKS.md, "The hot path"). It returns the
#: same objects for every document both accept (integers of any size stay exact ints: that
#: is why not orjson, which turns those beyond 64 bits into floats). What it refuses, the
#: standard library decides: NaN and Infinity, numbers that overflow to inf, lone
#: surrogates, and malformed input (whose error message is then the standard library's).
fast_json_decode = _FastJSONDecoder().decode


def json_loads(data: bytes) -> Any:
    """A JSON document's value: msgspec's (``fast_json_decode``) where it accepts the
    document, else the standard library's. A hot loop may call ``fast_json_decode`` itself
    and fall back to this function when it raises: the answer is the same."""
    try:
        return fast_json_decode(data)
    except Exception:
        return _slow_json_loads(data)


def _slow_json_loads(data: bytes) -> Any:
    """The standard library's answer (what ``json.loads`` accepts, and its errors)."""
    try:
        return _decoder.decode(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise DecodeError(f"not JSON: {exc}") from exc


class JsonCodec:
    name = "json"

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, _BYTES_LIKE):  # as Faust: bytes are sent as they are
            return bytes(obj)
        if type(obj) is int:
            return b"%d" % obj
        return _encode(obj)

    def loads(self, data: bytes) -> Any:
        return json_loads(data)


def is_model(typ: Any) -> bool:
    return isinstance(typ, type) and hasattr(typ, "_options") and hasattr(typ, "asdict")


def _without_metadata(payload: dict[str, Any]) -> dict[str, Any]:
    if "__faust" in payload:
        payload = dict(payload)
        del payload["__faust"]
    return payload


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
        return self.check(json_loads(data))

    def check(self, value: Any) -> Any:
        """``value`` (decoded JSON) if it is of the declared type, else :class:`DecodeError`."""
        if not isinstance(value, self._accepts) or (self._no_bool and isinstance(value, bool)):
            expected = self._EXPECTED.get(self.kind, self.kind.__name__)
            raise DecodeError(f"expected {expected}, got {type(value).__name__}")
        return value


class RecordCodec:
    """A ``faust.Record`` model as the JSON object of its fields plus Faust's metadata.

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
        if isinstance(obj, _BYTES_LIKE):
            return bytes(obj)
        if isinstance(obj, self.model):
            return _encode(obj.to_representation())
        if isinstance(obj, dict):  # allow sending a plain dict with the model's fields
            return _encode(self._build(obj).to_representation())
        raise TypeError(f"expected {self.model.__name__}, got {type(obj).__name__}")

    def loads(self, data: bytes) -> Any:
        return self.from_payload(json_loads(data))

    def from_payload(self, payload: Any) -> Any:
        """The model from decoded JSON (also used for values nested in an RPC envelope)."""
        if isinstance(payload, self.model):
            return payload
        if not isinstance(payload, dict):
            raise DecodeError(f"expected a JSON object for {self.model.__name__}")
        return self._build(payload)

    def _build(self, payload: dict[str, Any]) -> Any:
        # Faust's "__faust" metadata names the writer's module, which need not be ours: the
        # topic's model decides. Unknown fields are ignored; __strict__=False makes Faust
        # coerce isodates/decimals fields as its own deserializer does.
        data = {k: v for k, v in payload.items() if k in self._fields} if self._fields else payload
        data = _without_metadata(data)
        if self._check is not None:
            problem = self._check.problem(data)
            if problem is not None:
                raise DecodeError(f"does not fit {self.model.__name__}: {problem}")
        try:
            return self.model(**data, __strict__=False)
        except (TypeError, ValueError) as exc:
            raise DecodeError(f"does not fit {self.model.__name__}: {exc}") from exc


def _want_str(value: Any) -> Any:
    if isinstance(value, _BYTES_LIKE):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError as exc:
            raise DecodeError(f"not UTF-8: {exc.reason}") from exc
    return value


def _want_bytes(value: Any) -> Any:
    return value.encode() if isinstance(value, str) else value


def _reconstruct(payload: Any) -> Any:
    """Faust's autodetection: a JSON object naming a known model becomes that model."""
    if isinstance(payload, dict):
        meta = payload.get("__faust")
        if isinstance(meta, dict):
            from faust.models.base import registry

            model = registry.get(meta.get("ns", ""))
            if model is not None:
                try:
                    return model(**_without_metadata(payload), __strict__=False)
                except (TypeError, ValueError):
                    return payload
    return payload


class TypedCodec:
    """A serializer plus Faust's conversion of the decoded payload to the declared type."""

    def __init__(self, serializer: Codec, typ: Any) -> None:
        self.serializer = serializer
        self.typ = typ
        self.name = f"{getattr(serializer, 'name', 'codec')}:{getattr(typ, '__name__', typ)}"
        # The declared type's own values skip the general path below: text keys, JSON counts
        # and ids go out on every send (0.07 us instead of 0.15-0.28 us), with the same bytes.
        self._plain: type[Any] | None = None
        self._plain_dumps: Any = None
        #: Raw text, the usual key: read with one ``decode`` (0.1 against 0.25 us a record).
        self._raw_text = typ is str and type(serializer) is RawCodec
        if self._raw_text:
            self._plain, self._plain_dumps = str, str.encode
        elif type(serializer) in (JsonCodec, CheckedJsonCodec) and typ in (str, int):
            # Ours only: a subclass registered under another name may encode differently.
            self._plain = typ
            self._plain_dumps = b"%d".__mod__ if typ is int else _json_text

    def plain(self) -> tuple[type[Any], Callable[[Any], bytes]] | None:
        """The declared type whose values skip the general path of :meth:`dumps`, and how
        they are encoded (None: no such type). A hot caller may check the type itself and
        save the call: ``Topic.send`` does, on every record."""
        if self._plain is None:
            return None
        return self._plain, self._plain_dumps

    def dumps(self, obj: Any) -> bytes:
        if type(obj) is self._plain:
            return self._plain_dumps(obj)  # type: ignore[no-any-return]
        if isinstance(obj, _BYTES_LIKE):
            return bytes(obj)
        if self.typ is str and isinstance(self.serializer, RawCodec):
            return str(obj).encode()
        return self.serializer.dumps(obj)

    def loads(self, data: bytes) -> Any:
        if self._raw_text and type(data) is bytes:
            try:
                return data.decode()
            except UnicodeDecodeError as exc:
                raise DecodeError(f"not UTF-8: {exc.reason}") from exc
        return self.from_payload(self.serializer.loads(data))

    def from_payload(self, payload: Any) -> Any:
        typ = self.typ
        try:
            if typ is None:
                return _reconstruct(payload)
            if typ is str:
                return _want_str(payload)
            if typ is bytes:
                return _want_bytes(payload)
            if typ is int:
                return int(_want_str(payload))
            if typ is float:
                return float(_want_str(payload))
            if typ is Decimal:
                return Decimal(_want_str(payload))
        except (TypeError, ArithmeticError) as exc:
            raise DecodeError(f"not a {typ.__name__}: {exc}") from exc
        except ValueError as exc:
            if isinstance(exc, DecodeError):
                raise
            raise DecodeError(f"not a {typ.__name__}: {exc}") from exc
        return payload


def _same(payload: Any) -> Any:
    return payload


def reads_raw_text(codec: Codec) -> bool:
    """Whether ``codec.loads(data)`` is ``data.decode()`` for every ``bytes`` it decodes
    (a text key, the usual one): the record dispatcher then decodes keys inline, a call fewer
    on every record, and leaves to ``loads`` only the ones that are not UTF-8 (so that the
    dead letter carries ``loads``' own error)."""
    return type(codec) is TypedCodec and codec._raw_text


def payload_finisher(codec: Codec) -> Callable[[Any], Any] | None:
    """``finish`` such that ``codec.loads(data)`` is ``finish(json_loads(data))`` for every
    ``data``, when ``codec`` is one of ours that parses JSON; None for any other codec.

    The record dispatcher parses a JSON value once and looks for Faust's RPC request envelope
    in the decoded object, instead of scanning every value's bytes for it first and going
    through the codec's layers after (BENCHMARKS.md, "The hot path").
    """
    kind = type(codec)
    if kind is JsonCodec:
        return _same
    if kind is CheckedJsonCodec:
        return codec.check  # type: ignore[attr-defined, no-any-return]
    if kind is RecordCodec:
        return codec.from_payload  # type: ignore[attr-defined, no-any-return]
    if kind is not TypedCodec or codec._raw_text:  # type: ignore[attr-defined]
        return None
    assert isinstance(codec, TypedCodec)
    inner = payload_finisher(codec.serializer)
    if inner is None:
        return None
    from_payload = codec.from_payload
    if inner is not _same:
        return lambda payload: from_payload(inner(payload))
    if codec.typ is not None:
        return from_payload
    return _FaustOnly(from_payload)


class _NoValue:
    """The plain type of a codec without one: no value is of this type."""


def plain_of(codec: Codec) -> tuple[type[Any], Callable[[Any], bytes]]:
    """``codec``'s plain type and its encoder (:meth:`TypedCodec.plain`), or a type no value
    has and ``codec.dumps``. A caller that encodes on every record checks the type itself:
    ``encode(v) if type(v) is plain else codec.dumps(v)``, a call fewer for plain values."""
    if type(codec) is StrCodec:  # not a subclass: its dumps (text is str.encode's answer)
        return str, str.encode
    if getattr(codec, "bytes_as_is", False):
        # A store codec whose pending entries are their stored bytes already (a join
        # buffer's): ``bytes(b)`` is ``b`` itself, a C call instead of the codec's dumps.
        return bytes, bytes
    plain = codec.plain() if type(codec) is TypedCodec else None  # not a subclass: its dumps
    return plain if plain is not None else (_NoValue, codec.dumps)


class _FaustOnly:
    """An untyped JSON codec's finisher: ``_reconstruct`` leaves everything but an object with
    Faust's metadata as it is."""

    __slots__ = ("from_payload",)

    def __init__(self, from_payload: Callable[[Any], Any]) -> None:
        self.from_payload = from_payload

    def __call__(self, payload: Any) -> Any:
        if type(payload) is dict and "__faust" in payload:
            return self.from_payload(payload)
        return payload


def finishes_only_faust(finish: Callable[[Any], Any]) -> bool:
    """True when ``finish`` (from :func:`payload_finisher`) returns every payload as it is
    except a JSON object with Faust's metadata (a ``__faust`` key): the dispatcher, which
    looks for that key anyway (Faust's RPC envelope), calls it only for those objects."""
    return finish is _same or type(finish) is _FaustOnly


CodecSpec: TypeAlias = "str | type[Any] | Codec | None"

_NAMED: dict[str, Codec] = {"raw": RawCodec(), "str": StrCodec(), "json": JsonCodec()}
#: Faust's codec names that mean JSON here (its serializers registry).
_ALIASES = {"text": "str"}


def named_codec(name: str) -> Codec:
    try:
        return _NAMED[_ALIASES.get(name, name)]
    except KeyError:
        raise ValueError(
            f"unknown codec {name!r}: use 'json', 'raw', 'str' or a faust.Record subclass"
        ) from None


def resolve_codec(spec: CodecSpec, default: str = "json", *, checked: bool = False) -> Codec:
    """A codec from ``"json"``/``"raw"``/``"str"``, a Record subclass, ``str``/``bytes``, or one
    already made (the explicit form; topics and tables use :func:`codec_for`). ``checked``:
    decoded values must be of the declared type (topics)."""
    if spec is None:
        return _NAMED[default]
    if isinstance(spec, str):
        return named_codec(spec)
    if spec is bytes:
        return _NAMED["raw"]
    if spec is str:
        return _NAMED["str"]
    if spec in (int, float, bool, dict, list):
        assert isinstance(spec, type)
        return CheckedJsonCodec(spec) if checked else _NAMED["json"]
    if isinstance(spec, type):
        if is_model(spec):
            return RecordCodec(spec, checked=checked)
        raise ValueError(f"no codec for {spec.__name__}: use a faust.Record subclass")
    if hasattr(spec, "dumps") and hasattr(spec, "loads"):
        return spec
    raise ValueError(f"cannot make a codec out of {spec!r}")


def codec_for(
    typ: Any, serializer: str | Codec | None, default: str, *, checked: bool = False
) -> Codec:
    """The codec Faust would use for ``typ`` with ``serializer`` (or the default serializer).

    ``typ`` may also be a codec name or a codec object (streams_app's shorthand). ``checked``
    (topics): decoded JSON must be of the declared type (a model's field types, or
    ``int``/``float``/``bool``/``dict``/``list``), else :class:`DecodeError`; the bytes written
    are the same either way.
    """
    if isinstance(typ, str) or (typ is not None and hasattr(typ, "dumps") and not is_model(typ)):
        return resolve_codec(typ)  # a codec named in the type position: use it as it is
    if serializer is not None and not isinstance(serializer, str):
        return serializer
    if is_model(typ):
        own = getattr(typ._options, "serializer", None)
        name = serializer or own or default
        if name not in ("json", None):
            if name in ("raw", "str"):
                raise ValueError(
                    f"{typ.__name__}: a Record cannot use the {name!r} serializer; use 'json'"
                )
            named_codec(name)  # raises for unknown names
        return RecordCodec(typ, checked=checked)
    if serializer is None and typ is bytes:
        return _NAMED["raw"]
    codec = named_codec(serializer or default)
    if checked and type(codec) is JsonCodec and typ in (int, float, bool, dict, list):
        codec = CheckedJsonCodec(typ)
    if typ is None and isinstance(codec, RawCodec):
        return codec
    if typ is None and isinstance(codec, StrCodec):
        return codec
    if typ is str and isinstance(codec, StrCodec):
        return codec
    if typ in (dict, list, bool) or (typ is None and not isinstance(codec, JsonCodec)):
        return codec
    return TypedCodec(codec, typ)
