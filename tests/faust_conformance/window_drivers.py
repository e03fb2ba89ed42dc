"""Drivers of faust-streaming's windowed examples (windowing/, windowed_aggregation.py,
withdrawals.py): Faust's spelling (``Table(...).tumbling/hopping``, ``relative_to_*``,
``now/current/value/delta``, ``on_window_close``) against streams_app's windowed tables.

The examples are driven by wall-clock timers and random values, so the drivers observe what the
examples say they show (counts that grow within a window and restart in the next, windows that
close on the grid of their size or step, sums per key) rather than exact numbers.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from streams_app.codecs import JsonCodec
from streams_app.state.windowed import WindowKeyCodec
from tests.faust_conformance.context import Context

_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?)\s*$")


def _numbers(lines: list[str]) -> list[float]:
    return [float(m.group(1)) for line in lines if (m := _NUMBER.search(line))]


EVENTS = 12
ONE_PER_WORKER = "one counter per worker"
ONE_PER_PARTITION = "one counter per partition"


def _counted(events: list[tuple[int, int]], step_ms: int, per_partition: bool) -> list[int]:
    """What ``current()`` shows after each event (``(timestamp ms, partition)``, in the order
    processed: the order produced, 2 s apart) in a table counting every event under one key:
    the events since the start of the newest window containing it (tumbling: its window;
    hopping: the window starting at the last multiple of the step), of the worker, or of the
    event's partition only."""
    out = []
    for i, (ts, p) in enumerate(events):
        start = ts - ts % step_ms
        out.append(
            sum(1 for t, q in events[: i + 1] if t >= start and (q == p or not per_partition))
        )
    return out


async def _counting_example(
    ctx: Context, topic: str, current: str, step_ms: int, most: int
) -> dict[str, Any]:
    ctx.start()

    def restarted() -> bool:
        values = _numbers(ctx.printed(current))
        return 1 in values[1:] and len(values) >= EVENTS

    await ctx.wait(restarted, f"counted {EVENTS} events over several windows", 180)
    ctx.stop()
    currents = [int(v) for v in _numbers(ctx.printed(current))]
    nows = _numbers(ctx.printed("now() should "))
    values = _numbers(ctx.printed("value() should "))
    deltas = _numbers(ctx.printed("delta(30) should "))
    events = sorted((r.timestamp, r.partition) for r in await ctx.read(topic))[: len(currents)]
    # The records have no key: they spread over the topic's 8 partitions. Faust counts every
    # event of the worker into the window (one "counter" per worker); streams_app keeps one
    # per partition (docs/migrating-from-faust.md, "a table key that is not the record's key").
    kept = {
        ONE_PER_WORKER: _counted(events, step_ms, per_partition=False),
        ONE_PER_PARTITION: _counted(events, step_ms, per_partition=True),
    }
    return {
        "current_counts": next(
            (how for how, counts in kept.items() if counts == currents),
            f"neither: {currents} for events {events}",
        ),
        "now_and_value_counted": all(1 <= v <= most for v in nows + values),
        "delta_30_before_any_window_is_0": deltas[:3] == [0, 0, 0],
    }


async def tumbling(ctx: Context) -> dict[str, Any]:
    # tumbling(10) fed every 2 s: "now()/current()/value() should go from 1 to 5" (6 when the
    # timer's ticks straddle a boundary).
    return await _counting_example(
        ctx, "tumbling_topic", "current() should go from 1 to 5: ", 10_000, 6
    )


async def hopping(ctx: Context) -> dict[str, Any]:
    # hopping(10, 5) fed every 2 s: "current() should have values between 1-3" (the newest
    # window containing the event: at most 5 s of events).
    return await _counting_example(
        ctx, "hopping_topic", "current() should have values between 1-3: ", 5_000, 3
    )


_CLOSED = re.compile(r"processing window:(\d+) events,.*timestamp (\d+(?:\.\d+)?)")


def _closed(ctx: Context) -> list[tuple[int, float]]:
    return [
        (int(m.group(1)), float(m.group(2)))
        for line in ctx.printed("processing window:")
        if (m := _CLOSED.search(line))
    ]


async def windowed_aggregation(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(lambda: len(_closed(ctx)) >= 2, "closed two 10 s windows", 180)

    async def sunk() -> bool:
        return len(await ctx.read("agg-event")) >= 2

    await ctx.wait(sunk, "sent the closed windows' aggregates to agg-event (send_soon)")
    closed = _closed(ctx)
    sent = [json.loads(r.value) for r in await ctx.read("agg-event") if r.value]
    ctx.stop()
    return {
        "closed_windows_hold_events": all(count > 0 for count, _ in closed),
        "window_starts_on_the_10s_grid": all(start % 10 == 0 for _, start in closed),
        "aggregate_fields": sorted({k for record in sent for k in record}),
        "aggregates_counted": all(record["count"] > 0 for record in sent),
    }


async def hopping_2(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(lambda: len(_closed(ctx)) >= 3, "closed three hopping(6, 3) windows", 180)
    closed = _closed(ctx)
    received = bool(ctx.printed("Receive message : "))
    ctx.stop()
    starts = [start for _, start in closed]
    return {
        "closed_windows_hold_events": all(count > 0 for count, _ in closed),
        "window_starts_on_the_3s_grid": all(start % 3 == 0 for start in starts),
        "windows_close_in_start_order": starts == sorted(starts),
        "received": received,
    }


def _window_key(raw: bytes) -> Any:
    """The user key of a windowed changelog key: Faust's JSON ``[key, [start, end]]``, or
    streams_app's binary window key (which differs: docs/migrating-from-faust.md)."""
    try:
        return json.loads(raw)[0]
    except ValueError:
        return WindowKeyCodec(JsonCodec()).loads(raw).key


WITHDRAWALS = 300


def _withdrawal_records() -> tuple[list[tuple[bytes, bytes]], dict[str, float]]:
    records, totals = [], defaultdict(float)
    for i in range(WITHDRAWALS):
        user = f"user_{(i * 7) % 17}"
        amount = float(i % 100) + 0.5
        value = {
            "user": user,
            "country": f"country_{i % 5}",
            "amount": amount,
            "date": f"2024-01-02T03:04:{i % 60:02d}+00:00",
        }
        records.append((user.encode(), json.dumps(value).encode()))
        totals[user] += amount
    return records, dict(totals)


async def withdrawals(ctx: Context) -> dict[str, Any]:
    records, expected = _withdrawal_records()
    await ctx.produce("withdrawals", records)
    ctx.start()
    changelog = "faust-withdrawals-v5-user_to_total-changelog"

    async def totals() -> dict[str, float]:
        windows: dict[tuple[int, bytes], float | None] = {}
        for record in await ctx.read(changelog):
            assert record.key is not None
            value = None if record.value is None else json.loads(record.value)
            windows[(record.partition, record.key)] = value
        per_user: dict[str, float] = defaultdict(float)
        for (_, key), total in windows.items():
            if total is not None:
                per_user[_window_key(key)] += total
        return {user: round(total, 2) for user, total in per_user.items()}

    async def summed() -> bool:
        return await totals() == expected and await ctx.committed_all(
            "faust-withdrawals-v5", ["withdrawals"]
        )

    await ctx.wait(summed, "summed every withdrawal per user (tumbling(3600), stream time)", 180)
    ctx.stop()
    return {"per_user_totals": dict(sorted((await totals()).items()))}
