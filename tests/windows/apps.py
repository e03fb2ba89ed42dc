"""The windowed-count topology the window tests run: one input, four windowed tables."""

from __future__ import annotations

from typing import Any

from streams_app import App
from tests.windows.data import Sizes

KINDS = ("tumbling", "hopping", "sliding", "session")


def windowed_counts_app(
    app_id: str,
    *,
    input_topic: str,
    out_prefix: str,
    sizes: Sizes,
    partitions: int = 2,
    late_records: str = "drop",
    **settings: Any,
) -> App:
    """Counts records per key in each kind of window; each table emits its final counts to
    ``<out_prefix><kind>``. Durations go in as seconds (the API's unit)."""
    app = App(app_id, topic_partitions=partitions, **settings)
    source = app.topic(input_topic, key_type=str, value_serializer="raw")
    g = sizes.grace / 1000
    tables = [
        app.Table("tumbling", default=int, key_type=str).tumbling(
            sizes.tumbling / 1000,
            grace=g,
            late_records=late_records,
            emit_final=out_prefix + "tumbling",
        ),
        app.Table("hopping", default=int, key_type=str).hopping(
            sizes.hopping / 1000,
            sizes.hopping_step / 1000,
            grace=g,
            emit_final=out_prefix + "hopping",
        ),
        app.Table("sliding", default=int, key_type=str).sliding(
            sizes.sliding / 1000, grace=g, emit_final=out_prefix + "sliding"
        ),
        app.Table("session", default=int, key_type=str).session(
            sizes.session_gap / 1000, grace=g, emit_final=out_prefix + "session"
        ),
    ]

    @app.agent(source)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for key, _ in stream.items():
            for table in tables:
                table[key] += 1

    return app
