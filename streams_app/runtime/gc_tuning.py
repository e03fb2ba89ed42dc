"""The cyclic garbage collector while workers run: a larger young generation.

Why: CPython collects its youngest generation every 700 net allocations of container objects.
A worker allocates several per record (the event, coroutine frames, header lists, tuples), and
reference counting frees almost all of them at once: they form no cycles, so the collections
find next to nothing. On the 200,000-record exactly-once count of ``make bench`` they took
about 5% of the worker's CPU (0.126 s of 2.67 s, 433 collections). At a threshold of 10,000 the
young generation is collected 14 times less often and the worker runs ~6% less CPU per record
(BENCHMARKS.md). What it costs: cyclic garbage (exceptions with their tracebacks, mostly) lives
until 10,000 allocations instead of 700, a few megabytes at most; in the state benchmark the
RSS stayed within one run's own spread (docs/memory.md).

The older generations keep Python's thresholds: they count collections of the younger one, so
they too run 14 times less often, and a full collection (which walks every tracked object, a
cost that grows with the worker's heap) stays as rare relative to the work done.

Settings are per worker but the collector is per process: several workers in one process (the
test harness) share one setting, the first worker's, until the last of them stops, and then
the process gets its thresholds back.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_holders = 0
_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def young_generation(threshold: int) -> Iterator[None]:
    """Collect the young generation every ``threshold`` allocations while inside (0: leave the
    collector as it is)."""
    global _holders, _saved
    if threshold <= 0:
        yield
        return
    if _holders == 0:
        _saved = gc.get_threshold()
        gc.set_threshold(threshold, *_saved[1:])
    _holders += 1
    try:
        yield
    finally:
        _holders -= 1
        if _holders == 0 and _saved is not None:
            gc.set_threshold(*_saved)
            _saved = None
