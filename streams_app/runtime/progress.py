"""Progress people can see: restoring tables and catching up with inputs, with a rate and an ETA.

A worker that restores a large table, or starts behind its inputs, is otherwise silent for
minutes. At ``-l info`` it now logs, every ``progress_interval`` seconds, how far it is, how fast
it goes and when it should be done; on an interactive terminal a live progress bar replaces
the periodic lines (the summary line is logged either way). Kafka Streams reports restores
through a ``StateRestoreListener``; Faust prints a restore progress line per changelog: this is
both, with an ETA.

- :class:`RestoreProgress` is the ``on_progress`` callback of
  :func:`~streams_app.state.restore.restore_partitions` (offsets of each changelog partition;
  transaction markers count as records here, one per committed transaction).
- :class:`CatchUpMonitor` samples the worker's consumer lag (last seen high watermark minus the
  next offset to process) after every assignment; a worker that starts more than one fetch
  behind reports until it is within one fetch of the end.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

from streams_app.runtime.metrics import WorkerMetrics
from streams_app.transport.base import TopicPartition

log = logging.getLogger(__name__)

#: Redraws of the progress bar per second, at most.
_BAR_HZ = 5.0
_BAR_WIDTH = 24


def _count(n: float) -> str:
    return f"{int(n):,}"


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def interactive_stream(logger: logging.Logger) -> TextIO | None:
    """stderr when it is a terminal and ``logger`` logs at info, else None (log lines then)."""
    stream = sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return None
    return stream if tty and logger.isEnabledFor(logging.INFO) else None


class ProgressBar:
    """One line on a terminal, redrawn in place (``\\r``), at most ``_BAR_HZ`` times a second."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self._clock = clock
        self._drawn_at = -math.inf
        self.visible = False

    def draw(self, label: str, done: int, total: int, suffix: str, *, force: bool = False) -> None:
        now = self._clock()
        if not force and now - self._drawn_at < 1 / _BAR_HZ:
            return
        self._drawn_at = now
        fraction = 0.0 if total <= 0 else min(1.0, done / total)
        filled = int(fraction * _BAR_WIDTH)
        bar = "#" * filled + "-" * (_BAR_WIDTH - filled)
        self.stream.write(f"\r\033[K{label} [{bar}] {fraction:4.0%} {suffix}")
        self.stream.flush()
        self.visible = True

    def clear(self) -> None:
        if self.visible:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.visible = False


class _Rate:
    """Records per second over the last report interval (the whole phase before the first)."""

    def __init__(self, now: float, done: int) -> None:
        self.started = now
        self.mark_time = now
        self.mark_done = done

    def since_mark(self, now: float, done: int) -> float:
        elapsed = now - self.mark_time
        if elapsed <= 0:
            return 0.0
        return (done - self.mark_done) / elapsed

    def mark(self, now: float, done: int) -> None:
        self.mark_time = now
        self.mark_done = done


