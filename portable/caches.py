"""Bounded caches: at most ``size`` entries, the least recently used dropped first.

The launch paths and the inference model keep what their checks found (a work division checked
for a device, a pass prepared for a geometry) in these, so a caller that makes new keys every
time (a new size each event) keeps the latest ones instead of growing without end.

Both classes are safe to share between threads without a lock: each step is one operation of
an ``OrderedDict`` (atomic in CPython), and a step that finds its entry dropped by another
thread meanwhile acts as on a miss. Two threads may then both compute one value; the last one
kept wins.

An entry keyed by ``id(obj)`` is only right while ``obj`` lives: once it is freed, a new object
can get its id and would find the old one's entry. :class:`IdentityCache` holds a strong
reference to each key object in its entry (so that id is never another object's while the
entry is kept) and checks the identity on each lookup. A :class:`LRUCache` keyed by an id must
hold the object in the value the same way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from ._errors import ArgumentError


class LRUCache:
    """A mapping of at most ``size`` entries; setting one more drops the least recently used
    (set or read with :meth:`get`/``[]``). :attr:`peek` reads without counting as a use, at the
    speed of ``dict.get`` (for a launch's fast path)."""

    __slots__ = ("_data", "size", "peek")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ArgumentError(f"an LRUCache holds at least 1 entry, got size={size}")
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self.size = size
        #: ``peek(key, default=None)``: the value without marking it used
        self.peek = self._data.get

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value of ``key`` (now the most recently used), or ``default``."""
        data = self._data
        try:
            value = data[key]
            data.move_to_end(key)
        except KeyError:  # absent, or dropped by another thread meanwhile
            return default
        return value

    def __getitem__(self, key: Hashable) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        data = self._data
        data[key] = value
        try:
            data.move_to_end(key)  # a key set again is used again
            while len(data) > self.size:
                data.popitem(last=False)
        except KeyError:  # another thread dropped it (or emptied the cache) meanwhile
            pass

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def values(self) -> list[Any]:
        """The values, least recently used first (a copy)."""
        return list(self._data.values())

    def clear(self) -> None:
        self._data.clear()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {len(self._data)}/{self.size}>"


class IdentityCache(LRUCache):
    """An :class:`LRUCache` keyed by the identity of objects (for keys whose ``==`` and hash
    compare values, or are slow): ``cache[obj]`` is the value set for that very object. Each
    entry holds ``obj``, so its id is not reused while the entry is kept."""

    __slots__ = ()

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.peek = self._peek

    def _peek(self, obj: Any, default: Any = None) -> Any:
        entry = self._data.get(id(obj))
        return entry[1] if entry is not None and entry[0] is obj else default

    def get(self, obj: Any, default: Any = None) -> Any:
        entry = LRUCache.get(self, id(obj))
        if entry is None or entry[0] is not obj:
            return default
        return entry[1]

    def __setitem__(self, obj: Any, value: Any) -> None:
        LRUCache.__setitem__(self, id(obj), (obj, value))

    def __contains__(self, obj: Any) -> bool:
        entry = self._data.get(id(obj))
        return entry is not None and entry[0] is obj

    def values(self) -> list[Any]:
        return [entry[1] for entry in list(self._data.values())]  # (a copy first: atomic)


_MISSING = object()

__all__ = ["IdentityCache", "LRUCache"]
