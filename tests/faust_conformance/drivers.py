"""One driver per app: the input it needs and what is compared between faust-streaming and
streams_app.

A driver runs the app (``ctx.start()``), feeds it, waits for what the app is meant to do, and
returns an *observation*: a plain, deterministic summary (printed lines, committed topic bytes,
final table state) that must be equal under both systems. Random values and timings in the
examples are normalised away (``shape``), never the behaviour: where the examples print
random numbers, the observation keeps their format; where they count, it keeps the counts.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from streams_app.runtime.errors_policy import H_ERROR_MESSAGE, H_ERROR_TYPE
from tests.faust_conformance import window_drivers
from tests.faust_conformance.context import Context, shape

Run = Callable[[Context], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Example:
    """An app of the suite: one of faust-streaming's examples, or one of our guide apps."""

    name: str
    #: Path under faust-streaming's ``examples/`` (or under tests/faust_conformance/guide/).
    path: str
    run: Run | None = None
    #: Why it is not run (network, Redis, Django, FastAPI, not a Faust app).
    excluded: str | None = None
    #: Runs, but is expected to differ until another issue lands (reason).
    pending: str | None = None
    #: ``faust -A module worker`` (the example has no ``app.main()``).
    module_style: bool = False
    #: Topics created before the app starts. Faust creates only its internal topics (agent
    #: topics, changelogs, repartition topics), so an app's own topics must exist; and when an
    #: internal topic appears after Faust's consumer joined, Faust ignores it ("Ignoring missing
    #: topic") until the next rebalance: such topics are created beforehand too.
    topics: tuple[tuple[str, int], ...] = ()
    guide: bool = False
    #: In ``make test`` (the rest runs in ``make faust-conformance``).
    quick: bool = False
    #: faust-streaming itself cannot run the example (what it fails with): the streams_app
    #: run is checked against ``expected`` instead.
    faust_broken: str | None = None
    expected: dict[str, Any] | None = None
    #: Runs unchanged, but observes a documented difference (the reason) ...
    differs: str | None = None
    #: ... exactly this one: (observation, faust-streaming's, streams_app's). Every other
    #: observation must be equal, and these must be what they say under each system.
    difference: tuple[tuple[str, Any, Any], ...] = ()


# -- faust-streaming's examples ---------------------------------------------------------------


async def hello_world(ctx: Context) -> dict[str, Any]:
    ctx.start()

    def greeted() -> int:
        return len({line for line in ctx.printed("hello ")})

    await ctx.wait(lambda: greeted() >= 100, "printed the 100 greetings of a timer run")

    async def committed() -> bool:
        return len({r.value for r in await ctx.read("greetings")}) >= 100

    await ctx.wait(committed, "committed 100 greetings")
    printed = sorted(set(ctx.printed("hello ")))
    values = sorted({r.value.decode() for r in await ctx.read("greetings") if r.value})
    ctx.stop()
    return {"printed": printed, "greetings_topic_values": values}


