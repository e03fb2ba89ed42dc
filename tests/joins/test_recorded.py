"""A recorded Kafka Streams 4.3.1 run of every join kind (``recorded/``, written by
``test_vs_kafka_streams.py`` with ``JOINS_RECORD``), checked again without a broker: every row
Kafka Streams wrote is what the oracle and models give, or one of the documented differences,
and each difference the input provokes is there. It keeps the models honest against real
Kafka Streams answers at unit-test speed; the live test checks a fresh run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.joins.compare import KINDS, check, check_differences
from tests.joins.record import load_record

RECORDS = sorted((Path(__file__).parent / "recorded").glob("*.json"))


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_recorded_kafka_streams_run_is_explained(path: Path) -> None:
    data, outputs, partitions, record = load_record(path)
    assert record["source"].startswith("Kafka Streams")
    for kind in KINDS:
        outcome = check(kind, outputs[kind], data, reference=True, partitions=partitions[kind])
        assert outcome.rows > 0, kind
        check_differences(outcome)


def test_a_record_exists() -> None:
    assert RECORDS, "no recorded Kafka Streams run in tests/joins/recorded"
