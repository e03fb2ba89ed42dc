"""The streams_app topology with the joins of ``java/JoinApps.java``, over the same two input
topics: the streams_app side of the differential test (test_vs_kafka_streams.py on the real
broker, test_differential_driver.py on the in-memory model).

Each join writes ``<outputs><kind>`` with JoinApps' joiner (``left+right``, ``null`` for a
missing side), so :func:`tests.joins.models.parse` reads both implementations' outputs alike.
"""

from __future__ import annotations

from typing import Any

import streams_app
from tests.joins.data import LEFT, RIGHT, Params

#: The kinds streams_app builds so far (compare.KINDS has them all).
BUILT = (
    "ss-inner",
    "ss-left",
    "ss-outer",
    "st-inner",
    "st-left",
    "stv-inner",
    "stv-left",
    "gt-inner",
    "gt-left",
    "tt-inner",
    "tt-left",
    "tt-outer",
    "fk-inner",
    "fk-left",
)


def joiner(left: Any, right: Any) -> str:
    return f"{'null' if left is None else left}+{'null' if right is None else right}"


def ref(value: str) -> str | None:
    """The right key a left value refers to (``L17>k3`` -> ``k3``), as JoinApps' ``ref``."""
    at = value.find(">")
    return None if at < 0 else value[at + 1 :]


def join_app(
    app_id: str,
    inputs: str,
    outputs: str,
    params: Params,
    partitions: int,
    kinds: tuple[str, ...] = BUILT,
    **settings: Any,
) -> streams_app.App:
    """One app with every join of ``kinds`` reading ``<inputs>left`` and ``<inputs>right``."""
    app = streams_app.App(app_id, broker="kafka://127.0.0.1:1", **settings)

    def topic(name: str) -> Any:
        return app.topic(name, key_type=str, value_type=str, partitions=partitions)

    left, right = topic(inputs + LEFT), topic(inputs + RIGHT)

    def out(kind: str) -> Any:
        return topic(outputs + kind)

    if {"ss-inner", "ss-left", "ss-outer"} & set(kinds):
        # JoinWindows.ofTimeDifferenceAndGrace(after, grace).before(before).after(after)
        windows = streams_app.JoinWindows(
            before=params.before / 1000, after=params.after / 1000, grace=params.grace / 1000
        )
        left.join(right, windows, joiner=joiner).to(out("ss-inner"))
        left.left_join(right, windows, joiner=joiner).to(out("ss-left"))
        left.outer_join(right, windows, joiner=joiner).to(out("ss-outer"))
    if "ss-inner-input" in kinds:
        # The inner join again, its buffers restored from the input topics (docs/joins.md):
        # the same answers as ss-inner's.
        windows = streams_app.JoinWindows(
            before=params.before / 1000, after=params.after / 1000, grace=params.grace / 1000
        )
        left.join(right, windows, joiner=joiner, changelog="input", name="ss-inner-input").to(
            out("ss-inner-input")
        )
    if {"st-inner", "st-left"} & set(kinds):
        table = app.Table("st-right", source=right)
        left.join(table, joiner=joiner).to(out("st-inner"))
        left.left_join(table, joiner=joiner).to(out("st-left"))
    if {"stv-inner", "stv-left"} & set(kinds):
        versioned = app.Table("stv-right", source=right, versioned=params.history / 1000)
        grace = params.table_grace / 1000
        left.join(versioned, joiner=joiner, grace=grace).to(out("stv-inner"))
        left.left_join(versioned, joiner=joiner, grace=grace).to(out("stv-left"))
    if {"gt-inner", "gt-left"} & set(kinds):
        global_table = app.GlobalTable("gt-right", source=right)
        left.join(global_table, joiner=joiner, key=ref).to(out("gt-inner"))
        left.left_join(global_table, joiner=joiner, key=ref).to(out("gt-left"))
    if {"tt-inner", "tt-left", "tt-outer"} & set(kinds):
        lt, rt = app.Table("tt-left", source=left), app.Table("tt-right", source=right)
        lt.join(rt, joiner=joiner).to(out("tt-inner"))
        lt.left_join(rt, joiner=joiner).to(out("tt-left"))
        lt.outer_join(rt, joiner=joiner).to(out("tt-outer"))
    if {"fk-inner", "fk-left"} & set(kinds):
        fl, fr = app.Table("fk-left", source=left), app.Table("fk-right", source=right)
        fl.join(fr, joiner=joiner, foreign_key=ref).to(out("fk-inner"))
        fl.left_join(fr, joiner=joiner, foreign_key=ref).to(out("fk-left"))
    return app
