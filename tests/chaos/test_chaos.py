"""The short chaos run inside ``make test``: streams_app keeps every invariant under faults.

50,000 records over 100 s into the EOS test topology on three worker processes and the 3-broker
cluster, while eight faults strike, one of each kind: SIGTERM, SIGKILL, a zombie (SIGSTOP past
the session timeout, then SIGCONT), a wiped state directory, a random broker kill, kills of the
transaction coordinator and of the group coordinator, and a frozen (SIGSTOPped) broker. Then
everything committed is read back and checked against invariants 1-10 and 12 (11 is
``test_copier.py``). ``make chaos`` runs the long version (a million records, 30 faults, and
faust-streaming beside it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streams_app.broker import EmbeddedKafka
from streams_app.chaos import invariants as inv
from streams_app.chaos.config import ChaosConfig
from streams_app.chaos.report import examples_text, summary_table
from streams_app.chaos.run import run_system
from streams_app.chaos.schedule import BROKER_FAULTS, KINDS
from streams_app.chaos.systems import STREAMS_APP

RECORDS = 50_000
FAULTS = len(KINDS)


@pytest.mark.cluster
@pytest.mark.slow
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
    assert sorted(result.faults) == sorted(KINDS), report
    assert sum(result.faults.get(kind, 0) for kind in BROKER_FAULTS) >= 4, report
    violations = {k: v for k, v in result.violations.items() if v}
    assert violations == {}, f"{report}\n{details}"
    assert result.violations[inv.LIVENESS] == 0
    assert result.violations[inv.CLIENT_TRANSACTIONS] is None  # test_copier.py checks it
