"""The chaos generator's pacing: records spread over the duration, sent at once after ``hurry``
(a back-to-back schedule whose faults are over), none after ``stop``. The producer is a stand-in
that acknowledges every send at once: what is tested is when the generator sends, not Kafka (the
chaos runs themselves send through a real broker)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams_app.aio import within
from streams_app.chaos.generator import Generator


class Acks:
    """Stands in for the producer: every record acknowledged at once, offsets in order."""

    def __init__(self) -> None:
        self.offset = 0

    async def stop(self) -> None:
        return None


def paced(records: int, duration: float, monkeypatch: pytest.MonkeyPatch) -> Generator:
    generator = Generator("unused:9092", "data", records=records, duration=duration, seed=1)
    producer = Acks()

    async def started() -> Any:
        return producer

    async def send(_producer: Any, chunk: list[tuple[int, int]]) -> int:
        for key, value in chunk:
            generator.result.acked.add(0, producer.offset, key, value)
            producer.offset += 1
        return 0

    monkeypatch.setattr(generator, "_producer", started)
    monkeypatch.setattr(generator, "_send_chunk", send)
    return generator


async def test_records_are_spread_over_the_duration(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = paced(1_000, 100.0, monkeypatch)  # 10 records a second
    run = asyncio.ensure_future(generator.run())
    await asyncio.sleep(0.5)
    assert 0 < generator.result.sent < 100
    generator.stop()
    result = await run
    assert result.sent < 100


async def test_hurry_sends_the_rest_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = paced(1_000, 100.0, monkeypatch)
    run = asyncio.ensure_future(generator.run())
    await asyncio.sleep(0.3)
    assert generator.result.sent < 100
    generator.hurry()
    result = await within(run, 5.0)
    assert result.sent == 1_000 and len(result.acked) == 1_000
    assert result.seconds < 5.0


async def test_hurry_before_the_start_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    generator = paced(500, 100.0, monkeypatch)
    generator.hurry()
    result = await within(generator.run(), 5.0)
    assert result.sent == 500
