"""The differential test's streams_app side on the in-memory Kafka model: the topology of
tests/joins/apps.py (JoinApps' joins) over the generated input, run by real workers, checked
with no difference allowed against the same definitions the recorded Kafka Streams run is
explained by (test_recorded.py). The real-broker run of both is test_vs_kafka_streams.py."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from streams_app import App
from streams_app.testing import TopologyDriver
from streams_app.testing.driver import Input
from tests.joins.apps import BUILT, join_app
from tests.joins.compare import check
from tests.joins.data import LEFT, RIGHT, Dataset, Rec, generate, processing_order
from tests.joins.models import Row, parse

SEED = 37


def halves(data: Dataset) -> tuple[list[Rec], list[Rec]]:
    """The input cut in two where each partition's processing order is half done: the first
    half processed alone is processed in the same order as within the whole."""
    first: list[Rec] = []
    second: list[Rec] = []
    for p in range(data.partitions):
        order = processing_order(data.of(LEFT, p), data.of(RIGHT, p))
        first += order[: len(order) // 2]
        second += order[len(order) // 2 :]
    return first, second


async def pipe(driver: TopologyDriver, records: list[Rec]) -> None:
    for topic in (LEFT, RIGHT):
        await driver.pipe_many(
            f"in-{topic}",
            [Input(r.key, r.value, None, r.ts, r.partition) for r in records if r.topic == topic],
        )


async def run_joins(
    make_driver: Callable[[App], TopologyDriver],
    kinds: tuple[str, ...] = BUILT,
    *,
    crash: bool = False,
    partitions: dict[str, list[int]] | None = None,
) -> dict[str, list[Row]]:
    """Run the joins of ``kinds`` over the generated input on ``make_driver(app)`` (no
    worker yet: one is added once the input is written); each kind's rows in partition and
    offset order. ``crash``: the first half committed, the second processed, the worker
    crashed before committing it and restarted on its state. ``partitions`` gets each row's
    output partition (for the order comparison of stream-stream joins)."""
    data = generate(SEED)
    app = join_app("joins-driver", "in-", "out-", data.params, data.partitions, kinds)
    async with make_driver(app) as driver:
        # Written before the worker starts, as for Kafka Streams: each task sees both topics'
        # records from its first fetch and processes them in timestamp order.
        first, second = halves(data) if crash else (data.records, [])
        await pipe(driver, first)
        await driver.add_worker()
        await driver.run_until_idle()
        if crash:
            await pipe(driver, second)
            await driver.process()
            await driver.crash()
            await driver.restart()
            await driver.run_until_idle()
        outputs = {}
        for kind in kinds:
            read = await driver.read(f"out-{kind}")
            rows = sorted(read, key=lambda r: (r.partition, r.offset))
            outputs[kind] = [
                parse(
                    None if r.key is None else r.key.encode(),
                    None if r.value is None else r.value.encode(),
                    r.timestamp,
                )
                for r in rows
            ]
            if partitions is not None:
                partitions[kind] = [r.partition for r in rows]
    return outputs


#: Each kind's rows, and each row's output partition.
Outputs = tuple[dict[str, list[Row]], dict[str, list[int]]]


def _run(state_dir: Path, *, crash: bool) -> Outputs:
    partitions: dict[str, list[int]] = {}
    rows = asyncio.run(
        run_joins(
            lambda app: TopologyDriver.memory(app, workers=0, state_dir=state_dir),
            crash=crash,
            partitions=partitions,
        )
    )
    return rows, partitions


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    return _run(tmp_path_factory.mktemp("joins"), crash=False)


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Outputs:
    return _run(tmp_path_factory.mktemp("joins-crash"), crash=True)


def _check(kind: str, outputs: Outputs) -> None:
    """One kind's rows against the definitions; stream-stream rows also in order per output
    partition (pairs and nulls where the definitions put them, up to the order of ties)."""
    rows, partitions = outputs[0][kind], outputs[1][kind]
    outcome = check(kind, rows, generate(SEED), reference=False, partitions=partitions)
    print(outcome.line(), file=sys.stderr)
    assert outcome.rows > 0


@pytest.mark.parametrize("kind", BUILT)
def test_streams_app_joins_give_the_definitions_answers(whole: Outputs, kind: str) -> None:
    _check(kind, whole)


#: A GlobalTable is not read in time order with the stream (as in Kafka Streams): with half
#: the input there at start, what its lookups found is not the definition's, which assumes the
#: whole table restored before the first stream record.
AFTER_CRASH = tuple(k for k in BUILT if not k.startswith("gt-"))


@pytest.mark.parametrize("kind", AFTER_CRASH)
def test_a_crash_before_a_commit_changes_no_answer(crashed: Outputs, kind: str) -> None:
    """Half the input committed, the rest processed, the worker crashed before committing it
    and restarted on its state (tables restored to the committed offsets of their source
    topics, the grace buffer from its changelog): each row the definitions give, once."""
    _check(kind, crashed)
