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
common homogeneous cases (ASCII ``str`` or ``bytes`` keys, small ``int``, ``float`` or ``bytes``
values) computes the exact ``getsizeof`` figures from ``len`` in C-level loops: ``sys.getsizeof``
itself costs a method lookup and a call per object, more than the dict store of the value.
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
    objects (ASCII ``str``, ``bytes``, small ``int``, ``float``)."""
    types = set(map(type, objs))
    if len(types) == 1:
        kind = types.pop()
        if kind is str:
            if all(map(str.isascii, objs)):
                return STR_BASE, map(len, objs)
        elif kind is int:
            if min(objs) > -_SMALL_INT_LIMIT and max(objs) < _SMALL_INT_LIMIT:
                return SMALL_INT, None
        elif kind is bytes:
            return BYTES_BASE, map(len, objs)
        elif kind is float:
            return FLOAT_SIZE, None
        elif kind is tuple or issubclass(kind, tuple):  # windowed keys: (key, start, end)
            return 0, map(_tuple_size, objs)
    return 0, map(sizeof, objs)


def _tuple_size(obj: tuple[Any, ...]) -> int:
    """``sizeof`` of a tuple, without :func:`_deep`'s bookkeeping when it holds only flat
    objects (a windowed table's keys); the same figure either way."""
    size = _getsizeof(obj)
    for item in obj:
        if type(item) not in FLAT:
            return sizeof(obj)
        size += _getsizeof(item)
    return size


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
