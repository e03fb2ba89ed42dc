"""Keyword arguments of the app's declarations: a misspelt one is refused, naming the closest.

``app.topic(vlaue_type=Order)`` used to be accepted and ignored (the topic came out untyped, with
no word said), because the declarations take Faust's keyword arguments too, many of which have
no counterpart here. Each declaration now names what it takes: its own parameters, plus the
Faust arguments it accepts and ignores (listed per declaration below, as Faust 0.15 spells
them). Anything else raises :class:`UnknownArgument` with the closest valid name, as ``App()``
does for settings.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

from streams_app.errors import TopologyError

#: Faust's arguments that streams_app accepts and ignores, per declaration.
FAUST_TOPIC = frozenset({"acks", "maxsize", "allow_empty", "loop"})
FAUST_CHANNEL = frozenset({"schema", "loop"})
FAUST_AGENT = frozenset({"supervisor_strategy", "on_error"})
FAUST_TABLE = frozenset(
    {
        "store",
        "on_recover",
        "on_changelog_event",
        "recovery_buffer_size",
        "standby_buffer_size",
        "extra_topic_configs",
        "recover_callbacks",
        "options",
        "use_partitioner",
        "is_global",
        "synchronize_all_active_partitions",
        "start_manager",
    }
)
FAUST_TIMER = frozenset({"traced", "max_drift_correction"})
FAUST_TASK = frozenset({"traced"})


class UnknownArgument(TopologyError, TypeError):
    """A declaration got a keyword argument it does not take (a TypeError too, as Python's)."""


@cache
def _parameters(fun: Callable[..., Any]) -> frozenset[str]:
    return frozenset(
        name
        for name, p in inspect.signature(fun).parameters.items()
        if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and name != "self"
    )


def refuse_unknown(
    where: str,
    given: Mapping[str, Any],
    *takes: Callable[..., Any],
    ignored: Iterable[str] = (),
) -> None:
    """Raise :class:`UnknownArgument` for a keyword in ``given`` that none of the functions
    ``takes`` names and that is not an ``ignored`` Faust argument."""
    allowed = frozenset(ignored).union(*(_parameters(f) for f in takes))
    for name in given:
        if name in allowed:
            continue
        close = difflib.get_close_matches(name, sorted(allowed), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"it takes {', '.join(sorted(allowed))}"
        raise UnknownArgument(f"{where} got an unknown keyword argument {name!r}: {hint}")
