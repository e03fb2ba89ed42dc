"""Testing support for app teams: pytest fixtures for a real broker, and the topology harness.

The harness runs a topology's real agents and runtime against the in-memory Kafka model or a
real broker (see docs/testing.md)::

    async def test_orders(topology_driver):
        async with topology_driver(orders.app) as driver:
            await driver.pipe("orders", Order(...), key="apple")
            await driver.run_until_idle()
            assert_output(await driver.read("inventory"), [("apple", Reserved(...))])
"""

from streams_app.testing.assertions import (
    assert_exactly_once,
    assert_no_duplicates,
    assert_output,
    assert_partitions,
    assert_table,
)
from streams_app.testing.backends import KafkaBackend, MemoryBackend, Piped
from streams_app.testing.clock import ManualClock
from streams_app.testing.driver import (
    HarnessError,
    Input,
    OutputRecord,
    TopologyDriver,
    WorkerFailed,
    WorkerHandle,
)
from streams_app.testing.memory import MemoryKafka
from streams_app.testing.plugin import DriverFactory

__all__ = [
    "DriverFactory",
    "HarnessError",
    "Input",
    "KafkaBackend",
    "ManualClock",
    "MemoryBackend",
    "MemoryKafka",
    "OutputRecord",
    "Piped",
    "TopologyDriver",
    "WorkerFailed",
    "WorkerHandle",
    "assert_exactly_once",
    "assert_no_duplicates",
    "assert_output",
    "assert_partitions",
    "assert_table",
]
