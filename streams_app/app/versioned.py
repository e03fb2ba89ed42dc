"""Versioned tables: a table built from a topic that keeps every value each key had within a
history retention, for lookups as of a time (KIP-889; docs/joins.md, "Versioned tables").

    prices = app.Table("prices", source=price_updates, versioned=timedelta(hours=6))
    prices["apple"]                          # the latest value
    prices.as_of("apple", order_time)        # the value then

A stream-table join against it looks the table up as of each stream record's time (KIP-914).
The store holds one entry per version (:mod:`streams_app.state.versioned`), with a changelog of
its own; its view in a task keeps in-memory hints, so it is per-task state, made anew after an
abort (``TaskScope.state``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from streams_app.app.table import Table
from streams_app.app.windows import instant_ms
from streams_app.errors import NullKeyError, TopologyError
from streams_app.state.composite import STREAM_TIME
from streams_app.state.versioned import VersionedRecord, VersionedTransaction, versioned_codecs
from streams_app.topology.contract import TaskScope, current_event, current_task

if TYPE_CHECKING:
    from streams_app.app.app import App

_MISSING: Any = object()


class VersionedTable(Table):
    """A table built from a topic with ``versioned=history``: reads give the latest value, and
    :meth:`as_of` the value at a time within the history."""

    def __init__(self, app: App, name: str, **options: Any) -> None:
        super().__init__(app, name, **options)
        if self.versioned_ms is None or self.source is None:
            raise TopologyError(f"table {name!r}: a versioned table needs source= and versioned=")
        # The store keeps (key, valid from) -> value or a tombstone version.
        self.key_codec, self.value_codec = versioned_codecs(
            self.user_key_codec, self.user_value_codec
        )

    # -- the task's view -------------------------------------------------------------------

    def view(self, task: TaskScope) -> VersionedTransaction:
        """The task's versioned view of its partition (opened on first use, dropped at every
        abort)."""
        history = self.versioned_ms
        assert history is not None

        def open_view() -> VersionedTransaction:
            codec: Any = self.key_codec
            return VersionedTransaction(self.task_transaction(task), codec, history)

        view: VersionedTransaction = task.join_state(f"versioned:{self.name}", open_view)
        return view

    def _scope_view(self) -> VersionedTransaction | None:
        event = current_event.get()
        if event is not None:
            if event.raw_key is None:
                raise NullKeyError(
                    f"table {self.name!r} used while processing {event.topic}[{event.partition}]"
                    f"@{event.offset}, a record without a key"
                )
            return self.view(event.task)
        task = current_task.get()
        return None if task is None else self.view(task)

    # -- reads -----------------------------------------------------------------------------

    def latest(self, key: Any) -> VersionedRecord | None:
        """The latest version of ``key`` (value and the time it became valid), None if there is
        none or it is a tombstone."""
        view = self._scope_view()
        if view is not None:
            return view.get(key)
        return self._committed_latest().get(key)

    def as_of(self, key: Any, when: Any) -> Any:
        """The value ``key`` had at ``when`` (a datetime or epoch seconds), None if it had
        none. Outside a record: the latest value only (the history is read in a task)."""
        view = self._scope_view()
        if view is None:
            raise TopologyError(
                f"table {self.name!r}: as_of() reads the history in the task that owns the key; "
                "call it while processing a record"
            )
        found = view.get_as_of(key, instant_ms(when, "as_of time"))
        return None if found is None else found.value

    def __getitem__(self, key: Any) -> Any:
        found = self.latest(key)
        if found is None:
            if self.default is None:
                raise KeyError(key)
            return self.default()
        return found.value

    def get(self, key: Any, default: Any = None) -> Any:
        found = self.latest(key)
        return default if found is None else found.value

    def __contains__(self, key: object) -> bool:
        return self.latest(key) is not None

    def __iter__(self) -> Iterator[Any]:
        view = self._scope_view()
        if view is not None:
            return iter(list(view.keys()))
        return iter(self._committed_latest())

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def local_items(self) -> Iterator[tuple[Any, Any]]:
        """The latest committed value of every key of the partitions this worker holds."""
        return iter((key, found.value) for key, found in self._committed_latest().items())

    def _committed_latest(self) -> dict[Any, VersionedRecord]:
        latest: dict[Any, tuple[int, Any]] = {}
        for entry, value in super().local_items():
            if entry is STREAM_TIME:
                continue
            key, valid_from = entry
            if key not in latest or latest[key][0] < valid_from:
                latest[key] = (valid_from, value)
        return {
            key: VersionedRecord(value, valid_from, None)
            for key, (valid_from, value) in latest.items()
            if value is not None
        }
