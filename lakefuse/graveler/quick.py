"""Quick reads: what a caller that must not wait may ask of the core.

The FUSE adapter answers requests on one event loop, and hands anything that may wait (a file
read, a database round trip) to a worker thread; the hop costs more than a point read that
memory and an embedded database can answer (a lookup of a name on a branch: a few SQLite
point reads and a record of a range already decoded in memory).  Inside ``quick_only()`` such
a read runs where it is asked, and every step that would wait raises ``NotQuick`` before it
starts, so the caller can ask again where waiting is fine:

- a metarange or range not decoded in memory (``CommittedManager``), or a read of blocks of
  a range file;
- a committed store not opened yet (``Graveler.committed_store``);
- any database access but ``Database.rows`` on an SQLite file (SQLAlchemy's pooled
  connections, PostgreSQL's round trips), and an SQLite read that finds the database busy.

The flag is per thread: worker threads never see it.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

_state = threading.local()


class NotQuick(Exception):
    """A read inside ``quick_only()`` would have to wait; nothing was changed."""


@contextmanager
def quick_only() -> Iterator[None]:
    previous = getattr(_state, "on", False)
    _state.on = True
    try:
        yield
    finally:
        _state.on = previous


def quick() -> bool:
    """Whether this thread is inside ``quick_only()``."""
    return getattr(_state, "on", False)


def must_wait(what: str) -> None:
    """Raise NotQuick inside ``quick_only()``: the caller is about to wait for ``what``."""
    if getattr(_state, "on", False):
        raise NotQuick(what)
