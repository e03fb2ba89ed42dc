"""The short chaos run inside ``make test``: streams_app keeps every invariant under faults.

50,000 records over 100 s into the EOS test topology on three worker processes and the 3-broker
cluster, while eight faults strike, one of each kind: SIGTERM, SIGKILL, a zombie (SIGSTOP past
the session timeout, then SIGCONT), a wiped state directory, a random broker kill, kills of the
transaction coordinator and of the group coordinator, and a frozen (SIGSTOPped) broker. Then
everything committed is read back and checked against invariants 1-10 and 12 (11 is
``test_copier.py``). ``make chaos`` runs the long version (a million records, 30 faults, and
faust-streaming beside it).

Then the same on the networked cluster (each broker, worker and the generator in a network
namespace of its own): one fault of each network kind (links cut, one way, flapping, throttled),
with the checks partitions add; and the same kind of faults against at-least-once, to show the
verifier catches what an unsafe setting lets through.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streams_app.broker import EmbeddedKafka
from streams_app.chaos import invariants as inv
from streams_app.chaos.config import ChaosConfig
from streams_app.chaos.report import (
    examples_text,
    fault_timeline,
    liveness_table,
    summary_table,
)
from streams_app.chaos.run import SystemResult, run_system
from streams_app.chaos.schedule import (
    BROKER_FAULTS,
    COORDINATORS_CUT,
    NETWORK_FAULTS,
    NETWORK_MIX,
    PROCESS_FAULTS,
    WORKER_CUT,
)
from streams_app.chaos.systems import STREAMS_APP

RECORDS = 50_000
FAULTS = len(PROCESS_FAULTS)


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.long  # make test-long: make test keeps the networked run (the same verifier)
async def test_streams_app_keeps_exactly_once_through_every_kind_of_fault(
    kafka_cluster: EmbeddedKafka, tmp_path: Path
) -> None:
    seed = int(os.environ.get("CHAOS_SEED", "0")) or ChaosConfig().seed
    config = ChaosConfig(
        seed=seed,
        records=RECORDS,
        duration=100.0,
        faults=FAULTS,
        systems=(STREAMS_APP,),
        client_check=False,
        drain_timeout=120.0,
        verify_timeout=300.0,
        workdir=tmp_path,
    )
    result = await run_system(
        kafka_cluster, STREAMS_APP, config, records=RECORDS, duration=100.0, faults=FAULTS
    )
    report = f"seed {seed} (replay: CHAOS_SEED={seed})\n{summary_table({STREAMS_APP: result})}"
    details = examples_text({STREAMS_APP: result})
    print(report, details, sep="\n")
    assert result.records == RECORDS, report
    assert result.drained, f"{report}\n{details}"
    assert sorted(result.faults) == sorted(PROCESS_FAULTS), report
    assert sum(result.faults.get(kind, 0) for kind in BROKER_FAULTS) >= 4, report
    violations = {k: v for k, v in result.violations.items() if v}
    assert violations == {}, f"{report}\n{details}"
    assert result.violations[inv.LIVENESS] == 0
    assert result.violations[inv.CLIENT_TRANSACTIONS] is None  # test_copier.py checks it


NETWORK_RECORDS = 24_000


async def run_networked(cluster: EmbeddedKafka, config: ChaosConfig) -> SystemResult:
    return await run_system(
        cluster,
        STREAMS_APP,
        config,
        records=config.records,
        duration=config.duration,
        faults=config.faults,
        network=cluster.network,
    )


def network_config(seed: int, tmp_path: Path, **overrides: object) -> ChaosConfig:
    settings: dict[str, object] = {
        "seed": seed,
        "records": NETWORK_RECORDS,
        # Back to back, each held at most 8 s (the 6 s session timeout + 2 s where the kind
        # cuts past it). The nine took 110-140 s here; input must still flow when the last
        # one strikes, so the duration is an upper bound: once the last fault has recovered,
        # the generator sends the rest of the input at once (Generator.hurry).
        "duration": 160.0,
        "faults": len(NETWORK_FAULTS),
        "back_to_back": True,
        "max_network_down": 8.0,
        "mix": dict(NETWORK_MIX),
        "systems": (STREAMS_APP,),
        "client_check": False,
        "drain_timeout": 120.0,
        "verify_timeout": 300.0,
        "workdir": tmp_path,
        "network": True,
        "standby_replicas": 1,
        "static_membership": True,
    }
    settings.update(overrides)
    return ChaosConfig(**settings)  # type: ignore[arg-type]


@pytest.mark.cluster
@pytest.mark.network
@pytest.mark.slow
# In make test's side lane (tests/conftest.py), beside the rest: about 2.5 min, most of it
# spent holding faults and waiting for processing to resume.
async def test_streams_app_keeps_exactly_once_through_every_kind_of_network_fault(
    networked_kafka_cluster: EmbeddedKafka, tmp_path: Path
) -> None:
    """24,000 records over at most 160 s on the networked cluster (every broker, worker and the
    generator in a network namespace of its own; standbys and static membership on), while nine
    network faults strike back to back, one of each kind, every one while input still flows;
    then every invariant and every partition check."""
    seed = int(os.environ.get("CHAOS_SEED", "0")) or ChaosConfig().seed
    config = network_config(seed, tmp_path)
    result = await run_networked(networked_kafka_cluster, config)
    report = (
        f"seed {seed} (replay: CHAOS_SEED={seed})\n{summary_table({STREAMS_APP: result})}\n"
        f"{liveness_table({STREAMS_APP: result})}\n{fault_timeline(result)}"
    )
    details = examples_text({STREAMS_APP: result})
    print(report, details, sep="\n")
    assert result.records == NETWORK_RECORDS, report
    assert result.drained, f"{report}\n{details}"
    assert sorted(result.faults) == sorted(NETWORK_FAULTS), report
    # Checked, not skipped: each heal was followed by the worker and hanging-transaction checks.
    for check in (inv.HANGING_AFTER_HEAL, inv.WORKERS_AFTER_HEAL, inv.LOST_ACKED):
        assert result.violations[check] == 0, f"{check}\n{report}\n{details}"
    violations = {k: v for k, v in result.violations.items() if v}
    assert violations == {}, f"{report}\n{details}"
    assert all(r["hanging_after_heal"] is not None for r in result.fault_log), report
    assert not [r for r in result.fault_log if r["after_input"]], (
        f"faults struck too late\n{report}"
    )


@pytest.mark.cluster
@pytest.mark.network
@pytest.mark.slow
@pytest.mark.long  # make test-long: make test keeps the networked run of the safe setting
async def test_the_verifier_catches_what_partitions_do_to_an_unsafe_setting(
    networked_kafka_cluster: EmbeddedKafka, tmp_path: Path
) -> None:
    """The same kind of network faults against at-least-once (a plain producer, offsets
    committed apart from the outputs): a worker cut past the session timeout loses its
    partitions with outputs written and offsets not, and a worker cut from its coordinators
    only keeps writing outputs it can no longer commit offsets for; their successors process
    those inputs again, and the verifier reports the duplicates."""
    seed = int(os.environ.get("CHAOS_SEED", "0")) or ChaosConfig().seed
    config = network_config(
        seed,
        tmp_path,
        records=6_000,
        duration=50.0,
        faults=2,
        mix={WORKER_CUT: 1.0, COORDINATORS_CUT: 1.0},
        processing_guarantee="at_least_once",
        standby_replicas=0,
        static_membership=False,
    )
    result = await run_networked(networked_kafka_cluster, config)
    report = f"seed {seed}\n{summary_table({STREAMS_APP: result})}"
    print(report, examples_text({STREAMS_APP: result}), sep="\n")
    assert sorted(result.faults) == [COORDINATORS_CUT, WORKER_CUT], report
    assert (result.violations[inv.DUPLICATES] or 0) > 0, report
