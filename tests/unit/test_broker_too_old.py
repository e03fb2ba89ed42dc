"""The KIP-447 capability check, fed the ApiVersions of an old broker (no such broker here)."""

from __future__ import annotations

import pytest

from streams_app.errors import BrokerTooOld
from streams_app.kafka.admin import KafkaAdmin

TXN_OFFSET_COMMIT, OFFSET_FETCH = 28, 9


class FakeVersionsAdmin(KafkaAdmin):
    def __init__(self, versions: dict[int, tuple[int, int]]) -> None:
        self._versions = versions

    async def api_versions(self) -> dict[str, dict[int, tuple[int, int]]]:
        return {"old-broker:9092": self._versions}


async def test_broker_without_txn_offset_commit_v3_is_refused() -> None:
    # Kafka 2.4: TxnOffsetCommit up to v2, OffsetFetch up to v6.
    admin = FakeVersionsAdmin({TXN_OFFSET_COMMIT: (0, 2), OFFSET_FETCH: (0, 6)})
    with pytest.raises(BrokerTooOld, match=r"old-broker:9092.*KIP-447.*at_least_once"):
        await admin.check_exactly_once_support()


async def test_broker_with_kip_447_passes() -> None:
    admin = FakeVersionsAdmin({TXN_OFFSET_COMMIT: (0, 4), OFFSET_FETCH: (0, 9)})
    await admin.check_exactly_once_support()
