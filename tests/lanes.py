"""``make test``'s two lanes: ``pytest -n 2 --lanes`` (pytest-xdist, tests/conftest.py).

A few cases spend minutes waiting on purpose: the only broker away for two minutes under load,
and the networked cluster's faults, each held while the schedule waits for processing to
resume. Run one after another with the rest they cost the suite's wall time, not the machine's
CPU; in a lane of their own they use the second core while the other lane runs everything
else. The main lane keeps the order of a plain run (pytest's collection order, one process),
so every other case runs exactly as it does under a plain ``pytest``; the side lane's cases
bring their own brokers (``own_broker``, the networked cluster) and share nothing with it.

The lanes are pytest-xdist work units: one scope per lane, so each worker gets one lane whole
(xdist's ``--dist loadgroup`` would do this from ``xdist_group`` marks, but it renames node
ids in a way pytest 9.2 no longer honours, so the scope is decided here, from the node id).
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: Node-id prefixes of the side lane's cases. tests/unit/test_lanes.py checks that every case
#: marked ``network`` (the networked cluster's) is here.
SIDE_LANE = (
    "tests/runtime/test_outage.py::",
    "tests/chaos/test_netns.py::",
    "tests/chaos/test_partitions.py::",
    "tests/chaos/test_chaos.py::test_streams_app_keeps_exactly_once_through_every_kind_of_network",
    "tests/chaos/test_chaos.py::test_the_verifier_catches_what_partitions_do",
)


def lane(nodeid: str) -> str:
    """``side`` or ``main``."""
    return "side" if nodeid.startswith(SIDE_LANE) else "main"


class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """Each lane is one work unit, run whole and in order by one worker."""

    def _split_scope(self, nodeid: str) -> str:
        return lane(nodeid)
