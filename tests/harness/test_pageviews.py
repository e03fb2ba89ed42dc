"""The pageviews topology, tested broker-free with the harness, through a crash mid-window.

Views of a few users and pages over a quarter of an hour, one out of order within grace and one
too late for its minute, are piped with their ``viewed_at`` times; the worker is crashed while a
transaction holds closed windows' final counts and open windows' updates, restarted, and fed
the rest. Every window that closed must have been emitted exactly once, with the count computed
here from the definitions (one-minute tumbling, five-minute hopping every minute, 30-minute
sessions), and the late view must be counted as late.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from streams_app.testing import DriverFactory, Input
from topologies import pageviews
from topologies.pageviews.models import PageView

pytestmark = pytest.mark.streams_backends("memory")


@pytest.fixture(autouse=True)
def fresh_partition_counts() -> Iterator[None]:
    """A worker records the partition count it found on the app's tables (a module-level app
    shared by these tests, run with different partition counts): forget it after each test."""
    yield
    for table in pageviews.app.tables.values():
        table.partitions = None


T0 = 1_700_000_100_000  # a multiple of 5 minutes, in ms
MINUTE = 60_000

#: (user, page, seconds after T0), in the order they reach Kafka.
VIEWS = [
    ("ann", "home", 0),
    ("bob", "home", 20),
    ("ann", "news", 50),
    ("ann", "home", 70),
    ("cy", "news", 95),
    ("bob", "news", 130),
    ("ann", "home", 182),
    ("bob", "home", 175),  # out of order, within the 10 s grace of minute [120, 180)
    ("cy", "home", 230),
    ("cy", "news", 170),  # 60 s late: minute [120, 180) has closed (at 190 s); 5-min still open
    ("ann", "news", 300),
    ("bob", "home", 420),
    ("ann", "home", 2_400),  # 37 minutes after ann's last view: a new session
    ("bob", "news", 2_430),
    ("cy", "home", 9_000),  # two hours later: closes every window above
]


def expected() -> tuple[dict[str, Counter[tuple[str, int, int]]], int]:
    """Final counts of the windows closed once stream time reaches the last view, and how many
    views were too late for their minute; from the definitions, processing in piped order."""
    observed = -1
    minutes: Counter[tuple[str, int, int]] = Counter()
    fives: Counter[tuple[str, int, int]] = Counter()
    sessions: dict[str, list[list[int]]] = {}
    late = 0
    for user, page, seconds in VIEWS:
        ts = T0 + seconds * 1000
        observed = max(observed, ts)
        start = ts // MINUTE * MINUTE
        if start + MINUTE + 10_000 > observed:  # end + grace still ahead of stream time
            minutes[(page, start, start + MINUTE)] += 1
        else:
            late += 1
        for start in range(ts // MINUTE * MINUTE - 4 * MINUTE, ts + 1, MINUTE):
            if start + 5 * MINUTE + 30_000 > observed:
                fives[(page, start, start + 5 * MINUTE)] += 1
        gap, grace = 30 * MINUTE, 5 * MINUTE
        near = [s for s in sessions.get(user, []) if s[1] >= ts - gap and s[0] <= ts + gap]
        merged = [min([ts] + [s[0] for s in near]), max([ts] + [s[1] for s in near])]
        assert merged[1] >= observed - grace - gap, "no view here is late for its session"
        kept = [s for s in sessions.get(user, []) if s not in near]
        sessions[user] = [*kept, [*merged, 1 + sum(s[2] for s in near)]]
    session_counts = Counter(
        {(user, s[0], s[1]): s[2] for user, spans in sessions.items() for s in spans}
    )
    closed = {
        "page-views-per-minute": Counter(
            {w: n for w, n in minutes.items() if w[2] + 10_000 <= observed}
        ),
        "page-views-5m": Counter({w: n for w, n in fives.items() if w[2] + 30_000 <= observed}),
        "user-sessions": Counter(
            {w: n for w, n in session_counts.items() if w[2] + 35 * MINUTE < observed}
        ),
    }
    return closed, late


def view(user: str, page: str, seconds: int) -> Input:
    ts = T0 + seconds * 1000
    return Input(user, PageView(user=user, page=page, viewed_at=ts / 1000), timestamp=T0)


async def test_pageviews_final_counts_exactly_once_through_a_crash_mid_window(
    topology_driver: DriverFactory,
) -> None:
    want, late = expected()
    assert all(want.values()) and late == 1
    # One partition: the expected counts above follow the piped order. Kafka timestamps are
    # all T0: windows go by viewed_at (the topic's timestamp_fn).
    async with topology_driver(pageviews.app, topic_partitions=1) as driver:
        await driver.pipe_many("pageviews", [view(*v) for v in VIEWS[:7]])
        await driver.run_until_idle()

        # Crash while the transaction holds the next views' updates and the final counts of
        # the windows they close; the restarted worker replays them from the committed offsets.
        driver.crash_on("commit_transaction")
        await driver.pipe_many("pageviews", [view(*v) for v in VIEWS[7:12]])
        await driver.run_until_crash()
        await driver.restart()

        await driver.pipe_many("pageviews", [view(*v) for v in VIEWS[12:]])
        await driver.run_until_idle()

        for topic, windows in want.items():
            emitted: Counter[tuple[str, int, int]] = Counter()
            for record in await driver.read(topic):
                window = (record.key["key"], record.key["start"], record.key["end"])
                assert window not in emitted, f"{topic}: {window} emitted twice"
                emitted[window] = record.value
            assert emitted == windows, topic
        worker = driver.worker()
        assert worker.punctuator.late_by_table["views-per-minute"] == late
        # The 5-minute windows took the late view: they were still open.
        assert want["page-views-5m"][("news", T0, T0 + 5 * MINUTE)] == 4


async def test_the_windowed_example_of_docs_testing_md(topology_driver: DriverFactory) -> None:
    async with topology_driver(pageviews.app) as driver:
        await driver.pipe_many(
            "pageviews",
            [
                doc_view("ann", "home", 0),
                doc_view("bob", "home", 20),
                doc_view("ann", "home", 65),
                doc_view("bob", "home", 55),  # out of order, within the 10 s grace of [0, 60)
            ],
        )
        await driver.run_until_idle()
        assert await driver.read("page-views-per-minute") == []  # no window has closed

        await driver.pipe("pageviews", doc_view("cy", "home", 300).value, key="cy")
        await driver.run_until_idle()  # stream time at 300 s: [0, 60) and [60, 120) closed
        finals = {
            (r.key["key"], r.key["start"] - T0): r.value
            for r in await driver.read("page-views-per-minute")
        }
        assert finals == {("home", 0): 3, ("home", 60_000): 1}


def doc_view(user: str, page: str, seconds: int) -> Input:
    return Input(user, PageView(user=user, page=page, viewed_at=(T0 + seconds * 1000) / 1000))
