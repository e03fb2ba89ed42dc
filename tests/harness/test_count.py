"""The count topology, tested only with the harness, on the in-memory model and the real broker."""

from __future__ import annotations

from collections import Counter

import pytest

from streams_app.testing import (
    DriverFactory,
    assert_no_duplicates,
    assert_output,
    assert_table,
)
from topologies import count

KEYS = ["a", "b", "a", "c", "a", "b", "d", "a"]


def running_counts(keys: list[str]) -> list[tuple[str, int]]:
    seen: Counter[str] = Counter()
    out = []
    for key in keys:
        seen[key] += 1
        out.append((key, seen[key]))
    return out


async def test_counts_each_record_once(topology_driver: DriverFactory) -> None:
    async with topology_driver(count.app) as driver:
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
        await driver.run_until_idle()

        assert_output(await driver.read("count-output"), running_counts(KEYS))
        assert_table(await driver.table("counts"), dict(Counter(KEYS)), table="counts")
        committed = await driver.committed_offsets("count-input")
        assert sum(o or 0 for o in committed.values()) == len(KEYS)


async def test_output_carries_the_lineage_of_its_input(topology_driver: DriverFactory) -> None:
    async with topology_driver(count.app) as driver:
        piped = await driver.pipe("count-input", b"x", key="k", headers={"trace": b"t-1"})
        await driver.run_until_idle()
        (out,) = await driver.read("count-output")
        assert out.lineage == ("count-input", piped.partition, piped.offset)
        assert out.key_value == ("k", 1)


# On the real broker the store makes no difference to Kafka: rocksdb:// in make test.
@pytest.mark.parametrize(
    "store", [pytest.param("memory://", marks=pytest.mark.long_on("kafka")), "rocksdb://"]
)
async def test_crash_and_restart_count_everything_once(
    topology_driver: DriverFactory, store: str
) -> None:
    async with topology_driver(count.app, store=store) as driver:
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[:4]])
        await driver.run_until_idle()
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS[4:]])
        await driver.process()
        await driver.crash()
        await driver.restart()

        out = await driver.read("count-output")
        assert_output(out, running_counts(KEYS))
        assert_no_duplicates(out)
        assert_table(await driver.table("counts"), dict(Counter(KEYS)), table="counts")
        assert await driver.table("counts", source="store") == dict(Counter(KEYS))


async def test_two_workers_share_the_partitions(topology_driver: DriverFactory) -> None:
    async with topology_driver(count.app, workers=2) as driver:
        owned = [set(driver.worker(i).tasks.by_tp) for i in range(2)]
        assert owned[0] and owned[1] and not owned[0] & owned[1]
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS * 3])
        await driver.run_until_idle()
        assert_output(await driver.read("count-output"), running_counts(KEYS * 3))
        assert_table(await driver.table("counts"), dict(Counter(KEYS * 3)), table="counts")


async def test_a_crashed_workers_partitions_move_to_the_survivor(
    topology_driver: DriverFactory,
) -> None:
    # A short transaction timeout: the dead worker's open transaction must time out before
    # the survivor can read past it (there is no restart with its transactional.id).
    async with topology_driver(count.app, workers=2, transaction_timeout=3.0) as driver:
        await driver.pipe_many("count-input", [(k, b"x") for k in KEYS])
        await driver.process()
        await driver.crash(1)
        await driver.run_until_idle()  # the group expels it; the survivor redoes its work

        assert len(driver.worker(0).tasks.by_tp) == 4
        assert_output(await driver.read("count-output"), running_counts(KEYS))
        assert_table(await driver.table("counts"), dict(Counter(KEYS)), table="counts")
