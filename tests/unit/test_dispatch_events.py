"""The dispatcher makes each record's Event slot by slot, without ``Event.__init__``
(``runtime/worker/records.py`` says why). A slot added to Event and not set there would leave
every dispatched event without it: these tests hold the two together."""

from __future__ import annotations

import inspect
import re

from streams_app.runtime.worker.records import RecordDispatcher
from streams_app.topology.contract import Event


def _set_by_dispatch() -> set[str]:
    source = inspect.getsource(RecordDispatcher.dispatch)
    return set(re.findall(r"^\s*event\.(\w+) = ", source, re.MULTILINE))


def test_the_dispatcher_sets_every_slot_of_event() -> None:
    assert _set_by_dispatch() == set(Event.__slots__)


def test_events_made_by_init_have_the_same_slots() -> None:
    event = Event("t", 0, 5, 1_000, "k", "v", (), b"k", b"v", None)  # type: ignore[arg-type]
    assert {slot for slot in Event.__slots__ if hasattr(event, slot)} == _set_by_dispatch()
