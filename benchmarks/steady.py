"""Steady state: what a run does between 10 % and 90 % of its input, and the CPU it spends.

A stream processor runs for weeks, so the figure that counts is its rate once it is warm
(the JVM's JIT compiled, caches filled, the group settled), not the first seconds of a run.
The benchmark polls each run's committed offsets and its processes' CPU every
``POLL_INTERVAL`` seconds; :class:`Progress` turns those samples into the time the group's
committed offsets crossed 10 % and 90 % of the input, and the CPU seconds spent in between.

Committed offsets move in steps, one per commit (every 100 ms under exactly-once, 1 s under
at-least-once). The steps are joined by straight lines (each step's records were processed in
the time since the step before), so a crossing falls between the two commits around it, not on
the poll that first saw the later one; at both ends of the window alike.

Also here: the CPU time of a process tree (a supervisor and its children, a JVM and its
threads) from ``/proc``, and CPU pinning (``sched_setaffinity``) for the per-core mode.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seconds between two samples of a run's committed offsets and CPU.
POLL_INTERVAL = 0.1
#: The steady-state window: from this share of the input committed ...
STEADY_FROM = 0.1
#: ... to this one.
STEADY_TO = 0.9


def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of a process (all its threads) so far (None if it is gone)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _clock_ticks()


def children(pid: int) -> list[int]:
    """The process's children (every thread's), from ``/proc/<pid>/task/<tid>/children``."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        found += [int(p) for p in text.split()]
    return found


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    todo = [pid]
    while todo:
        for child in children(todo.pop()):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu_seconds(roots: Sequence[int]) -> float | None:
    """CPU seconds of ``roots`` and every process below them (a supervisor's workers); None if
    a root is gone. A child that exited meanwhile drops out of the sum: a steady run has none."""
    total = 0.0
    for root in roots:
        own = cpu_seconds(root)
        if own is None:
            return None
        total += own
        total += sum(cpu_seconds(p) or 0.0 for p in descendants(root))
    return total


def pin(pid: int, cpus: Iterable[int]) -> None:
    """Every thread of ``pid`` onto ``cpus``; threads it starts later inherit it (a JVM's)."""
    wanted = set(cpus)
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        tids = [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, wanted)
        except (ProcessLookupError, PermissionError):
            continue  # a thread that ended meanwhile


#: The CPUs this benchmark may use, read before it pins anything (itself included).
MACHINE_CPUS: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0)))


def all_cpus() -> list[int]:
    return list(MACHINE_CPUS)


@dataclass
class Progress:
    """One run's samples: (wall time, records committed, system CPU s, broker CPU s)."""

    records: int
    samples: list[tuple[float, int, float | None, float | None]] = field(default_factory=list)

    def add(self, at: float, committed: int, cpu: float | None, broker: float | None) -> None:
        self.samples.append((at, committed, cpu, broker))

    def committed(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def steps(self) -> list[tuple[float, int, float | None, float | None]]:
        """The samples that saw a new committed total (each step once, when first seen), with
        the first sample before any commit."""
        out: list[tuple[float, int, float | None, float | None]] = []
        for sample in self.samples:
            if not out or sample[1] != out[-1][1]:
                out.append(sample)
        return out

    def crossing(self, records: float) -> tuple[float, float | None, float | None] | None:
        """(time, system CPU, broker CPU) when ``records`` were committed, by the straight line
        between the commits around it."""
        steps = self.steps()
        for (t0, c0, w0, b0), (t1, c1, w1, b1) in itertools.pairwise(steps):
            if c0 < records <= c1:
                f = (records - c0) / (c1 - c0)
                return t0 + f * (t1 - t0), _between(w0, w1, f), _between(b0, b1, f)
        return None

    def steady(self) -> dict[str, Any] | None:
        """The steady-state window's figures, or None if the run did not get through it."""
        lo, hi = STEADY_FROM * self.records, STEADY_TO * self.records
        start, end = self.crossing(lo), self.crossing(hi)
        if start is None or end is None or end[0] <= start[0]:
            return None
        seconds = end[0] - start[0]
        records = hi - lo
        cpu = None if start[1] is None or end[1] is None else end[1] - start[1]
        broker = None if start[2] is None or end[2] is None else end[2] - start[2]
        return {
            "from": STEADY_FROM,
            "to": STEADY_TO,
            "seconds": round(seconds, 3),
            "records": round(records),
            "records_per_s": round(records / seconds),
            "worker_cpu_s": None if cpu is None else round(cpu, 3),
            "broker_cpu_s": None if broker is None else round(broker, 3),
            # The system's own processes only: what the CPU target is about.
            "worker_cpu_us_per_record": None if cpu is None else round(cpu * 1e6 / records, 2),
            "broker_cpu_us_per_record": None
            if broker is None
            else round(broker * 1e6 / records, 2),
            # CPUs the system kept busy on average (1.0: one core all the time).
            "worker_cores": None if cpu is None else round(cpu / seconds, 2),
        }

    def timeline(self, since: float, points: int = 120) -> list[list[float | None]]:
        """[seconds since ``since``, records committed, system CPU s] at up to ``points``
        steps: the run's progress, kept with its result to recompute or plot."""
        steps = self.steps()
        if len(steps) > points:
            stride = len(steps) / points
            steps = [steps[int(i * stride)] for i in range(points)] + [steps[-1]]
        return [
            [round(t - since, 3), c, None if w is None else round(w, 3)] for t, c, w, _ in steps
        ]


def _between(a: float | None, b: float | None, f: float) -> float | None:
    return None if a is None or b is None else a + f * (b - a)
