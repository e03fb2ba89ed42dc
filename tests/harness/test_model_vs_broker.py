"""The in-memory Kafka model checked against the real broker.

1. Transport level: the scenarios of ``conformance.py`` (commit, abort, markers, open
   transactions and the LSO, fencing, KIP-447 generations, require_stable, transaction
   timeouts) run on both; their traces (offsets, LSO/HW, what each isolation level reads,
   positions, errors) must be identical.
2. Topology level: the same harness scenarios (commit, abort and retry, crash and restart,
   crash mid-commit, crash after the commit, rebalances, a crashed worker's partitions moving)
   run on both; their committed outputs, per partition, and table states must be identical
   (and right).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from streams_app.testing import KafkaBackend, MemoryBackend, TopologyDriver
from tests.harness.conformance import SCENARIOS, Kit, Trace
from topologies import count

pytestmark = pytest.mark.kafka


async def run_scenario(name: str, backend: MemoryBackend | KafkaBackend) -> Trace:
    await backend.open()
    kit = Kit(backend)
    try:
        return await SCENARIOS[name](kit)
    finally:
        await kit.close()
        await backend.close()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_transport_scenario_matches_the_broker(name: str, bootstrap_servers: str) -> None:
    model = await run_scenario(name, MemoryBackend())
    broker = await run_scenario(name, KafkaBackend(bootstrap_servers))
    assert model == broker, "\n".join(
        f"{'  ' if m == b else '≠ '}model {m}\n{'  ' if m == b else '≠ '}kafka {b}"
        for m, b in zip(model, broker, strict=False)
    )


# -- topology level ------------------------------------------------------------------------

Outcome = dict[str, Any]


async def outcome(driver: TopologyDriver, topics: list[str], tables: list[str]) -> Outcome:
    """What read_committed readers see, per topic and partition, and the committed tables."""
    out: Outcome = {}
    for topic in topics:
        per_partition: dict[int, list[tuple[Any, Any]]] = {}
        for r in await driver.read(topic):
            per_partition.setdefault(r.partition, []).append(r.key_value)
        out[topic] = per_partition
    for table in tables:
        out[f"table {table}"] = await driver.table(table)
    return out


def count_outcome(keys: list[str], topic: str = "count-output") -> Outcome:
    """Exactly-once expectation for the count topology (partition-free form)."""
    seen: Counter[str] = Counter()
    running = []
    for key in keys:
        seen[key] += 1
        running.append((key, seen[key]))
    return {"running": running, "table": dict(seen)}


def flatten(result: Outcome, topic: str) -> list[tuple[Any, Any]]:
    return [kv for part in sorted(result[topic]) for kv in result[topic][part]]


def per_key(pairs: list[tuple[Any, Any]]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for key, value in pairs:
        out.setdefault(key, []).append(value)
    return out


KEYS = [f"k{i % 7}" for i in range(30)]


async def commit(driver: TopologyDriver) -> Outcome:
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
    await driver.run_until_idle()
    return await outcome(driver, ["count-output"], ["counts"])


async def crash_and_restart(driver: TopologyDriver) -> Outcome:
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[:10]])
    await driver.run_until_idle()
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[10:20]])
    await driver.process()
    await driver.crash()
    await driver.restart()
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[20:]])
    await driver.run_until_idle()
    return await outcome(driver, ["count-output"], ["counts"])


async def crash_inside_the_commit(driver: TopologyDriver) -> Outcome:
    driver.crash_on("commit_transaction")
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
    await driver.run_until_crash()
    await driver.restart()
    return await outcome(driver, ["count-output"], ["counts"])


async def crash_after_the_commit(driver: TopologyDriver) -> Outcome:
    driver.crash_on("after_commit_transaction")
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
    await driver.run_until_crash()
    await driver.restart()
    result = await outcome(driver, ["count-output"], ["counts"])
    result["store"] = await driver.table("counts", source="store")
    return result


async def rebalance_one_two_one(driver: TopologyDriver) -> Outcome:
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[:10]])
    await driver.run_until_idle()
    await driver.add_worker()
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[10:20]])
    await driver.run_until_idle()
    await driver.stop_worker(1)
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[20:]])
    await driver.run_until_idle()
    return await outcome(driver, ["count-output"], ["counts"])


async def crashed_worker_moves_to_survivor(driver: TopologyDriver) -> Outcome:
    await driver.add_worker()
    await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
    await driver.process()
    await driver.crash(1)
    await driver.run_until_idle()
    return await outcome(driver, ["count-output"], ["counts"])


TOPOLOGY_SCENARIOS: dict[
    str, tuple[Callable[[TopologyDriver], Awaitable[Outcome]], dict[str, Any]]
] = {
    "commit": (commit, {}),
    "crash_and_restart": (crash_and_restart, {"store": "memory://"}),
    "crash_inside_the_commit": (crash_inside_the_commit, {}),
    "crash_after_the_commit": (crash_after_the_commit, {"store": "rocksdb://"}),
    "rebalance_one_two_one": (rebalance_one_two_one, {}),
    "crashed_worker_moves_to_survivor": (
        crashed_worker_moves_to_survivor,
        {"transaction_timeout": 3.0},
    ),
}


@pytest.mark.parametrize("name", list(TOPOLOGY_SCENARIOS))
async def test_topology_scenario_matches_the_broker(
    name: str, bootstrap_servers: str, tmp_path: Path
) -> None:
    scenario, settings = TOPOLOGY_SCENARIOS[name]
    results = {}
    for backend in ("memory", "kafka"):
        if backend == "memory":
            driver = TopologyDriver.memory(count.app, state_dir=tmp_path / backend, **settings)
        else:
            driver = TopologyDriver.kafka(
                count.app, bootstrap_servers, state_dir=tmp_path / backend, **settings
            )
        async with driver:
            results[backend] = await scenario(driver)
    assert results["memory"] == results["kafka"]
    # ... and both are right: every record counted exactly once.
    expected = count_outcome(KEYS)
    got = results["memory"]
    assert per_key(flatten(got, "count-output")) == per_key(expected["running"])
    assert got["table counts"] == expected["table"]
    if "store" in got:
        assert got["store"] == expected["table"]


async def test_at_least_once_repeats_the_same_way_on_both(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    """Under at-least-once a crash repeats uncommitted work: the model repeats exactly what
    the broker repeats."""
    results = {}
    for backend in ("memory", "kafka"):
        settings: dict[str, Any] = {
            "processing_guarantee": "at_least_once",
            "store": "memory://",
            "state_dir": tmp_path / backend,
        }
        driver = (
            TopologyDriver.memory(count.app, **settings)
            if backend == "memory"
            else TopologyDriver.kafka(count.app, bootstrap_servers, **settings)
        )
        async with driver:
            await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[:10]])
            await driver.run_until_idle()
            await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[10:]])
            await driver.process()
            await driver.crash()
            await driver.restart()
            results[backend] = await outcome(driver, ["count-output"], ["counts"])
    assert results["memory"] == results["kafka"]
    outputs = flatten(results["memory"], "count-output")
    assert len(outputs) == len(KEYS) + len(KEYS[10:])  # the uncommitted 20 came out twice
    assert results["memory"]["table counts"] == dict(Counter(KEYS))  # the table is right
