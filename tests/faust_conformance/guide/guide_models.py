"""Written after faust-streaming's user guide, "Models": nested records, isodates, decimals,
optional fields with defaults, a model without metadata; decoded, printed and sent on."""

from datetime import datetime
from decimal import Decimal
from typing import List, Optional

import faust


class Point(faust.Record, serializer="json"):
    x: int
    y: int


class Shape(faust.Record, isodates=True, decimals=True, serializer="json"):
    name: str
    points: List[Point]
    area: Decimal
    created: datetime
    note: Optional[str] = None


class Plain(faust.Record, include_metadata=False):
    label: str


app = faust.App("guide-models", topic_partitions=1)
shapes = app.topic("guide-shapes", value_type=Shape)
shapes_out = app.topic("guide-shapes-out", value_type=Shape)
plains = app.topic("guide-plains", value_type=Plain)
texts = app.topic("guide-texts", value_type=str)


@app.agent(shapes)
async def describe(stream):
    async for shape in stream:
        print(f"SHAPE {shape.name} {type(shape.created).__name__} {shape.created.isoformat()}")
        print(f"AREA {shape.area!r} NOTE {shape.note!r}")
        await shapes_out.send(value=shape)
        await plains.send(value=Plain(label=shape.name))
        await texts.send(value=shape.name)


if __name__ == "__main__":
    app.main()
