"""A stream hands out waiting records without a coroutine per record (app.stream).

The fast path must behave exactly as the awaited one: the current event is set for each
record, processors (including one added while iterating) apply, SKIP drops a value, and an
empty inbox is waited on.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from streams_app.app.context import Event, current_event
from streams_app.app.stream import SKIP, Stream


def _event(offset: int, value: Any) -> Event:
    return Event("t", 0, offset, 0, f"k{offset}", value, (), None, None, None, None, None)


async def test_items_sets_the_current_event_and_applies_processors_added_on_the_way() -> None:
    stream = Stream(cast(Any, None), "t")
    for offset in range(4):
        stream.feed(_event(offset, offset))
    seen = []
    async for key, value in stream.items():
        event = current_event.get()
        assert event is not None and event.key == key
        seen.append((key, value))
        if len(seen) == 2:
            stream.add_processor(lambda v: SKIP if v == 2 else v * 10)
        if len(seen) == 3:
            break
    assert seen == [("k0", 0), ("k1", 1), ("k3", 30)]


async def test_values_and_events_wait_for_records_fed_later() -> None:
    stream = Stream(cast(Any, None), "t")
    values = aiter(stream)
    waiting = asyncio.ensure_future(anext(values))
    await asyncio.sleep(0)
    assert not waiting.done()  # nothing fed yet: it waits
    stream.feed(_event(0, "a"))
    stream.feed(_event(1, "b"))
    assert await waiting == "a"
    assert await anext(values) == "b"  # already waiting: no wait
    stream.feed(_event(2, "c"))
    events = stream.events()
    event = await anext(events)
    assert (event.offset, event.value) == (2, "c")
    assert current_event.get() is event
