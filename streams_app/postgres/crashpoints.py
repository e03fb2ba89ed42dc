"""Test hook: die by SIGKILL at a named point of the sink or the relay.

A SIGKILL from outside lands wherever the process happens to be; some windows (between a Kafka
acknowledgement and the database write that records it) are too short to hit that way. Fault
tests set ``STREAMS_APP_TEST_CRASH_AT=point[:n][,point[:n]...]`` on a sink or relay process,
which then kills itself the n-th time (default 1) it reaches ``point``. Unset, a crash point
costs one dictionary lookup. Points: ``sink.before_commit``, ``sink.after_commit``,
``relay.before_commit``, ``relay.after_commit``, ``relay.after_send`` (at-least-once: a record
acknowledged, not yet marked published).
"""

from __future__ import annotations

import os
import signal

ENV = "STREAMS_APP_TEST_CRASH_AT"


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, nth = item.partition(":")
        points[name] = int(nth) if nth else 1
    return points


_armed: dict[str, int] = _parse(os.environ.get(ENV, ""))


def crash_point(name: str) -> None:
    if not _armed or name not in _armed:
        return
    _armed[name] -= 1
    if _armed[name] <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
