"""The fault schedule is a pure function of its seed and options: a failing run can be replayed."""

from __future__ import annotations

import pytest

from streams_app.chaos.schedule import (
    BROKER_KILL,
    DEFAULT_MIX,
    KINDS,
    SIGKILL,
    ZOMBIE,
    Fault,
    build_schedule,
    parse_mix,
)


def schedule(seed: int, faults: int = 30, mix: dict[str, float] | None = None) -> list[Fault]:
    return list(
        build_schedule(
            seed=seed,
            faults=faults,
            duration=900.0,
            mix=mix or DEFAULT_MIX,
            workers=3,
            brokers=3,
            session_timeout=6.0,
            transaction_timeout=10.0,
        )
    )


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    assert schedule(42) == schedule(42)
    assert schedule(42) != schedule(43)


def test_every_kind_of_the_mix_strikes_when_there_are_enough_faults() -> None:
    faults = build_schedule(
        seed=1,
        faults=len(KINDS),
        duration=100.0,
        mix=DEFAULT_MIX,
        workers=3,
        brokers=3,
        session_timeout=6.0,
        transaction_timeout=10.0,
    )
    assert sorted(f.kind for f in faults) == sorted(KINDS)
    assert [f.at for f in faults] == sorted(f.at for f in faults)
    assert all(5.0 <= f.at <= 85.0 for f in faults)


def test_zombies_freeze_past_the_session_timeout() -> None:
    zombies = [f for f in schedule(7, faults=60) if f.kind == ZOMBIE]
    assert zombies
    assert all(f.down > 6.0 for f in zombies)


def test_mix_parsing() -> None:
    assert parse_mix("sigkill=3, broker_kill") == {SIGKILL: 3.0, BROKER_KILL: 1.0}
    assert {f.kind for f in schedule(1, 10, parse_mix("sigkill"))} == {SIGKILL}
    with pytest.raises(ValueError, match="unknown fault kind"):
        parse_mix("sigsegv")
    with pytest.raises(ValueError, match="empty"):
        parse_mix("sigkill=0")