async def leader(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(
        lambda: (
            len(ctx.printed("PUBLISHING ON LEADER!")) >= 2
            and len([x for x in ctx.printed("b'") if re.fullmatch(r"b'0\.\d+'", x)]) >= 2
        ),
        "published twice on the leader and printed it",
        timeout=90,
    )
    topic = "leader-example-leader.say"

    async def committed() -> bool:
        return len(await ctx.read(topic)) >= 2

    await ctx.wait(committed, "committed two greetings")
    values = [r.value for r in await ctx.read(topic)]
    ctx.stop()
    return {
        "agent_topic": topic,
        "values_are_raw_floats": all(re.fullmatch(rb"0\.\d+", v or b"") for v in values),
        "printed_as_bytes": sorted({shape(x) for x in ctx.printed("b'")}),
    }


_KINDS = re.compile(
    r"\[(stage1|stage2)\] action arrived: "
    r"|\[dead letter\] arrived: <DeadLetter: stage='(stage1|stage2)'"
)


def _bound_agent_tally(lines: list[str]) -> Counter[str]:
    """How many actions each step saw: stage1/stage2 passes and their dead letters."""
    tally: Counter[str] = Counter()
    for line in lines:
        if match := _KINDS.search(line):
            passed, dead = match.groups()
            tally[passed or f"dead:{dead}"] += 1
    return tally


def _bound_agent_accounted(tally: Counter[str]) -> bool:
    """Every action that passed stage1 passed stage2 or died there, and nothing else happened:
    the channels delivered each action once, through partial-bound agents and sinks."""
    return tally["stage1"] > 0 and tally["stage1"] == tally["stage2"] + tally["dead:stage2"]


async def bound_agent(ctx: Context) -> dict[str, Any]:
    ctx.start()

    def tally() -> Counter[str]:
        return _bound_agent_tally(ctx.app.output().splitlines())

    await ctx.wait(
        lambda: sum(tally().values()) >= 10 and _bound_agent_accounted(tally()),
        "sent device actions through the channels, each accounted for",
        timeout=90,
    )
    action = [x for x in ctx.app.output().splitlines() if "device_id=" in x][:1]
    ctx.stop()
    return {
        "accounted": True,
        "action_repr": [shape(re.sub(r".*?(<DeviceAction.*?>).*", r"\1", a)) for a in action],
    }


async def rpc(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(
        lambda: ctx.printed("JOINED:") and len(ctx.printed("RECEIVED REPLY:")) >= 7,
        "joined and mapped through agent RPC (a timer calling an agent that asks another)",
        timeout=120,
    )
    printed = await ctx.command_printing("x100", "3", text="3 * 100 = ")
    command = [line for line in printed.splitlines() if "* 100 =" in line]
    joined = ctx.printed("JOINED:")[0]
    replies = sorted(ctx.printed("RECEIVED REPLY:")[:7])
    ctx.stop(kill_faust=True)
    return {"joined": joined, "mapped": replies, "x100_command": command}


async def service(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(lambda: len(ctx.printed("Received: ")) >= 3, "received three greetings")
    started = ctx.logged("MyService]: STARTED")
    values = {r.value for r in await ctx.read("service-example-service.consumer")}
    ctx.stop()
    return {
        "received": sorted(set(ctx.printed("Received: "))),
        "service_started": started,
        "service_stopped": ctx.logged("MyService]: STOPPED"),
        "agent_topic_values": sorted(v.decode() for v in values if v),
    }


USERS = [f"user_{i}" for i in range(17)]


def _withdrawals(count: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(count):
        user = USERS[(i * 7) % len(USERS)]
        value = {
            "user": user,
            "country": f"country_{i % 5}",
            "amount": float(i % 100) + 0.5,
            "date": f"2024-01-02T03:04:{i % 60:02d}+00:00",
        }
        out.append((user.encode(), json.dumps(value).encode()))
    return out


async def isolated_partitions(ctx: Context) -> dict[str, Any]:
    records = _withdrawals(300)
    await ctx.produce("withdrawals129", records)
    ctx.start()
    group = "faust-withdrawals29"
    await ctx.wait(
        lambda: ctx.committed_all(group, ["withdrawals129"]),
        "committed every withdrawal (one agent instance per partition)",
    )
    ctx.stop()
    table = await ctx.table("faust-withdrawals29-withdrawal-counts-changelog")
    counts = {key: value for (_, key), value in table.items()}
    # The example's own command, with its options (Faust's click options).
    sent = ctx.command("produce", "--max-messages", "5", "--max-latency", "0")
    total = len(await ctx.read("withdrawals129"))
    return {
        "counts": dict(sorted(counts.items())),
        "expected": dict(sorted(Counter(k.decode() for k, _ in records).items())),
        "produce_command_says": sent.strip().splitlines()[:1],
        "records_after_command": total,
    }


async def tz_aware(ctx: Context) -> dict[str, Any]:
    await ctx.produce("tz_aware_topic", [(None, b'{"random": 0.25}')])
    ctx.start()
    await ctx.wait(lambda: ctx.printed("record: "), "printed the record")
    printed = ctx.printed("record: ")
    ctx.stop()
    return {"printed": printed}


async def tz_unaware(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(
        lambda: ctx.printed("record: "), "ran the every-minute crontab and printed", timeout=150
    )
    printed = [shape(line) for line in ctx.printed("record: ")[:1]]
    cron = ctx.printed("-- We should send a message every minute --")[:1]
    values = [r.value for r in await ctx.read("tz_unaware_topic")][:1]
    ctx.stop()
    return {
        "cron_line": cron,
        "printed": printed,
        "topic_value": [shape(v.decode()) for v in values if v],
    }


async def kubernetes_consumer(ctx: Context) -> dict[str, Any]:
    # What examples/kubernetes/producer would send: plain JSON scores under the key "score".
    count = 200
    records = [
        (b"score", json.dumps({"index": i, "value": round(i / count, 2)}).encode())
        for i in range(count)
    ]
    await ctx.produce("test", records)
    ctx.start()
    repartition = "consumer.print_totals-test-index_partition-repartition"
    await ctx.wait(
        lambda: ctx.committed_all("scores", ["test", repartition]),
        "committed every score, through the repartition topic",
    )
    ctx.stop()
    table = await ctx.table("scores-totals-changelog")
    per_key = {key: v for (_, key), v in table.items() if key != "totals"}
    totals = [v for (_, key), v in table.items() if key == "totals"]
    # "totals" is not the record's key. Faust keeps one value per worker: the last write, in
    # whichever partition, is the whole count. streams_app keeps one per partition: their sum
    # is the whole count (and it warns once). Both give `count` here, each its own way.
    whole = max(totals) if ctx.system == "faust" else sum(totals)
    dead = await ctx.read("test.dlq")  # streams_app's dead letters of `test` (none: [])
    return {
        "per_key": dict(sorted(per_key.items())),
        "totals": whole,
        "expected_total": count,
        "warned_once": ctx.app.output().count("a key other than the record's key") <= 1,
        "dead_letters": len(dead),
        "dead_letter_errors": sorted(
            {
                f"{(r.header(H_ERROR_TYPE) or b'').decode()}: "
                + shape((r.header(H_ERROR_MESSAGE) or b"").decode())
                for r in dead
            }
        ),
    }


async def tableofset(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(lambda: ctx.logged("ssign"), "joined the group", timeout=60)
    for args in (
        ("joining", "room1", "alice"),
        ("joining", "room1", "bob"),
        ("leaving", "room1", "alice"),
        ("joining", "room2", "carol"),
    ):
        ctx.command(*args)
    await ctx.wait(
        lambda: ctx.printed("- Carol joined") and len(ctx.printed("TABLE CUR:")) >= 4,
        "processed the four commands",
    )
    await ctx.wait(
        lambda: any("carol" in line for line in ctx.printed("| room2")),
        "drew the table with both rooms (timer, every 10 s)",
        timeout=60,
    )
    # The rows of the last drawing with both rooms (column widths depend on the rows drawn).
    dumps: list[list[str]] = []
    for line in ctx.printed():
        if line.startswith("TABLE NOW:"):
            dumps.append([])
        elif dumps and line.startswith("| room"):
            dumps[-1].append(line)
    drawn = [rows for rows in dumps if any("carol" in row for row in rows)][-1]
    ctx.stop()
    return {
        "events": sorted(ctx.printed("- ")),
        # A set's repr orders its elements by string hash, random per process.
        "sets": sorted(
            sorted(ast.literal_eval(line.removeprefix("TABLE CUR: ")))
            for line in ctx.printed("TABLE CUR:")
        ),
        "table_rows": sorted(drawn),
    }


async def tabletest(ctx: Context) -> dict[str, Any]:
    iterations = 60
    records = [(str(j).encode(), str(i).encode(), j) for i in range(iterations) for j in range(4)]
    await ctx.produce("countstopic", records)
    ctx.start()
    await ctx.wait(
        lambda: ctx.committed_all("tabletest", ["countstopic"]),
        "committed every count (event.message.offset in use)",
    )
    # The example's table_route page: the table read outside of any record. Each key was
    # counted in the partition its records were sent to (partition=j), not the one Kafka's
    # partitioner gives the key: a single worker holding every partition finds it anyway.
    pages = {p: await ctx.page(f"/count/{p}/") for p in range(4)}
    expected = sum(range(iterations))
    assert pages == {p: (200, {str(p): expected}) for p in range(4)}, pages  # not just alike
    ctx.stop()
    table = await ctx.table("tabletest-counts-changelog")
    # The example's command sending straight to the changelog topic.
    ctx.command("add-single-changelog")  # click's name for add_single_changelog
    last = [(r.partition, r.key, r.value) for r in await ctx.read("tabletest-counts-changelog")]
    return {
        "counts": {key: v for (_, key), v in sorted(table.items())},
        "expected_each": sum(range(iterations)),
        "out_of_order": [line for line in ctx.printed("!!! PREV")],
        "changelog_send": [x for x in last if x[1] == b"0"],
        "pages": pages,
    }


async def task_queue(ctx: Context) -> dict[str, Any]:
    ctx.start()
    await ctx.wait(lambda: len(ctx.printed("Result of ")) >= 3, "ran three tasks", timeout=90)
    processed = ctx.printed("Processing task: ")
    results = {line.split()[2]: int(line.rsplit(" ", 1)[1]) for line in ctx.printed("Result of ")}
    correct = []
    for line in processed:
        ident = re.search(r"id='([^']+)'", line)
        args = re.search(r"arguments=\[(\d+), (\d+)\]", line)
        if ident and args and ident.group(1) in results:
            correct.append(results[ident.group(1)] == int(args.group(1)) + int(args.group(2)))
    first = (await ctx.read("tasks"))[0].value
    ctx.stop()
    request = json.loads(first or b"{}")
    return {
        "results_are_sums": bool(correct) and all(correct),
        "request_fields": sorted(request),
        "request_name": request.get("name"),
        "request_ns": request.get("__faust", {}).get("ns"),
    }


async def word_count(ctx: Context) -> dict[str, Any]:
    ctx.start()
    topics = ["posts", "word-counts-word_count.count_words"]

    async def counted() -> bool:
        table = await ctx.table("word-counts-word_counts-changelog")
        return sorted(table.values()) == [1000] * 4 and await ctx.committed_all(
            "word-counts", topics
        )

    await ctx.wait(counted, "counted 4 x 1000 words (task -> agent -> agent -> table)", 240)
    await ctx.wait(lambda: ctx.printed("+$$ Tally"), "printed the tally (the task, after 5 s)")
    tally = ctx.printed("+$$ Tally")
    # The example's pages, from the worker's web server: /count/ reads the table outside of
    # any record (a table_route page), /last/ a dict the agent keeps (a topic_route page).
    pages = {}
    for word in [*WORDS, "absent"]:
        pages[f"/count/{word}/"] = await ctx.page(f"/count/{word}/")
        pages[f"/last/{word}/"] = await ctx.page(f"/last/{word}/")
    counted = {f"/count/{w}/": (200, {w: 1000}) for w in WORDS}
    assert {p: pages[p] for p in counted} == counted, pages  # not just alike
    assert pages["/count/absent/"] == (200, {"absent": 0}), pages
    ctx.stop()
    table = await ctx.table("word-counts-word_counts-changelog")
    words = [r.value for r in await ctx.read("word-counts-word_count.count_words")][:3]
    return {
        "counts": {key: v for (_, key), v in sorted(table.items(), key=lambda x: str(x[0][1]))},
        "tally_title": sorted({line.strip("+-") for line in tally}),
        "agent_topic_values": sorted({v.decode() for v in words if v}),
        "pages": pages,
    }


WORDS = ["the", "quick", "brown", "fox"]


PER_PARTITION = (
    "the example counts records without a key under one table key; Faust keeps one value per "
    "worker, streams_app one per partition (docs/migrating-from-faust.md)"
)

COUNTERS = (("current_counts", window_drivers.ONE_PER_WORKER, window_drivers.ONE_PER_PARTITION),)

TYPED = (
    "the example's producer sends fractions (random()) for the model's `value: int` field: "
    "streams_app checks decoded records against the model's field types and dead-letters them "
    "(docs/guarantees.md), Faust passes them on unchecked"
)

EXAMPLES: list[Example] = [
    Example("hello_world", "hello_world.py", hello_world, topics=(("greetings", 8),), quick=True),
    Example("leader", "leader.py", leader, module_style=True),
    Example("bound_agent", "bound_agent.py", bound_agent),
    # Agent RPC stays in make test through tests/faust_compat/test_rpc_and_leader_crash.py.
    Example("rpc", "advanced/rpc.py", rpc, topics=(("RPC__pow", 8), ("RPC__mul", 8))),
    Example("service", "advanced/service.py", service),
    Example(
        "isolated_partitions_crashing",
        "advanced/isolated_partitions_crashing.py",
        isolated_partitions,
        topics=(("withdrawals129", 4), ("withdrawalz129", 4)),
    ),
    Example(
        "crontab_tz_aware",
        "crontab/tz_aware.py",
        tz_aware,
        topics=(("tz_aware_topic", 8),),
        faust_broken="App.crontab() got an unexpected keyword argument 'tz'",
        expected={"printed": ["record: <Model: random=0.25>"]},
    ),
    Example(
        "crontab_tz_unaware", "crontab/tz_unaware.py", tz_unaware, topics=(("tz_unaware_topic", 8),)
    ),
    Example(
        "kubernetes_consumer",
        "kubernetes/consumer/consumer.py",
        kubernetes_consumer,
        topics=(("test", 8),),
        differs=TYPED,
        difference=(
            ("per_key", {"partition: 0": 100, "partition: 1": 100}, {}),
            ("totals", 200, 0),
            ("dead_letters", 0, 200),
            (
                "dead_letter_errors",
                [],
                ["DecodeError: does not fit Score: field 'value' must be an integer, got number"],
            ),
        ),
    ),
    Example(
        "tableofset",
        "tableofset.py",
        tableofset,
        topics=(("people_joining2", 4), ("people_leaving2", 4)),
    ),
    Example("tabletest", "tabletest.py", tabletest, topics=(("countstopic", 4),)),
    Example("task_queue", "task_queue.py", task_queue, topics=(("tasks", 8),)),
    Example(
        "word_count",
        "word_count.py",
        word_count,
        topics=(("posts", 8), ("word-counts-word_count.count_words", 8)),
        quick=True,
    ),
    Example(
        "windowed_aggregation",
        "windowed_aggregation.py",
        window_drivers.windowed_aggregation,
        topics=(("raw-event", 1), ("agg-event", 1)),
    ),
    Example(
        "windowing_hopping",
        "windowing/hopping.py",
        window_drivers.hopping,
        topics=(("hopping_topic", 8),),
        differs=PER_PARTITION,
        difference=COUNTERS,
    ),
    Example(
        "windowing_hopping_2",
        "windowing/hopping_2.py",
        window_drivers.hopping_2,
        topics=(("raw-event", 1),),
    ),
    Example(
        "windowing_tumbling",
        "windowing/tumbling.py",
        window_drivers.tumbling,
        topics=(("tumbling_topic", 8),),
        differs=PER_PARTITION,
        difference=COUNTERS,
    ),
    Example(
        "withdrawals", "withdrawals.py", window_drivers.withdrawals, topics=(("withdrawals", 4),)
    ),
    Example("concurrency", "concurrency.py", excluded="network (fetches www.google.com)"),
    Example("livecheck", "livecheck.py", excluded="Redis (cache) and the web server"),
    Example(
        "kubernetes_producer",
        "kubernetes/producer/producer.py",
        excluded="not a Faust app (a kafka-python producer script)",
    ),
    Example("fastapi_example", "fastapi_example.py", excluded="FastAPI"),
    Example("fastapi_project", "fastapi_project/main.py", excluded="FastAPI"),
    Example("django", "django/proj/__main__.py", excluded="Django"),
]
