"""The plugin's broker keeps records whatever their time (docs/testing.md, "Stream time")."""

from __future__ import annotations

import os

import pytest

from streams_app.broker import TEST_SETTINGS
from streams_app.kafka.ops_admin import OpsAdmin

pytestmark = pytest.mark.kafka


@pytest.mark.skipif(
    bool(os.environ.get("STREAMS_APP_TEST_BOOTSTRAP")),
    reason="a broker of the user's keeps its own retention settings",
)
async def test_the_session_broker_runs_with_time_retention_off(bootstrap_servers: str) -> None:
    # Records written with a time years old (the harness examples, the differential data)
    # would otherwise be deleted by the broker's retention check at a random moment of a test.
    ops = await OpsAdmin(bootstrap_servers).start()
    try:
        for name, value in TEST_SETTINGS.items():
            assert await ops.broker_config(name) == value, name
    finally:
        await ops.close()
