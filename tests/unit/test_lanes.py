"""make test's lanes (tests/lanes.py): the side lane holds every case on the networked cluster,
and nothing else lands there by a loose prefix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.lanes import SIDE_LANE, lane

ROOT = Path(__file__).resolve().parents[2]


def collected(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--long=also", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if "::" in line]


def test_every_networked_case_is_in_the_side_lane_and_the_rest_in_the_main_one() -> None:
    networked = collected("-m", "network", "tests/chaos", "tests/runtime")
    assert networked, "no case marked network collected"
    assert [n for n in networked if lane(n) != "side"] == []
    side = [n for n in collected("tests/chaos", "tests/runtime") if lane(n) == "side"]
    outage = [n for n in side if n.startswith("tests/runtime/test_outage.py::")]
    # The side lane is the networked cases and the outage file: nothing else.
    assert sorted(side) == sorted(set(networked) | set(outage))
    assert len(outage) == 3
    # Each prefix names something that exists.
    for prefix in SIDE_LANE:
        assert any(n.startswith(prefix) for n in side), prefix
