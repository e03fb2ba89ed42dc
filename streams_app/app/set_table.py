"""SetTable: a table whose values are sets, changed in place (``table[key].add(x)``).

Each change writes the whole set back to the task's pending writes, so it commits with the
transaction like any table write, and the changelog holds the set itself (a JSON list,
compacted). Faust's SetTable logs *operations* instead (``[op, key] -> element``, not
compacted): the two changelogs are not interchangeable, so a Faust SetTable cannot be switched
in place (see docs/migrating-from-faust.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, MutableSet
from typing import TYPE_CHECKING, Any

from streams_app.app.table import Table
from streams_app.codecs import Codec

if TYPE_CHECKING:
    from streams_app.app.app import App


class _SetCodec:
    """Sets as JSON lists (sorted when the elements allow, so equal sets have equal bytes)."""

    def __init__(self, inner: Codec) -> None:
        self.inner = inner
        self.name = f"set:{getattr(inner, 'name', 'codec')}"

    def dumps(self, obj: Any) -> bytes:
        items = list(obj)
        with contextlib.suppress(TypeError):
            items.sort()
        return self.inner.dumps(items)

    def loads(self, data: bytes) -> Any:
        return set(self.inner.loads(data) or ())


class ChangeloggedSet(MutableSet[Any]):
    """The set of one key: every change is written back to the table."""

    def __init__(self, table: SetTable, key: Any, data: set[Any]) -> None:
        self._table = table
        self._key = key
        self.data = data

    def _write(self) -> None:
        self._table._write_set(self._key, self.data)

    def add(self, value: Any) -> None:
        self.data.add(value)
        self._write()

    def discard(self, value: Any) -> None:
        self.data.discard(value)
        self._write()

    def update(self, *others: Iterable[Any]) -> None:
        for other in others:
            self.data.update(other)
        self._write()

    def difference_update(self, *others: Iterable[Any]) -> None:
        for other in others:
            self.data.difference_update(other)
        self._write()

    def intersection_update(self, *others: Iterable[Any]) -> None:
        self.data.intersection_update(*others)
        self._write()

    def symmetric_difference_update(self, other: Iterable[Any]) -> None:
        self.data.symmetric_difference_update(other)
        self._write()

    def clear(self) -> None:
        self.data.clear()
        self._write()

    def __contains__(self, value: object) -> bool:
        return value in self.data

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChangeloggedSet):
            return self.data == other.data
        return self.data == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:  # as Faust's: the set itself
        return repr(self.data)


class SetTable(Table):
    def __init__(self, app: App, name: str, **kwargs: Any) -> None:
        kwargs.pop("default", None)
        kwargs.pop("start_manager", None)
        super().__init__(app, name, default=set, **kwargs)
        self.element_codec = self.value_codec
        self.value_codec = _SetCodec(self.value_codec)

    def __getitem__(self, key: Any) -> ChangeloggedSet:
        value = super().__getitem__(key)
        if isinstance(value, ChangeloggedSet):
            return value
        return ChangeloggedSet(self, key, set(value))

    def __setitem__(self, key: Any, value: Any) -> None:
        self._write_set(key, set(value))

    def _write_set(self, key: Any, data: set[Any]) -> None:
        super().__setitem__(key, set(data))
