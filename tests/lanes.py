"""``make test``'s two lanes: ``pytest -n 2 --lanes`` (pytest-xdist, tests/conftest.py).

A few cases spend minutes waiting on purpose: the only broker away for two minutes under load,
and the networked cluster's faults, each held while the schedule waits for processing to
resume. Run one after another with the rest they cost the suite's wall time, not the machine's
CPU; in a lane of their own they use the second core while the other lane runs everything
else. That lane also takes the suites that start a server of their own beside the single
broker, whole: the 3-node cluster's (the chaos suite, the cluster faults, the skipped
transaction markers), Spark's and PostgreSQL's. Each such server then starts in one lane only,
and the lanes take about as long as each other (the main lane alone was 20 of the run's 21
minutes before). The main lane keeps the order of a plain run (pytest's collection order, one
process), so every case runs exactly as it does under a plain ``pytest``; each lane is one
process with session fixtures of its own (a case of the side lane that needs the single
broker gets the side lane's), so the lanes share nothing but the CPU.

The lanes are pytest-xdist work units: one scope per lane, so each worker gets one lane whole
(xdist's ``--dist loadgroup`` would do this from ``xdist_group`` marks, but it renames node
ids in a way pytest 9.2 no longer honours, so the scope is decided here, from the node id).
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

#: Node-id prefixes of the side lane's cases. tests/unit/test_lanes.py checks that every case
#: marked ``network`` (the networked cluster's) or using the 3-node cluster, Spark or
#: PostgreSQL is here.
SIDE_LANE = (
    "tests/chaos/",
    "tests/foundation/test_cluster_faults.py::",
    "tests/postgres/",
    "tests/runtime/test_outage.py::",
    "tests/runtime/test_skipped_marker.py::",
    "tests/spark/",
)


def lane(nodeid: str) -> str:
    """``side`` or ``main``."""
    return "side" if nodeid.startswith(SIDE_LANE) else "main"


class LaneScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """Each lane is one work unit, run whole and in order by one worker."""

    def _split_scope(self, nodeid: str) -> str:
        return lane(nodeid)
