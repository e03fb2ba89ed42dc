"""A broker outage is reported by us in two lines, and the client library's noise is bounded.

The worker runs against a broker of the test's own (the session broker must stay up for the
other tests): the node is stopped while records flow, then started again on the same ports.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams_app.broker import EmbeddedKafka
from streams_app.kafka import logs as kafka_logs
from streams_app.readback import read_topics
from tests.runtime.helpers import running_worker, wait_until
from tests.runtime.test_count_basic import count_app


@pytest.fixture
def aiokafka_at_info() -> Iterator[None]:
    """The suite silences aiokafka (tests/conftest.py); here we measure what an operator at
    ``-l info`` would see, so its records must be created."""
    logger = logging.getLogger("aiokafka")
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.setLevel(level)


async def test_outage_is_one_warning_and_one_line_when_back(
    own_broker: EmbeddedKafka,
    unique: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    aiokafka_at_info: None,
) -> None:
    bootstrap = own_broker.bootstrap_servers
    app = count_app(unique, bootstrap)
    loop = asyncio.get_running_loop()
    caplog.set_level(logging.INFO)
    kafka_logs.reset_for_tests()

    async def outputs() -> int:
        return len((await read_topics(bootstrap, [f"out-{unique}"]))[f"out-{unique}"])

    async with running_worker(app, tmp_path / "state"):
        async with app.producer() as producer:
            for i in range(100):
                await producer.send(f"in-{unique}", key=f"k{i % 7}", value=b"x")
        await wait_until(lambda: outputs_at_least(outputs, 100), timeout=60)

        caplog.clear()
        await loop.run_in_executor(None, own_broker.kill_node, 1)
        # The outage lasts until the client library has tried (and been refused) many times.
        await wait_until(lambda: kafka_logs._state.suppressed_total >= 100, timeout=120)
        suppressed = kafka_logs._state.suppressed_total
        await loop.run_in_executor(None, own_broker.start_node, 1)

        def back() -> bool:
            return any("is reachable again" in r.getMessage() for r in caplog.records)

        await wait_until(back, timeout=60)
        async with app.producer() as producer:
            for i in range(100):
                await producer.send(f"in-{unique}", key=f"k{i % 7}", value=b"x")
        await wait_until(lambda: outputs_at_least(outputs, 200), timeout=120)

    address = bootstrap
    messages = [r.getMessage() for r in caplog.records]
    waiting = [m for m in messages if m.startswith("waiting for broker")]
    again = [m for m in messages if "is reachable again" in m]
    assert len(waiting) == 1, waiting
    assert waiting[0].startswith(f"waiting for broker {address} since ")
    assert waiting[0].endswith(", retrying")
    assert len(again) == 1 and again[0].startswith(f"broker {address} is reachable again")
    client_noise = [
        r for r in caplog.records if r.name.startswith("aiokafka") and r.levelno >= logging.WARNING
    ]
    # Without the filter: one ERROR per reconnect attempt (thousands a minute, see issue 10).
    assert suppressed >= 100
    assert len(client_noise) <= 40, [r.getMessage() for r in client_noise]


async def outputs_at_least(count: object, n: int) -> bool:
    assert callable(count)
    return bool(await count() >= n)
