"""make test's lanes (tests/lanes.py): the side lane holds every case on the networked cluster,
and every case that starts a server of its own beside the single broker (the 3-node cluster,
Spark, PostgreSQL), so that each of those servers starts in one lane only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.lanes import SIDE_LANE, lane

ROOT = Path(__file__).resolve().parents[2]

#: Prints each collected case's node id, markers and fixtures, one JSON line each.
_COLLECT = """
import json, sys, pytest
class Listing:
    def pytest_collection_finish(self, session):
        for item in session.items:
            marks = sorted({m.name for m in item.iter_markers()})
            print("CASE " + json.dumps([item.nodeid, marks, sorted(item.fixturenames)]))
sys.exit(pytest.main(["--collect-only", "-q", "--long=also", *sys.argv[1:]], plugins=[Listing()]))
"""

#: The session fixtures that start a server only the side lane should start.
SIDE_SERVERS = {
    "kafka_cluster",
    "_kafka_cluster_session",
    "networked_kafka_cluster",
    "_networked_cluster_session",
    "spark",
    "postgres_server",
}


def collected() -> list[tuple[str, set[str], set[str]]]:
    out = subprocess.run(
        [sys.executable, "-c", _COLLECT, "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cases = [json.loads(line[5:]) for line in out.splitlines() if line.startswith("CASE ")]
    return [(nodeid, set(marks), set(fixtures)) for nodeid, marks, fixtures in cases]


def test_the_networked_cases_and_the_own_servers_are_in_the_side_lane_the_rest_main() -> None:
    cases = collected()
    assert len(cases) > 1000, "the whole suite was not collected"
    networked = [n for n, marks, _ in cases if "network" in marks]
    assert networked, "no case marked network collected"
    assert [n for n in networked if lane(n) != "side"] == []
    with_servers = [n for n, _, fixtures in cases if fixtures & SIDE_SERVERS]
    assert [n for n in with_servers if lane(n) != "side"] == []
    # Each kind of server has cases (else the fixture names above went stale).
    for server in ("kafka_cluster", "networked_kafka_cluster", "spark", "postgres_server"):
        assert any(server in fixtures for _, _, fixtures in cases), server
    side = [n for n, _, _ in cases if lane(n) == "side"]
    outage = [n for n in side if n.startswith("tests/runtime/test_outage.py::")]
    assert len(outage) == 3
    # Each prefix names something that exists, and the main lane keeps most of the suite.
    for prefix in SIDE_LANE:
        assert any(n.startswith(prefix) for n in side), prefix
    assert len(side) < len(cases) / 2
