"""When output batches go out under exactly-once (settings.effective_producer_linger_ms).

No output is visible before its transaction commits, so a worker working through a backlog
lets its batches wait for the commit (at most 100 ms) instead of sending a batch every few
milliseconds; a worker that has processed everything it was given sends them at once, so that
the commit has less to send. The in-memory model shows which of the two sent a batch: the test
driver's :meth:`~streams_app.testing.driver.TopologyDriver.process` sends what is still
lingering when the worker is done, so a batch the worker sent itself never reaches it.
"""

from __future__ import annotations

import pytest

from streams_app.testing import DriverFactory, assert_output
from streams_app.testing.driver import TopologyDriver
from tests.harness.test_count import KEYS
from tests.harness.test_count import running_counts as running
from topologies import count


@pytest.fixture
def driver_sent(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each time the driver looked for lingering batches: whether it found any to send."""
    found: list[bool] = []
    original = TopologyDriver._send_lingering

    def spy(self: TopologyDriver) -> bool:
        sent = original(self)
        found.append(sent)
        return sent

    monkeypatch.setattr(TopologyDriver, "_send_lingering", spy)
    return found


@pytest.mark.streams_backends("memory")
async def test_a_worker_that_caught_up_sends_its_outputs_before_the_commit(
    topology_driver: DriverFactory, driver_sent: list[bool]
) -> None:
    async with topology_driver(count.app) as driver:
        await driver.run_until_idle()
        commits = driver.worker(0).committer.commits
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
        await driver.process()

        assert not any(driver_sent)  # nothing was left lingering: the worker sent it
        assert driver.worker(0).committer.commits == commits
        assert await driver.read("count-output") == []  # not committed yet
        assert_output(await driver.read("count-output", committed=False), running(KEYS))

        await driver.run_until_idle()
        assert_output(await driver.read("count-output"), running(KEYS))


@pytest.mark.streams_backends("memory")
async def test_a_linger_set_by_hand_is_waited_for_even_when_caught_up(
    topology_driver: DriverFactory, driver_sent: list[bool]
) -> None:
    async with topology_driver(count.app, producer_linger_ms=100) as driver:
        await driver.run_until_idle()
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
        await driver.process()

        assert any(driver_sent)  # the outputs were still waiting for their linger
        assert_output(await driver.read("count-output", committed=False), running(KEYS))
        assert await driver.read("count-output") == []
