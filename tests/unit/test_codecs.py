from __future__ import annotations

import faust
import pytest

from streams_app.codecs import DecodeError, resolve_codec


class Point(faust.Record, serializer="json"):
    x: int
    y: int


def test_record_codec_round_trip_is_plain_json() -> None:
    codec = resolve_codec(Point)
    data = codec.dumps(Point(x=1, y=2))
    assert data == b'{"x":1,"y":2}'
    assert codec.loads(data) == Point(x=1, y=2)
    # Unknown fields (e.g. Faust's "__faust" metadata) are ignored.
    assert codec.loads(b'{"x":1,"y":2,"__faust":{"ns":"x"}}') == Point(x=1, y=2)


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
