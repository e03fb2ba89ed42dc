"""The garbage collector's young generation while workers run (runtime.gc_tuning)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from streams_app.runtime.gc_tuning import young_generation


@pytest.fixture(autouse=True)
def known_thresholds() -> Iterator[tuple[int, int, int]]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield (700, 10, 10)
    gc.set_threshold(*before)


def test_a_worker_raises_the_young_threshold_and_gives_it_back() -> None:
    with young_generation(10_000):
        assert gc.get_threshold() == (10_000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_zero_leaves_the_collector_alone() -> None:
    with young_generation(0):
        assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_workers_in_one_process_share_it_until_the_last_one_stops() -> None:
    first, second = young_generation(10_000), young_generation(5_000)
    first.__enter__()
    second.__enter__()
    assert gc.get_threshold()[0] == 10_000  # the first worker's setting
    first.__exit__(None, None, None)  # stops before the second: the second still runs
    assert gc.get_threshold()[0] == 10_000
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_given_back_when_the_worker_fails() -> None:
    with pytest.raises(RuntimeError), young_generation(10_000):
        raise RuntimeError("agent failed")
    assert gc.get_threshold() == (700, 10, 10)
