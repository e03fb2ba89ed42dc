"""A dead-lettered record is logged once, when its dead letter commits: a transaction that
carried it and then aborted (another record failed before the commit) takes the letter with it,
and the record is dead-lettered (and logged) again only in the transaction that commits it."""

from __future__ import annotations

import logging
import re
from collections import Counter

import pytest

from streams_app import App
from streams_app.testing import DriverFactory


def failing_app() -> App:
    app = App("dead-letter-log", topic_partitions=1)
    source = app.topic("numbers", key_type=str, value_type=int)
    out = app.topic("numbers-out", key_type=str, value_type=int)

    @app.agent(source)
    async def echo(stream):  # type: ignore[no-untyped-def]
        async for key, n in stream.items():
            if n in (13, 14):
                raise RuntimeError("unlucky")
            await out.send(key=key, value=n)

    return app


async def test_a_dead_letter_is_logged_once(
    topology_driver: DriverFactory, caplog: pytest.LogCaptureFixture
) -> None:
    app = failing_app()
    async with topology_driver(app, max_retries=1, retry_backoff=0.01) as driver:
        # All in one batch: 14 fails after 13's dead letter was sent, and aborts it.
        await driver.stop_worker(0, run=False)
        await driver.pipe_many("numbers", [("a", n) for n in (1, 13, 2, 14, 3)])
        with caplog.at_level(logging.WARNING, logger="streams_app.runtime.dead_letters"):
            await driver.restart(0)
            await driver.run_until_idle()
        dead = await driver.read("numbers.dlq")
    assert sorted(int(r.value) for r in dead) == [13, 14]
    logged = Counter(
        found.group(1)
        for r in caplog.records
        if (found := re.search(r"record (\S+) (?:goes|went) to dead-letter topic", r.getMessage()))
    )
    assert logged == {"numbers[0]@1": 1, "numbers[0]@3": 1}, caplog.text
