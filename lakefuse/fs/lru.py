"""``LRUDict``: a bounded least-recently-used mapping for the mount's hot metadata paths.

Owns nothing but the eviction rule.  It sits on ``collections.OrderedDict``, whose
``move_to_end`` and ``popitem`` run in C, so a hit or an insert costs a few dictionary
operations; a pure-Python LRU (cachetools') costs several times that, which matters on the
path of every cold ``stat`` (see ``Tree``).  Not thread-safe: callers hold their own lock.
"""

from __future__ import annotations

from collections import OrderedDict


class LRUDict:
    __slots__ = ("maxsize", "_data")

    def __init__(self, maxsize: int):
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key) -> bool:
        return key in self._data

    def get(self, key, default=None):
        """The value of ``key`` (now the most recently used), or ``default``."""
        data = self._data
        value = data.get(key, _MISSING)
        if value is _MISSING:
            return default
        data.move_to_end(key)
        return value

    def peek(self, key, default=None):
        """The value of ``key`` without making it recently used."""
        return self._data.get(key, default)

    def __setitem__(self, key, value) -> None:
        data = self._data
        data[key] = value
        data.move_to_end(key)
        if len(data) > self.maxsize:
            data.popitem(last=False)

    def pop(self, key, default=None):
        return self._data.pop(key, default)

    def clear(self) -> None:
        self._data.clear()


_MISSING = object()
