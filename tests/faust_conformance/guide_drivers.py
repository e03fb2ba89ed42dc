"""Our own apps written after faust-streaming's user guide (tests/faust_conformance/guide/),
and their drivers."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from tests.faust_conformance.context import Context
from tests.faust_conformance.drivers import Example

ORDERS = 200
REPARTITION = "guide_streams.accounts-guide-orders-copy-Order.account-repartition"


async def guide_streams(ctx: Context) -> dict[str, Any]:
    orders = [
        (str(i).encode(), json.dumps({"id": i, "account": f"acct{i % 7}", "amount": i % 100}))
        for i in range(ORDERS)
    ]
    await ctx.produce("guide-orders", [(k, v.encode()) for k, v in orders])
    ctx.start()
    inputs = ["guide-orders", "guide-orders-copy", REPARTITION]

    async def done() -> bool:
        batches = sum(json.loads(r.value) for r in await ctx.read("guide-batches"))
        table = await ctx.table("guide-streams-per-account-changelog")
        return (
            batches == sum(range(ORDERS))
            and sum(table.values()) == ORDERS
            and await ctx.committed_all("guide-streams", inputs)
        )

    await ctx.wait(done, "took, counted, filtered, echoed and grouped every order", 180)
    ctx.stop()
    table = await ctx.table("guide-streams-per-account-changelog")
    big = sorted(json.loads(r.value)["id"] for r in await ctx.read("guide-big"))
    return {
        "per_account": dict(sorted((k, v) for (_, k), v in table.items())),
        "echoed_big_ids": big,
        "printed_big": sorted(ctx.printed("BIG ")),
        "counted": sorted(ctx.printed("COUNTED ")),
    }


async def guide_agents(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(lambda: ctx.printed("DONE"), "cast, asked, joined, mapped, kvmapped", 180)
    await ctx.wait(lambda: len(ctx.printed("AUDIT ")) >= 11, "audited every sum")
    results = {label: ctx.printed(label)[0] for label in ("ASK ", "JOIN ", "MAP ", "KVMAP ")}

    async def summed() -> bool:
        return len(await ctx.read("guide-sums")) >= 11  # 1 cast + 1 ask + 4 + 3 + 2

    await ctx.wait(summed, "sent every sum to the sink topic")
    sums = sorted(json.loads(r.value) for r in await ctx.read("guide-sums"))
    ctx.stop()
    return {
        "results": results,
        "audited": sorted(Counter(ctx.printed("AUDIT ")).items()),
        "sink_topic": sums,
    }


async def guide_models(ctx: Context) -> dict[str, Any]:
    shape = {
        "name": "square",
        "points": [{"x": 0, "y": 0}, {"x": 0, "y": 2}, {"x": 2, "y": 2}, {"x": 2, "y": 0}],
        "area": "4.50",
        "created": "2024-01-02T03:04:05+00:00",
    }
    await ctx.produce("guide-shapes", [(None, json.dumps(shape).encode())])
    ctx.start()

    async def sent() -> bool:
        return bool(await ctx.read("guide-texts"))

    await ctx.wait(sent, "decoded the shape and sent it on")
    out = {
        topic: [r.value.decode() for r in await ctx.read(topic) if r.value]
        for topic in ("guide-shapes-out", "guide-plains", "guide-texts")
    }
    printed = ctx.printed("SHAPE ") + ctx.printed("AREA ")
    ctx.stop()
    return {"printed": printed, "bytes": out}


async def guide_tasks(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(
        lambda: ctx.printed("REBALANCED") and ctx.printed("LEADER TIMER"),
        "started, rebalanced, ran the leader timer",
        timeout=120,
    )
    said = await ctx.command_printing(
        "hello", "alice", "--greeting", "Hi", "--times", "3", text="sent 3"
    )
    await ctx.wait(lambda: len(ctx.printed("Hi, alice")) >= 3, "greeted three times")
    await ctx.wait(
        lambda: any("| alice" in line and "3" in line for line in ctx.printed("| alice")),
        "drew the greetings table",
    )
    ctx.stop()
    return {
        "command_said": [line for line in said.splitlines() if line.startswith("sent")],
        "greeted": ctx.printed("Hi, alice")[:3],
        "task": ctx.printed("TASK ")[:1],
        "timer_ran": bool(ctx.printed("TIMER")),
        "service": ctx.printed("SERVICE STARTED")[:1],
        "table_row": [line for line in ctx.printed("| alice")][-1:],
        "table_header": sorted(set(ctx.printed("| Name"))),
    }


GUIDE_APPS: list[Example] = [
    Example(
        "guide_streams",
        "guide_streams.py",
        guide_streams,
        guide=True,
        topics=tuple(
            (t, 4)
            for t in (
                "guide-orders",
                "guide-orders-copy",
                "guide-big",
                "guide-batches",
                REPARTITION,
            )
        ),
    ),
    Example(
        "guide_agents",
        "guide_agents.py",
        guide_agents,
        guide=True,
        topics=(
            ("guide-sums", 4),
            ("guide-agents-guide_agents.adder", 4),
            ("guide-agents-guide_agents.audit", 4),
        ),
    ),
    Example(
        "guide_models",
        "guide_models.py",
        guide_models,
        guide=True,
        topics=tuple(
            (t, 1) for t in ("guide-shapes", "guide-shapes-out", "guide-plains", "guide-texts")
        ),
        quick=True,  # make test's guide app under both frameworks (the README says so)
    ),
    Example(
        "guide_tasks", "guide_tasks.py", guide_tasks, guide=True, topics=(("guide-greetings", 2),)
    ),
]
