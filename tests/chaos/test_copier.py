"""Invariant 11 on its own: our KIP-447 client layer under broker bounces, Jepsen style."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams_app.broker import EmbeddedKafka
from streams_app.chaos.config import ChaosConfig
from streams_app.chaos.copier import STREAMS_APP_CLIENT
from streams_app.chaos.run import run_client_check


@pytest.mark.cluster
@pytest.mark.long  # make test-long; make test keeps tests/kafka's KIP-447 client cases
async def test_transactional_copiers_lose_and_duplicate_nothing_under_broker_bounces(
    kafka_cluster: EmbeddedKafka, unique: str, tmp_path: Path
) -> None:
    config = ChaosConfig(
        seed=11,
        client_records=8_000,
        client_duration=40.0,
        client_faults=3,
        systems=(),
        workdir=tmp_path,
    )
    result = await run_client_check(kafka_cluster, STREAMS_APP_CLIENT, config, suffix=unique)
    assert result.drained, result.asdict()
    assert result.violations == 0, result.asdict()
    # The workload did what it claims: many transactions, about a third of them aborted.
    total = result.transactions_committed + result.transactions_aborted
    assert total > 20 and result.transactions_aborted > total / 6, result.asdict()
    # 3 broker bounces, and a copier killed, one stopped, one frozen into a zombie.
    assert sum(result.faults.values()) == 6, result.asdict()
