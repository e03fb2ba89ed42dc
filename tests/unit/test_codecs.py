"""Codecs: Faust's bytes by default (compared with faust-streaming's own serializer registry)."""

from __future__ import annotations

import datetime
import json
from decimal import Decimal
from typing import Any

import faust
import pytest
from faust.serializers.registry import Registry

from streams_app.codecs import DecodeError, codec_for, resolve_codec


class Point(faust.Record, serializer="json"):
    x: int
    y: int


class Withdrawal(faust.Record, isodates=True, serializer="json"):
    user: str
    amount: float
    date: datetime.datetime | None = None


class Plain(faust.Record, include_metadata=False):
    x: int


FAUST = Registry(key_serializer="raw", value_serializer="json")
WHEN = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)


def test_record_codec_writes_faust_metadata_and_reads_both() -> None:
    codec = resolve_codec(Point)
    data = codec.dumps(Point(x=1, y=2))
    assert data == FAUST.dumps_value(Point, Point(x=1, y=2))
    assert b'"__faust":{"ns":' in data
    assert codec.loads(data) == Point(x=1, y=2)
    assert codec.loads(b'{"x":1,"y":2}') == Point(x=1, y=2)  # without the metadata
    # The writer's namespace may name another module: the topic's model decides.
    assert codec.loads(b'{"x":1,"y":2,"__faust":{"ns":"elsewhere.Point"}}') == Point(x=1, y=2)


def test_include_metadata_false_is_plain_json() -> None:
    assert resolve_codec(Plain).dumps(Plain(x=3)) == b'{"x":3}'


def test_isodates_decode_to_datetime() -> None:
    codec = codec_for(Withdrawal, None, "json")
    written = FAUST.dumps_value(Withdrawal, Withdrawal(user="u", amount=2.5, date=WHEN))
    decoded = codec.loads(written)
    assert isinstance(decoded.date, datetime.datetime)
    assert decoded.date == WHEN
    assert codec.dumps(decoded) == written
    back = FAUST.loads_value(Withdrawal, codec.dumps(decoded))
    assert back.date == WHEN


@pytest.mark.parametrize(
    ("typ", "value"),
    [
        (str, "hello"),
        (int, 42),
        (float, 1.5),
        (Decimal, Decimal("2.25")),
        (None, {"a": [1, 2]}),
        (None, "text"),
        (Point, Point(x=5, y=6)),
    ],
)
def test_values_round_trip_with_faust(typ: object, value: object) -> None:
    ours = codec_for(typ, None, "json")
    written_by_faust = FAUST.dumps_value(typ, value)  # type: ignore[arg-type]
    assert ours.dumps(value) == written_by_faust
    assert ours.loads(written_by_faust) == value
    assert FAUST.loads_value(typ, ours.dumps(value)) == value  # type: ignore[arg-type]


def test_value_type_str_is_a_json_string() -> None:
    assert codec_for(str, None, "json").dumps("hello") == b'"hello"'
    assert codec_for(str, None, "json").loads(b'"hello"') == "hello"
    with pytest.raises(DecodeError):
        codec_for(str, None, "json").loads(b"hello")  # as Faust: not JSON


