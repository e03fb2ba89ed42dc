"""The differential test's streams_app side on the in-memory Kafka model: the topology of
tests/joins/apps.py (JoinApps' joins) over the generated input, run by real workers, checked
with no difference allowed against the same definitions the recorded Kafka Streams run is
explained by (test_recorded.py). The real-broker run of both is test_vs_kafka_streams.py."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from streams_app import App
from streams_app.testing import TopologyDriver
from streams_app.testing.driver import Input
from tests.joins.apps import BUILT, join_app
from tests.joins.compare import check
from tests.joins.data import generate
from tests.joins.models import Row, parse

SEED = 37


async def run_joins(
    make_driver: Callable[[App], TopologyDriver], kinds: tuple[str, ...] = BUILT
) -> dict[str, list[Row]]:
    """Run the joins of ``kinds`` over the generated input on ``make_driver(app)`` (no
    worker yet: one is added once the input is written); each kind's rows in partition and
    offset order."""
    data = generate(SEED)
    app = join_app("joins-driver", "in-", "out-", data.params, data.partitions, kinds)
    async with make_driver(app) as driver:
        # Written before the worker starts, as for Kafka Streams: each task sees both topics'
        # records from its first fetch and processes them in timestamp order.
        for topic in ("left", "right"):
            records = [r for r in data.records if r.topic == topic]
            await driver.pipe_many(
                f"in-{topic}",
                [Input(r.key, r.value, None, r.ts, r.partition) for r in records],
            )
        await driver.add_worker()
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
    return outputs


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Row]]:
    import asyncio

    state_dir = tmp_path_factory.mktemp("joins")
    return asyncio.run(
        run_joins(lambda app: TopologyDriver.memory(app, workers=0, state_dir=state_dir))
    )


@pytest.mark.parametrize("kind", BUILT)
def test_streams_app_joins_give_the_definitions_answers(
    outputs: dict[str, list[Row]], kind: str
) -> None:
    data = generate(SEED)
    outcome = check(kind, outputs[kind], data, reference=False)
    print(outcome.line(), file=sys.stderr)
    assert outcome.rows > 0
