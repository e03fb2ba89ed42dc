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