@pytest.mark.parametrize(("typ", "key"), [(str, "fox"), (None, b"fox"), (bytes, b"fox")])
def test_keys_are_raw_as_faust(typ: object, key: object) -> None:
    ours = codec_for(typ, None, "raw")
    assert ours.dumps(key) == FAUST.dumps_key(typ, key) == b"fox"  # type: ignore[arg-type]
    assert ours.loads(b"fox") == FAUST.loads_key(typ, b"fox")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("typ", "serializer", "values"),
    [
        (str, "json", ["fox", "é ü 東京", 'quote " and \\ back\nslash', "", "\x00\x1f"]),
        (int, "json", [0, -7, 42, 2**70, True, False]),
        (str, "raw", ["fox", "é ü 東京", ""]),
    ],
)
def test_the_declared_types_short_path_writes_the_same_bytes(
    typ: type, serializer: str, values: list[object]
) -> None:
    """Text keys and JSON ints skip the general encoder and write the same bytes, and read
    back the same values: non-ASCII text, escapes, big ints, and bools (an int subclass, not
    taken as an int). Faust reads them back (its orjson writes non-ASCII text unescaped;
    both are the same JSON)."""
    ours = codec_for(typ, None, serializer)
    for value in values:
        if serializer == "raw":
            expected = FAUST.dumps_key(typ, value)
        else:
            expected = json.dumps(value, separators=(",", ":")).encode()
        assert ours.dumps(value) == expected, value
        if serializer == "json":
            assert FAUST.loads_value(typ, ours.dumps(value)) == value
        assert ours.loads(ours.dumps(value)) == value
    assert ours.dumps(b"raw bytes") == b"raw bytes"  # bytes still go out as they are
    if serializer == "raw":  # raw text keys are read with one decode: same results
        view: Any = memoryview(b"fox")  # what a Kafka client may hand over
        assert ours.loads(view) == ours.loads(b"fox") == "fox"
        with pytest.raises(DecodeError, match="not UTF-8"):
            ours.loads(b"\xff")


def test_a_json_codec_of_its_own_keeps_its_own_encoding() -> None:
    """The short path is for our codecs only: a subclass may write ints or text its way."""
    from streams_app.codecs import JsonCodec, TypedCodec

    class Padded(JsonCodec):
        def dumps(self, obj: object) -> bytes:
            return b"<" + super().dumps(obj) + b">"

    assert TypedCodec(Padded(), int).dumps(5) == b"<5>"
    assert TypedCodec(Padded(), str).dumps("a") == b'<"a">'


def test_raw_codec_takes_str_and_bytes_pass_through_json() -> None:
    assert resolve_codec("raw").dumps("é") == "é".encode()
    assert resolve_codec("json").dumps(b"as-is") == b"as-is"
    with pytest.raises(TypeError):
        resolve_codec("raw").dumps(5)


@pytest.mark.parametrize(
    ("spec", "data"),
    [
        (Point, b"not json"),
        (Point, b"[1,2]"),
        (Point, b'{"x":1}'),
        ("json", b"\xff"),
        (str, b"\xff"),
    ],
)
def test_undecodable_data_raises_decode_error(spec: object, data: bytes) -> None:
    with pytest.raises(DecodeError):
        resolve_codec(spec).loads(data)  # type: ignore[arg-type]


def test_named_codecs() -> None:
    assert resolve_codec("raw").loads(b"\x00\x01") == b"\x00\x01"
    assert resolve_codec(str).dumps("é") == "é".encode()
    assert resolve_codec(int).loads(b"42") == 42
    with pytest.raises(ValueError, match="unknown codec"):
        resolve_codec("avro")


#: Documents where a fast decoder could part ways with the standard library's.
EDGE_DOCUMENTS = [
    b'{"user":"key-000123","seq":123456,"amount":512.07,"note":"abc"}',
    b"18446744073709551616",  # beyond 64 bits: an exact int (orjson gives a float)
    b"-9223372036854775809",
    b"123456789012345678901234567890",
    b"9007199254740993",
    b"0.30000000000000004",
    b"1.00000000000000011102230246251565404236316680908203125",
    b"5e-324",
    b"1e-400",
    b"-1e-400",
    b"-0",
    b"-0.0",
    b"1E2",
    b"1.0e+2",
    b'  {"a" : [1, 2.5e-3, null, true, false]} ',
    b'{"a":1,"a":2}',  # the last one wins
    b'{"a":"\\u00e9\\ud83d\\ude00","b":"caf\xc3\xa9"}',
    b'"\\ud800"',  # a lone surrogate: only the standard library accepts it
    b"NaN",
    b"-Infinity",
    b"1e400",  # overflows to inf in the standard library
    b'{"__faust":{"ns":"x"},"x":[{},[],""]}',
]

