"""The fault schedule is a pure function of its seed and options: a failing run can be replayed."""

from __future__ import annotations

import pytest

from streams_app.chaos import schedule as kinds
from streams_app.chaos.schedule import (
    BROKER_KILL,
    DEFAULT_MIX,
    NETWORK_FAULTS,
    NETWORK_MIX,
    PROCESS_FAULTS,
    SIGKILL,
    ZOMBIE,
    Fault,
    build_schedule,
    flapping_pattern,
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
        faults=len(PROCESS_FAULTS),
        duration=100.0,
        mix=DEFAULT_MIX,
        workers=3,
        brokers=3,
        session_timeout=6.0,
        transaction_timeout=10.0,
    )
    assert sorted(f.kind for f in faults) == sorted(PROCESS_FAULTS)
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


def test_a_seed_of_the_process_kinds_replays_as_before_the_network_kinds() -> None:
    """CHAOS.md's seed 112383 (drawn before network kinds existed) still gives its schedule:
    network kinds draw their variant only for themselves."""
    first = schedule(112383)[:3]
    assert [(f.kind, f.at, f.worker, f.node, f.down) for f in first] == [
        (ZOMBIE, 59.64, 1, 3, 13.84),
        (kinds.GROUP_COORDINATOR_KILL, 68.09, 0, 3, 2.51),
        (ZOMBIE, 136.05, 2, 2, 10.68),
    ]
    assert all(f.variant == 0 for f in schedule(112383))


def test_network_kinds_hold_as_long_as_their_definition_says() -> None:
    faults = schedule(3, faults=400, mix={**DEFAULT_MIX, **NETWORK_MIX})
    by_kind: dict[str, list[Fault]] = {}
    for f in faults:
        by_kind.setdefault(f.kind, []).append(f)
    assert set(by_kind) >= set(NETWORK_FAULTS)
    # Longer than the session timeout (the group moves on), and shorter (it keeps them).
    assert all(f.down > 6.0 for f in by_kind[kinds.WORKER_CUT] + by_kind[kinds.COORDINATORS_CUT])
    assert all(f.down <= 3.0 for f in by_kind[kinds.WORKER_BLIP])
    assert {f.variant for f in by_kind[kinds.ONE_WAY_CUT]} == {0, 1, 2}
    assert {f.variant for f in by_kind[kinds.SLOW_LINK]} == set(range(len(kinds.SLOW_LINK_RATES)))
    assert all(f.by_node == (f.variant == 2) for f in by_kind[kinds.ONE_WAY_CUT])


def test_a_flapping_pattern_alternates_and_fills_the_fault() -> None:
    fault = Fault(1, kinds.FLAPPING_LINK, 0.0, 0, 1, down=12.0, variant=99)
    pattern = flapping_pattern(fault)
    assert pattern == flapping_pattern(fault)
    assert [cut for cut, _ in pattern] == [i % 2 == 0 for i in range(len(pattern))]
    assert abs(sum(seconds for _, seconds in pattern) - 12.0) < 1e-9
    assert all(0 < seconds <= 2.5 for _, seconds in pattern)


def test_back_to_back_and_capped_for_short_runs() -> None:
    faults = build_schedule(
        seed=5,
        faults=len(NETWORK_FAULTS),
        duration=160.0,
        mix=NETWORK_MIX,
        workers=3,
        brokers=3,
        session_timeout=6.0,
        transaction_timeout=10.0,
        back_to_back=True,
        max_down=10.0,
    )
    assert sorted(f.kind for f in faults) == sorted(NETWORK_FAULTS)
    assert {f.at for f in faults} == {8.0}
    assert all(f.down <= 10.0 for f in faults)
    assert all(f.down > 6.0 for f in faults if f.kind in (kinds.WORKER_CUT, kinds.COORDINATORS_CUT))


def test_network_kinds_need_the_networked_mode() -> None:
    from streams_app.chaos.config import ChaosConfig

    with pytest.raises(ValueError, match="--network"):
        ChaosConfig(mix={kinds.WORKER_CUT: 1.0}).validate()
    ChaosConfig(mix={kinds.WORKER_CUT: 1.0}, network=True).validate()


def test_every_kind_at_least_so_often_when_asked() -> None:
    mix = {**DEFAULT_MIX, **NETWORK_MIX}
    faults = build_schedule(
        seed=9,
        faults=120,
        duration=10_800.0,
        mix=mix,
        workers=3,
        brokers=3,
        session_timeout=6.0,
        transaction_timeout=10.0,
        min_per_kind=4,
    )
    counts = {k: sum(1 for f in faults if f.kind == k) for k in mix}
    assert len(faults) == 120 and min(counts.values()) >= 4, counts
