"""Each network fault kind cuts what it says, and nothing else, until it heals.

On the networked 3-broker cluster (each broker, each worker host and the generator in a network
namespace of its own), every kind is planned exactly as the chaos run plans it (coordinators
and leaders looked up on the live cluster), then struck. While the cut holds, a datagram along
every ordered pair of hosts shows which directions are cut (precisely the fault's blocks) and
a TCP probe along the fault's main link fails; after the heal, every datagram arrives and the
probe succeeds again. The worker hosts run no worker here: the probes stand in for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from streams_app.broker import EmbeddedKafka
from streams_app.broker.netns import Network
from streams_app.chaos import schedule as kinds
from streams_app.chaos.config import ChaosConfig
from streams_app.chaos.coordinators import CoordinatorLocator
from streams_app.chaos.leadership import leaders
from streams_app.chaos.partitions import Cut, NetworkFaults
from streams_app.chaos.run import _networked, create_topics, make_system
from streams_app.chaos.schedule import Fault
from streams_app.chaos.systems import STREAMS_APP, System
from streams_app.testing.netprobe import Probes

pytestmark = [pytest.mark.cluster, pytest.mark.network]

WORKER = 1
NODE = 2


@dataclass
class Bench:
    network: Network
    cluster: EmbeddedKafka
    system: System
    faults: NetworkFaults
    probes: Probes


@pytest.fixture
async def bench(networked_kafka_cluster: EmbeddedKafka, tmp_path: Path) -> AsyncIterator[Bench]:
    cluster = networked_kafka_cluster
    network = cluster.network
    assert network is not None
    config = ChaosConfig(seed=38, workdir=tmp_path, network=True)
    system = make_system(STREAMS_APP, cluster.bootstrap_servers, tmp_path, config)
    _networked(network, system, config.workers)
    topics = system.topics
    # Every topic the app would have, so leaders can be looked up and moved.
    await create_topics(
        cluster.bootstrap_servers,
        [*topics.external, topics.repartition, *topics.changelogs.values()],
        config.partitions,
    )
    for index in range(config.workers):  # the transactional ids the faults look up
        path = system.state_dir(index) / system.app_id / "process-id"  # type: ignore[attr-defined]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"probe{index}")
    locator = CoordinatorLocator(cluster.bootstrap_servers)
    await locator.start()
    workers = [system.worker(i) for i in range(config.workers)]
    faults = NetworkFaults(network, cluster, system, workers, locator, bound=30.0)
    probes = await asyncio.to_thread(Probes, network)
    try:
        yield Bench(network, cluster, system, faults, probes)
    finally:
        network.heal()
        probes.close()
        await faults.close()
        await locator.close()


def main_link(cut: Cut) -> tuple[str, str]:
    """The link a TCP probe checks: the fault's first block (worker -> broker where there is
    one, so the broker's own Kafka port is the one refused)."""
    for src, dst in cut.blocks:
        if src.startswith("w") and dst.startswith("b"):
            return src, dst
    return cut.blocks[0]


async def probe_cut(bench: Bench, cut: Cut) -> None:
    """Before: all through. During: exactly the blocks are lost, the main link's TCP probe
    fails. After the heal: all through again."""
    probes = bench.probes
    every = await asyncio.to_thread(probes.reachable)
    assert len(every) == len(probes.hosts) * (len(probes.hosts) - 1), "not all through before"
    src, dst = main_link(cut)
    port = 9092 if dst.startswith("b") else 7070
    assert await asyncio.to_thread(probes.tcp, src, dst, port=port)
    cut.apply(bench.network)
    try:
        through = await asyncio.to_thread(probes.reachable)
        assert every - through == set(cut.blocks), f"cut {sorted(every - through)}"
        assert not await asyncio.to_thread(probes.tcp, src, dst, port=port, timeout=1.5)
    finally:
        cut.heal(bench.network)
    assert await asyncio.to_thread(probes.reachable) == every
    assert await asyncio.to_thread(probes.tcp, src, dst, port=port)
    assert bench.network.blocked() == set()


def fault(kind: str, variant: int = 0, down: float = 6.0) -> Fault:
    return Fault(index=1, kind=kind, at=0.0, worker=WORKER, node=NODE, down=down, variant=variant)


@pytest.mark.parametrize("kind", [kinds.WORKER_CUT, kinds.WORKER_BLIP])
async def test_a_worker_cut_from_every_broker(bench: Bench, kind: str) -> None:
    cut, _ = await bench.faults.plan(fault(kind))
    w = f"w{WORKER}"
    assert set(cut.blocks) == {(w, b) for b in ("b1", "b2", "b3")} | {
        (b, w) for b in ("b1", "b2", "b3")
    }
    await probe_cut(bench, cut)


