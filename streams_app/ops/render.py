"""Plain-text rendering for the operator commands: aligned tables, times, durations.

Nothing here prints record keys or values: the tools show offsets, sizes, ids and states only.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str) -> float:
    """Seconds from ``500ms``, ``30s``, ``5m``, ``1h``, ``2d`` or a bare number of seconds."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a duration; use e.g. 500ms, 30s, 5m, 1h")
    return float(match.group(1)) * _UNITS[match.group(2)]


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])] + [row[-1]]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def utc(ms: int) -> str:
    """A Kafka timestamp (ms since the epoch) as ISO 8601 UTC; ``-`` for none (negative)."""
    if ms < 0:
        return "-"
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def duration(ms: float | None) -> str:
    """``850ms``, ``12.3s``, ``4m05s``, ``2h10m``; ``-`` for None."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    return f"{hours // 24}d{hours % 24:02d}h"


def partitions(tps: Iterable[tuple[str, int]], limit: int = 6) -> str:
    """``topic[0,1],other[3]``, at most ``limit`` topics then ``+N more``."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(tps):
        grouped.setdefault(topic, []).append(partition)
    if not grouped:
        return "-"
    parts = [f"{topic}[{','.join(map(str, ps))}]" for topic, ps in grouped.items()]
    if len(parts) > limit:
        return ",".join(parts[:limit]) + f" +{len(parts) - limit} more"
    return ",".join(parts)