#: What neither accepts: each a DecodeError.
NOT_JSON = [
    b"",
    b"[1,]",
    b'{"a":1}x',
    b"0123",
    b'"\xff"',
    b"\xef\xbb\xbf{}",
    b'"a\x01b"',
    b"1" * 5000,
]


@pytest.mark.parametrize("data", EDGE_DOCUMENTS)
def test_json_decodes_as_the_standard_library_does(data: bytes) -> None:
    from streams_app.codecs import json_loads

    expected = json.loads(data.decode())
    got = json_loads(data)
    # repr: the same types (int vs float), the same float bits, the same key order.
    assert repr(got) == repr(expected)


@pytest.mark.parametrize("data", NOT_JSON)
def test_what_is_not_json_is_a_decode_error(data: bytes) -> None:
    from streams_app.codecs import json_loads

    with pytest.raises(DecodeError):
        json_loads(data)


def test_json_decodes_generated_documents_as_the_standard_library_does() -> None:
    import random

    from streams_app.codecs import json_loads

    rng = random.Random(42)

    def char() -> str:
        point = rng.choice([rng.randrange(0, 127), rng.randrange(160, 0x10FFFF)])
        return "?" if 0xD800 <= point < 0xE000 else chr(point)  # no lone surrogates

    def value(depth: int) -> Any:
        kind = rng.randrange(8 if depth < 4 else 5)
        if kind == 0:
            return rng.randrange(-(2**70), 2**70)
        if kind == 1:
            return rng.uniform(-1e300, 1e300) * rng.choice([1, 1e-300, 1e-10])
        if kind == 2:
            return "".join(char() for _ in range(rng.randrange(12)))
        if kind == 3:
            return rng.choice([None, True, False])
        if kind == 4:
            return rng.randrange(-1000, 1000)
        if kind in (5, 6):
            return {f"k{rng.randrange(20)}": value(depth + 1) for _ in range(rng.randrange(5))}
        return [value(depth + 1) for _ in range(rng.randrange(5))]

    for _ in range(2000):
        doc = value(0)
        text = json.dumps(doc, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
        assert repr(json_loads(text.encode())) == repr(json.loads(text))


#: Values a JSON topic may carry: what decodes, what a declared type refuses, Faust metadata.
FINISHER_DOCUMENTS = [
    b'{"x":1,"y":2}',
    b'{"x":1,"y":2,"__faust":{"ns":"tests.unit.test_codecs.Point"}}',
    b'{"x":1,"y":2,"__faust":{"ns":"elsewhere"}}',
    b'{"x":"not an int"}',
    b'{"__faust":"not a dict"}',
    b"[1,2]",
    b'"text"',
    b'"42"',
    b"42",
    b"4.5",
    b"true",
    b"null",
    b"not json",
]


@pytest.mark.parametrize(
    "spec",
    ["json", "raw", "str", int, float, str, bytes, dict, list, Point, Plain, None],
    ids=repr,
)
def test_payload_finisher_finishes_a_decoded_value_as_the_codec_reads_the_bytes(spec: Any) -> None:
    """The dispatcher parses a JSON topic's value once and hands the payload to the finisher:
    the same value, or the same error, as the topic's codec reading the bytes."""
    from streams_app.codecs import finishes_only_faust, json_loads, payload_finisher

    for checked in (False, True):
        codec = codec_for(spec, None, "json") if spec is not None else resolve_codec("json")
        if checked and isinstance(spec, type):
            codec = resolve_codec(spec, checked=True)
        finish = payload_finisher(codec)
        if spec in ("raw", "str", str, bytes) and finish is None:
            continue  # not parsed as JSON: the dispatcher calls codec.loads
        assert finish is not None, codec
        for data in FINISHER_DOCUMENTS:
            try:
                expected: Any = ("value", codec.loads(data))
            except DecodeError as exc:
                expected = ("error", str(exc))
            try:
                got: Any = ("value", finish(json_loads(data)))
            except DecodeError as exc:
                got = ("error", str(exc))
            assert repr(got) == repr(expected), (codec, data)
            try:
                payload = json_loads(data)
            except DecodeError:
                continue
            if finishes_only_faust(finish) and not (type(payload) is dict and "__faust" in payload):
                # The dispatcher skips such a finisher for this payload: it must be a no-op.
                assert finish(payload) is payload, (codec, data)


def test_payload_finisher_is_none_for_codecs_that_do_not_parse_json() -> None:
    from streams_app.codecs import RawCodec, StrCodec, TypedCodec, payload_finisher

    class Custom:
        name = "custom"

        def dumps(self, obj: Any) -> bytes:
            return bytes(obj)

        def loads(self, data: bytes) -> Any:
            return data[::-1]

    assert payload_finisher(RawCodec()) is None
    assert payload_finisher(StrCodec()) is None
    assert payload_finisher(Custom()) is None
    assert payload_finisher(TypedCodec(Custom(), int)) is None
    assert payload_finisher(TypedCodec(RawCodec(), str)) is None


def test_the_untyped_json_finishers_are_the_ones_the_dispatcher_may_skip() -> None:
    from streams_app.codecs import finishes_only_faust, payload_finisher

    assert finishes_only_faust(payload_finisher(resolve_codec("json")))  # type: ignore[arg-type]
    untyped = payload_finisher(codec_for(None, None, "json"))
    assert untyped is not None and finishes_only_faust(untyped)
    typed = payload_finisher(codec_for(int, None, "json"))
    assert typed is not None and not finishes_only_faust(typed)


@pytest.mark.parametrize(
    ("spec", "serializer", "values"),
    [
        (str, "raw", ["k", "", "é", "10"]),
        (int, "json", [0, -3, 10**30]),
        (str, "json", ["k", 'q"uote', "é"]),
        (float, "json", [1.5]),
        (None, "json", [{"a": 1}, [1], "s", 3]),
    ],
    ids=repr,
)
def test_a_topic_encodes_as_its_codecs_do_plain_types_included(
    spec: Any, serializer: str, values: list[Any]
) -> None:
    """``Topic.send`` checks its codecs' plain types itself (``TypedCodec.plain``): the bytes
    are the codecs' own, and a codec set on the topic later is the one used."""
    from streams_app import App

    app = App("plain-codecs")
    topic = app.topic(
        "t", key_type=spec, key_serializer=serializer, value_type=spec, value_serializer=serializer
    )
    for codec, plain, dumps in (
        (topic.key_codec, topic._key_plain, topic._key_dumps),
        (topic.value_codec, topic._value_plain, topic._value_dumps),
    ):
        for value in values:
            expected = codec.dumps(value)
            assert (dumps(value) if type(value) is plain else codec.dumps(value)) == expected
        assert (plain in (str, int)) == (spec in (str, int)), (plain, spec)
    # ``Topic.encode`` (send_nowait's, every join result's) takes the same short cut.
    for value in values:
        assert topic.encode(value, value) == (
            topic.key_codec.dumps(value),
            topic.value_codec.dumps(value),
        )
    assert topic.encode(None, None) == (None, None)
    if spec is str:  # a plain key never reaches the codec's own dumps
        plain_dumps = topic._key_codec

        class Unused:
            def dumps(self, _: Any) -> bytes:
                raise AssertionError("the codec's dumps was called for a plain value")

        topic._key_codec = Unused()  # type: ignore[assignment]
        assert topic.encode("k", None) == (b'"k"' if serializer == "json" else b"k", None)
        topic._key_codec = plain_dumps
    topic.key_codec = codec_for(int, None, "json")
    assert topic._key_plain is int and topic._key_dumps(7) == b"7"
    assert topic.encode(7, None) == (b"7", None)
    topic.key_codec = resolve_codec("raw")
    assert topic._key_plain not in (str, int, bytes)
    assert topic.encode("é", None) == ("é".encode(), None)