async def test_a_worker_cut_from_its_coordinators_still_reaches_its_partition_leaders(
    bench: Bench,
) -> None:
    cut, notes = await bench.faults.plan(fault(kinds.COORDINATORS_CUT))
    system, locator = bench.system, bench.faults.locator
    group = await locator.group_coordinator(system.group_id)
    txn = await locator.transaction_coordinator(system.transactional_id(WORKER))
    coordinators = {f"b{group}", f"b{txn}"}
    w = f"w{WORKER}"
    assert set(cut.blocks) == {(w, c) for c in coordinators} | {(c, w) for c in coordinators}
    # The leaders of every partition it reads and writes were moved off the coordinators.
    topics = system.topics
    led = await leaders(
        bench.cluster.bootstrap_servers, [*topics.external, *topics.outputs, topics.repartition]
    )
    assert not {n for n in led.values() if f"b{n}" in coordinators}, notes
    await probe_cut(bench, cut)
    reached = {b for b in ("b1", "b2", "b3") if b not in coordinators}
    assert reached, "the worker reaches no leader at all"


async def test_a_broker_isolated_from_the_other_brokers_is_still_reached_by_clients(
    bench: Bench,
) -> None:
    cut, _ = await bench.faults.plan(fault(kinds.BROKER_ISOLATED))
    b = f"b{NODE}"
    others = {"b1", "b2", "b3"} - {b}
    assert set(cut.blocks) == {(b, o) for o in others} | {(o, b) for o in others}
    await probe_cut(bench, cut)  # the workers' and the generator's datagrams to it arrive


async def test_every_worker_cut_from_a_broker_that_still_reaches_the_others(bench: Bench) -> None:
    cut, _ = await bench.faults.plan(fault(kinds.BROKER_UNREACHABLE))
    b = f"b{NODE}"
    workers = {"w0", "w1", "w2"}
    assert set(cut.blocks) == {(w, b) for w in workers} | {(b, w) for w in workers}
    await probe_cut(bench, cut)


async def test_the_transaction_coordinator_cut_from_a_partition_leader(bench: Bench) -> None:
    cut, _ = await bench.faults.plan(fault(kinds.MARKERS_CUT))
    txn = await bench.faults.locator.transaction_coordinator(bench.system.transactional_id(WORKER))
    (a, b), (b2, a2) = cut.blocks
    assert (a, b) == (a2, b2) and a == f"b{txn}" and b != a
    led = await leaders(bench.cluster.bootstrap_servers, bench.system.topics.outputs)
    assert f"b{txn}" != b and any(f"b{n}" == b for n in led.values()), "not a leader"
    await probe_cut(bench, cut)


@pytest.mark.parametrize("variant", range(len(kinds.ONE_WAY_VARIANTS)))
async def test_a_one_way_cut_drops_one_direction_only(bench: Bench, variant: int) -> None:
    cut, _ = await bench.faults.plan(fault(kinds.ONE_WAY_CUT, variant))
    reverse = {(d, s) for s, d in cut.blocks}
    assert cut.blocks and not reverse & set(cut.blocks)
    await probe_cut(bench, cut)  # the reverse datagrams arrive: only the blocks are lost


async def test_a_flapping_link_is_cut_and_healed_in_turn(bench: Bench) -> None:
    flapping = fault(kinds.FLAPPING_LINK, variant=7, down=6.0)
    pattern = kinds.flapping_pattern(flapping)
    assert [cut for cut, _ in pattern[:2]] == [True, False] and len(pattern) >= 3
    cut, _ = await bench.faults.plan(flapping)
    src, dst = main_link(cut)
    holding = asyncio.create_task(bench.faults.hold(flapping, cut))
    outcomes = set()
    while not holding.done():
        outcomes.add(await asyncio.to_thread(bench.probes.tcp, src, dst, timeout=0.3))
        await asyncio.sleep(0.1)
    await holding
    assert outcomes == {True, False}, "the link did not both fail and work while flapping"
    assert bench.network.blocked() == set()
    assert await asyncio.to_thread(bench.probes.tcp, src, dst)


async def test_a_slow_link_delays_and_drops_until_it_heals(bench: Bench) -> None:
    cut, _ = await bench.faults.plan(fault(kinds.SLOW_LINK, variant=3))  # 1024 kbit/s
    assert cut.throttle == f"w{WORKER}" and not cut.blocks
    payload = 512 * 1024  # 4 s at 1024 kbit/s
    probes = bench.probes
    assert await asyncio.to_thread(probes.tcp, f"w{WORKER}", "b1", payload=payload, timeout=1.5)
    cut.apply(bench.network)
    try:
        started = time.monotonic()
        assert not await asyncio.to_thread(
            probes.tcp, f"w{WORKER}", "b1", payload=payload, timeout=1.5
        )
        assert time.monotonic() - started >= 1.4
        # Small things still pass, only slower: it is a slow link, not a cut.
        assert await asyncio.to_thread(probes.tcp, "b1", f"w{WORKER}", timeout=3.0)
    finally:
        cut.heal(bench.network)
    assert bench.network.throttled() == set()
    assert await asyncio.to_thread(probes.tcp, f"w{WORKER}", "b1", payload=payload, timeout=1.5)


async def test_every_cut_is_healed_even_when_the_holder_is_cancelled(bench: Bench) -> None:
    cut, _ = await bench.faults.plan(fault(kinds.WORKER_CUT, down=60.0))
    holding = asyncio.create_task(bench.faults.hold(fault(kinds.WORKER_CUT, down=60.0), cut))
    while not bench.network.blocked():
        await asyncio.sleep(0.05)
    holding.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await holding
    assert bench.network.blocked() == set()
