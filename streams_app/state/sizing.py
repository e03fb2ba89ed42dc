"""How many bytes a decoded key or value costs in this process, for the state memory budget.

The read cache and the uncommitted-writes budget promise a bound in *bytes of this process's
memory*, so they must count what the decoded Python objects cost, not what their encoded form
costs. The two differ by a lot: the JSON value ``b"5"`` is 1 byte and the ``int`` it decodes to
28; ``b'{"qty":2,"item":"apple"}'`` is 24 bytes and the ``dict`` 400 (measured, see
docs/memory.md). Counting encoded lengths would let a "64 MiB" cache of small JSON records hold
a gigabyte, so :func:`sizeof` walks the object instead, with :func:`sys.getsizeof` at each node:

- flat built-ins (``int``, ``float``, ``str``, ``bytes``, ``bool``, ``None``) cost one
  ``getsizeof`` call (~60 ns): the common table values (counts, sums, raw bytes) never recurse;
- containers (``tuple``, ``list``, ``set``, ``frozenset``, ``dict``) add their items, objects
  their ``__dict__`` or ``__slots__`` (``faust.Record`` models are plain objects with a
  ``__dict__``);
- an object reached twice within one value is counted once; objects shared *between* values
  (small ints, interned strings) are counted in each, so the total errs high, never low.

Walking costs about as much as decoding the value did, and happens once per write or cache fill,
never on a cache hit. A commit sizes all its writes at once with :func:`sizes`, which for the
common homogeneous cases (ASCII ``str`` or ``bytes`` keys, ``int``, ``float`` or ``bytes``
values, and tuples of them column by column: a windowed table's ``(key, start, end)``) computes
the exact ``getsizeof`` figures from ``len`` in C-level loops: ``sys.getsizeof`` itself costs a
method lookup and a call per object, more than the dict store of the value.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterator
from itertools import repeat
from operator import add
from typing import Any

_getsizeof = sys.getsizeof

#: Types whose ``getsizeof`` is their whole cost (no references to other objects).
FLAT: frozenset[type] = frozenset(
    {int, float, complex, str, bytes, bytearray, bool, type(None), memoryview}
)
_CONTAINERS = (tuple, list, set, frozenset)

#: ``getsizeof`` of an ASCII str / bytes is this plus its length (CPython's compact layouts).
STR_BASE = _getsizeof("")
BYTES_BASE = _getsizeof(b"")
#: ``getsizeof`` of any int whose magnitude fits one 30-bit digit is at most this.
SMALL_INT = _getsizeof(2**30 - 1)
_SMALL_INT_LIMIT = 2**30
#: ... and of any int of two digits (magnitude in ``[2**30, 2**60)``: epoch milliseconds).
TWO_DIGIT_INT = _getsizeof(2**60 - 1)
_TWO_DIGIT_LIMIT = 2**60
FLOAT_SIZE = _getsizeof(0.0)


#: Markers every holder shares (the store's "absent"): they cost a holder nothing.
_SHARED: set[int] = set()


def shared(marker: Any) -> Any:
    """Register ``marker`` as costing nothing to the entries that hold it; returns it."""
    _SHARED.add(id(marker))
    return marker


def sizeof(obj: Any) -> int:
    """Bytes ``obj`` and everything it holds occupy (see the module docstring)."""
    if type(obj) in FLAT:
        return _getsizeof(obj)
    if id(obj) in _SHARED:
        return 0
    return _deep(obj, set())


def size_parts(objs: Collection[Any]) -> tuple[int, Iterator[int] | None]:
    """``sizeof`` of each of ``objs`` as ``constant + part``: ``(constant, None)`` when all are
    the same size, else an iterator of the parts, in order. C-level loops for homogeneous flat
    objects (ASCII ``str``, ``bytes``, ``int``, ``float``) and for tuples of them."""
    types = set(map(type, objs))
    if len(types) == 1:
        kind = types.pop()
        found = _flat_parts(kind, objs)
        if found is not None:
            return found
        if issubclass(kind, tuple):  # windowed keys: (key, start, end)
            return _tuple_parts(objs)
    return 0, map(sizeof, objs)


def _flat_parts(kind: type, objs: Collection[Any]) -> tuple[int, Iterator[int] | None] | None:
    """:func:`size_parts` of objects all of type ``kind``; None unless ``kind`` is flat."""
    if kind is str:
        if all(map(str.isascii, objs)):
            return STR_BASE, map(len, objs)
    elif kind is int:
        low, high = min(objs), max(objs)
        if low > -_SMALL_INT_LIMIT and high < _SMALL_INT_LIMIT:
            return SMALL_INT, None
        if (low >= _SMALL_INT_LIMIT or high <= -_SMALL_INT_LIMIT) and (
            low > -_TWO_DIGIT_LIMIT and high < _TWO_DIGIT_LIMIT
        ):  # all of two 30-bit digits: epoch milliseconds (window bounds)
            return TWO_DIGIT_INT, None
    elif kind is bytes:
        return BYTES_BASE, map(len, objs)
    elif kind is float:
        return FLOAT_SIZE, None
    elif kind not in FLAT:
        return None
    return 0, map(_getsizeof, objs)


def _tuple_parts(objs: Collection[tuple[Any, ...]]) -> tuple[int, Iterator[int] | None]:
    """:func:`size_parts` of tuples of one type: column by column when they all have the same
    length and every column is homogeneous and flat (a windowed table's keys: ``str`` keys and
    ``int`` bounds), so that a commit of windows is sized in C-level loops as one of plain keys
    is. The same figures as :func:`_deep` (a tuple of flat objects costs its own ``getsizeof``
    plus each item's); otherwise the walk, per tuple."""
    try:
        columns = list(zip(*objs, strict=True))
    except ValueError:  # not all of one length
        return 0, map(sizeof, objs)
    constant = _getsizeof(next(iter(objs)))  # one type and one length: one size
    parts: list[Iterator[int]] = []
    for column in columns:
        kinds = set(map(type, column))
        found = _flat_parts(kinds.pop(), column) if len(kinds) == 1 else None
        if found is None:
            return 0, map(sizeof, objs)
        constant += found[0]
        if found[1] is not None:
            parts.append(found[1])
    if not parts:
        return constant, None
    return constant, parts[0] if len(parts) == 1 else map(sum, zip(*parts, strict=True))


def sizes(objs: Collection[Any]) -> list[int]:
    """``[sizeof(o) for o in objs]``, in C-level loops for the common homogeneous cases."""
    constant, parts = size_parts(objs)
    if parts is None:
        return [constant] * len(objs)
    return list(map(add, parts, repeat(constant)))


def _deep(obj: Any, seen: set[int]) -> int:
    if type(obj) in FLAT:
        return _getsizeof(obj)
    ident = id(obj)
    if ident in seen or ident in _SHARED:
        return 0
    seen.add(ident)
    size = _getsizeof(obj)
    if isinstance(obj, dict):
        for key, value in obj.items():
            size += _deep(key, seen) + _deep(value, seen)
    elif isinstance(obj, _CONTAINERS):
        for item in obj:
            size += _deep(item, seen)
    else:
        attrs = getattr(obj, "__dict__", None)
        if attrs is not None:
            size += _deep(attrs, seen)
        for cls in type(obj).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                if name in ("__dict__", "__weakref__"):
                    continue
                value = getattr(obj, name, None)
                if value is not None:
                    size += _deep(value, seen)
    return size
