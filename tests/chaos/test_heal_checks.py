"""The hanging-transaction check after a heal reads only a whole network (unit test).

Found by the short networked run: the check of one fault came due while the next fault (a
markers cut between two brokers) held; the broker cut off from the active controller had lost
its leaderships without knowing it and answered DescribeProducers with transactions whose
markers the new leaders already had, so nine "hanging" transactions were reported that the run
itself showed resolved (no open transaction at the end).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams_app.chaos import partitions
from streams_app.chaos.partitions import Cut, NetworkFaults


class FakeNetwork:
    def block(self, src: str, dst: str) -> None:
        pass

    def unblock(self, src: str, dst: str) -> None:
        pass


def faults() -> NetworkFaults:
    nothing: Any = None
    return NetworkFaults(FakeNetwork(), nothing, nothing, [], nothing, bound=1.0)  # type: ignore[arg-type]


async def test_the_check_waits_for_the_network_to_be_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitions, "WHOLE_FOR", 0.2)
    checker = faults()
    reads: list[bool] = []

    async def hanging(label: str = "end", attempts: int = 3) -> list[str]:
        reads.append(checker._cut_holds)
        return []

    checker.hanging = hanging  # type: ignore[method-assign]
    cut = Cut(blocks=[("w0", "b1")])
    checker._apply(cut)
    check = asyncio.create_task(checker.hanging_while_whole("x"))
    await asyncio.sleep(0.6)
    assert reads == [] and not check.done(), "read while a cut held"
    checker._heal(cut)
    await asyncio.sleep(0.05)
    assert reads == [], "read before the network was whole for long enough"
    assert await check == []
    assert reads == [False]


async def test_a_cut_during_the_read_means_reading_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(partitions, "WHOLE_FOR", 0.0)
    checker = faults()
    cut = Cut(blocks=[("w0", "b1")])
    calls = 0

    async def hanging(label: str = "end", attempts: int = 3) -> list[str]:
        nonlocal calls
        calls += 1
        if calls == 1:  # the next fault strikes and heals while this read is under way
            checker._apply(cut)
            checker._heal(cut)
            return ["stale"]
        return []

    checker.hanging = hanging  # type: ignore[method-assign]
    assert await checker.hanging_while_whole("x") == []
    assert calls == 2


def _record(kind: str, from_strike: float | None, from_heal: float | None = None) -> Any:
    from streams_app.chaos.faults import FaultRecord
    from streams_app.chaos.partitions import HealReport
    from streams_app.chaos.schedule import NETWORK_FAULTS, Fault

    record = FaultRecord(Fault(1, kind, 0.0, 0, 1, 5.0), resume_seconds=from_strike)
    if kind in NETWORK_FAULTS:
        record.after_heal = HealReport(resume_after_heal=from_heal)
    return record


def test_liveness_is_judged_from_the_strike_or_from_the_heal_by_kind() -> None:
    from streams_app.chaos import schedule as kinds
    from streams_app.chaos.run import resume_by_kind

    # Routed around (the group gives the cut worker's partitions away): from the strike.
    assert _record(kinds.WORKER_CUT, 12.0, 0.5).judged_resume == 12.0
    # Nobody can stand in for the cut broker: from the heal.
    assert _record(kinds.BROKER_UNREACHABLE, 16.0, 7.0).judged_resume == 7.0
    assert _record(kinds.BROKER_UNREACHABLE, None, None).judged_resume is None
    assert _record(kinds.SIGKILL, 9.0).judged_resume == 9.0
    table = resume_by_kind(
        [
            _record(kinds.MARKERS_CUT, 10.0, 3.0),
            _record(kinds.MARKERS_CUT, 20.0, 13.0),
            _record(kinds.SIGKILL, 9.0),
            _record(kinds.WORKER_CUT, None, None),
        ]
    )
    assert table[kinds.MARKERS_CUT] == {
        "faults": 2,
        "max_from_strike": 20.0,
        "max_from_heal": 13.0,
        "judged": "heal",
    }
    assert table[kinds.SIGKILL]["max_from_heal"] is None
    assert table[kinds.SIGKILL]["judged"] == "strike"
    assert table[kinds.WORKER_CUT]["max_from_strike"] is None  # never resumed: shown as such