class RestoreProgress:
    """Restore progress: the callback of one restore run, feeding the log, the bar and metrics.

    Call :meth:`begin` before a restore, pass the object as ``on_progress``, call :meth:`end`
    after it (also when it failed)."""

    def __init__(
        self,
        metrics: WorkerMetrics,
        interval: float,
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.interval = interval
        self._clock = clock
        self._bar = ProgressBar(stream, clock) if stream is not None else None
        self._started = 0.0
        self._last_line = 0.0
        self._rate: _Rate | None = None
        self._active = False

    def begin(self) -> None:
        self.metrics.restore_finished()
        self._started = self._clock()
        self._rate = None  # from the first callback: the restore's offset lookups come first
        self._active = True

    def totals(self) -> tuple[int, int, int]:
        """Records read, records to read in all, partitions."""
        states = self.metrics.restoring.values()
        done = sum(s.position - s.start for s in states)
        total = sum(s.end - s.start for s in states)
        return done, total, len(self.metrics.restoring)

    def __call__(self, tp: TopicPartition, position: int, end: int) -> None:
        self.metrics.restore_progress(tp, position, end)
        if not self._active:
            return
        now = self._clock()
        rate = self._rate
        if rate is None:  # the first partition's start: lines from one interval on
            rate = self._rate = _Rate(now, 0)
            self._last_line = now
        done, total, partitions = self.totals()
        if self._bar is not None:
            speed = rate.since_mark(now, done)
            self._bar.draw(
                "restoring",
                done,
                total,
                f"{_count(done)}/{_count(total)} records, {_count(speed)} records/s, "
                f"ETA {_duration((total - done) / speed if speed > 0 else math.inf)}",
            )
            if now - rate.mark_time >= self.interval:
                rate.mark(now, done)
            return
        if now - self._last_line < self.interval:
            return
        speed = rate.since_mark(now, done)
        remaining = total - done
        log.info(
            "restoring %d changelog partition(s): %s of %s records (%.0f%%), %s records/s, ETA %s",
            partitions,
            _count(done),
            _count(total),
            100.0 * done / total if total else 100.0,
            _count(speed),
            _duration(remaining / speed if speed > 0 else math.inf),
        )
        self._last_line = now
        rate.mark(now, done)

    def end(self, ok: bool = True) -> None:
        if not self._active:
            return
        self._active = False
        if self._bar is not None:
            self._bar.clear()
        now = self._clock()
        done, _, partitions = self.totals()
        elapsed = now - self._started
        if ok and done > 0:
            log.info(
                "restored %s records of %d changelog partition(s) in %s (%s records/s)",
                _count(done),
                partitions,
                _duration(elapsed),
                _count(done / elapsed if elapsed > 0 else done),
            )
        self._rate = None
        self.metrics.restore_finished()


#: What :class:`CatchUpMonitor` samples: (records behind, partitions), or None while unknown
#: (tasks restoring, or a partition not fetched yet).
LagProbe = Callable[[], "tuple[int, int] | None"]


class CatchUpMonitor:
    """After each assignment: report until the worker is within ``threshold`` records of the end.

    ``lag`` measures, ``processed`` is the worker's running count of processed records (the
    rate), ``assignments`` the count of assignments received (a new one starts a new phase).
    """

    def __init__(
        self,
        lag: LagProbe,
        processed: Callable[[], int],
        assignments: Callable[[], int],
        *,
        interval: float,
        threshold: int,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lag = lag
        self._processed = processed
        self._assignments = assignments
        self.interval = interval
        self.threshold = max(1, threshold)
        self._clock = clock
        self._bar = ProgressBar(stream, clock) if stream is not None else None
        self._seen_assignments = 0
        self._armed = False
        #: The phase under way: (start time, start lag, processed at start, partitions).
        self._phase: tuple[float, int, int, int] | None = None
        self._last_line = 0.0
        #: Lines logged (tests read the log; this is for the unit tests).
        self.reports = 0

    @property
    def tick_seconds(self) -> float:
        return min(self.interval, 1 / _BAR_HZ) if self._bar is not None else self.interval / 2

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            try:
                self.tick()
            except Exception as exc:  # reporting must never take the worker down
                log.debug("catch-up progress failed: %s", type(exc).__name__, exc_info=exc)

    def tick(self) -> None:
        assignments = self._assignments()
        if assignments != self._seen_assignments:
            self._seen_assignments = assignments
            self._armed = True
            if self._phase is not None:  # a rebalance in the middle: start over
                self._stop_bar()
                self._phase = None
        sample = self._lag()
        if sample is None:
            return
        lag, partitions = sample
        now = self._clock()
        if self._phase is None:
            if not self._armed:
                return
            self._armed = False
            if lag <= self.threshold:
                return
            self._phase = (now, lag, self._processed(), partitions)
            self._last_line = now
            log.info("catching up: %s records behind on %d partition(s)", _count(lag), partitions)
            self.reports += 1
            return
        started, start_lag, start_processed, _ = self._phase
        processed = self._processed() - start_processed
        elapsed = now - started
        if lag <= self.threshold:
            self._stop_bar()
            log.info(
                "caught up: %s records processed in %s (%s records/s); %s behind",
                _count(processed),
                _duration(elapsed),
                _count(processed / elapsed if elapsed > 0 else processed),
                _count(lag),
            )
            self.reports += 1
            self._phase = None
            return
        # Net drain since the phase began: processing minus what the inputs added meanwhile.
        gaining = (start_lag - lag) / elapsed if elapsed > 0 else 0.0
        eta = _duration(lag / gaining) if gaining > 0 else "? (not gaining on the inputs)"
        speed = processed / elapsed if elapsed > 0 else 0.0
        if self._bar is not None:
            self._bar.draw(
                "catching up",
                max(0, start_lag - lag),
                start_lag,
                f"{_count(lag)} behind, {_count(speed)} records/s, ETA {eta}",
            )
        elif now - self._last_line >= self.interval:
            log.info(
                "catching up: %s records behind on %d partition(s), %s records/s, ETA %s",
                _count(lag),
                partitions,
                _count(speed),
                eta,
            )
            self.reports += 1
            self._last_line = now

    def _stop_bar(self) -> None:
        if self._bar is not None:
            self._bar.clear()
