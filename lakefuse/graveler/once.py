"""``OncePerKey``: one value per key, built once on first use and kept (thread-safe).

The core keeps one ``CommittedStore`` per storage namespace and the catalog one block adapter
per namespace; both open it on first use, under a lock so two threads never build two, and
read it without the lock afterwards.
"""

from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

from lakefuse.graveler.quick import must_wait

K = TypeVar("K")
V = TypeVar("V")


class OncePerKey(Generic[K, V]):
    """``get(key)`` returns ``build(key)``, called at most once per key."""

    def __init__(self, build: Callable[[K], V]):
        self._build = build
        self._values: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V:
        value = self._values.get(key)
        if value is None:
            must_wait("opening a store")
            with self._lock:
                value = self._values.get(key)
                if value is None:
                    value = self._build(key)
                    self._values[key] = value
        return value
