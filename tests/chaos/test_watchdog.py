"""A stuck phase of a chaos run fails with where it is stuck, not as the runner's timeout."""

from __future__ import annotations

import asyncio

import pytest

from streams_app.chaos.watchdog import PhaseTimeout, bounded


async def _innermost(never: asyncio.Event) -> None:
    await never.wait()


async def _outer(never: asyncio.Event) -> None:
    await _innermost(never)


async def test_a_stuck_phase_names_itself_and_its_innermost_await() -> None:
    never = asyncio.Event()
    with pytest.raises(PhaseTimeout) as raised:
        await bounded("verification", _outer(never), 0.2, lambda: "node 1: state T")
    message = str(raised.value)
    assert message.startswith("chaos: verification did not finish in 0s")
    # The whole chain, down to the coroutine that waits: not just the outermost frame.
    assert "in _outer" in message
    assert "in _innermost" in message
    assert "node 1: state T" in message


async def test_a_phase_that_finishes_returns_its_result_and_a_failing_one_raises() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def broken() -> None:
        raise ValueError("bad")

    assert await bounded("quick", answer(), 5.0) == 42
    with pytest.raises(ValueError, match="bad"):
        await bounded("broken", broken(), 5.0)


async def test_a_failing_context_does_not_hide_the_hang() -> None:
    def context() -> str:
        raise OSError("no /proc")

    with pytest.raises(PhaseTimeout, match="context unavailable"):
        await bounded("teardown", asyncio.Event().wait(), 0.1, context)
