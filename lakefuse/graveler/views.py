"""Reading a ref: a committed metarange, optionally overlaid with staging tokens.

Owns, and nothing else does:

- ``overlay``: the k-way merge of sorted ``(key, record_or_None)`` layers where the first layer
  that has a key wins (staging token, then sealed tokens newest first, then the commit), with
  seeking;
- ``RefView``: point reads, ordered iteration and S3-style listings (prefix, delimiter ->
  common prefixes, ``after``) of one ref, streamed: nothing is materialised beyond one page of
  each layer.

A ``None`` record in a staging layer is a tombstone: it hides the key of every lower layer.
"""

from __future__ import annotations

import heapq
from itertools import chain
from typing import Callable, Iterator, Sequence

from lakefuse.graveler.model import MetaRangeID, StagingToken, ValueRecord
from lakefuse.graveler.ports import CommittedStore, StagingStore

#: a layer opens an iterator of ``(key, record_or_None)`` with key >= the given key
Layer = Callable[[bytes], Iterator[tuple[bytes, ValueRecord | None]]]

#: how many keys inside a common prefix are skipped one by one before seeking past it
_LINEAR_SKIP = 8


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


class Overlay:
    """Merged iteration over layers, highest priority first; yields every key once with the
    record of the first layer that has it (``None`` = tombstone, kept: callers decide)."""

    __slots__ = ("_layers", "_iters", "_heap", "_single")

    def __init__(self, layers: Sequence[Layer], from_key: bytes = b""):
        self._layers = list(layers)
        self._single: Iterator | None = None
        self._iters: list[Iterator] = []
        self._heap: list = []
        self.seek(from_key)

    def seek(self, key: bytes) -> None:
        """Continue from ``key`` (inclusive), reopening every layer there."""
        if len(self._layers) == 1:
            self._single = self._layers[0](key)
            return
        self._single = None
        self._iters = [layer(key) for layer in self._layers]
        self._heap = []
        for priority in range(len(self._iters)):
            self._advance(priority)
        self._alone_if_last()

    def _alone_if_last(self) -> None:
        """Once one layer is left (the heap holds one item per layer not exhausted), read it
        straight on: a branch with nothing staged after this key lists at a commit's pace."""
        if len(self._heap) == 1:
            key, priority, record = self._heap.pop()
            self._single = chain(((key, record),), self._iters[priority])

    def _advance(self, priority: int) -> None:
        item = next(self._iters[priority], None)
        if item is not None:
            heapq.heappush(self._heap, (item[0], priority, item[1]))

    def __iter__(self):
        return self

    def __next__(self) -> tuple[bytes, ValueRecord | None]:
        if self._single is not None:
            return next(self._single)
        heap = self._heap
        if not heap:
            raise StopIteration
        key, priority, record = heapq.heappop(heap)
        self._advance(priority)
        while heap and heap[0][0] == key:  # same key in lower layers: shadowed
            _key, lower, _record = heapq.heappop(heap)
            self._advance(lower)
        if len(heap) == 1:
            self._alone_if_last()
        return key, record


def staging_layer(staging: StagingStore, token: StagingToken, until: bytes | None = None) -> Layer:
    """The token's staged entries from a key on (below ``until``, when given)."""
    return lambda from_key: staging.iterate(token, from_key, until)


def committed_layer(committed: CommittedStore, metarange: MetaRangeID) -> Layer:
    def open_layer(from_key: bytes):
        return ((record.key, record) for record in committed.iterate(metarange, from_key))

    return open_layer


class RefView:
    """What one ref shows: ``tokens`` (staging token first, then sealed tokens newest first)
    over the committed ``metarange``.  A view of a commit has no tokens."""

    def __init__(
        self,
        committed: CommittedStore,
        metarange: MetaRangeID,
        staging: StagingStore | None = None,
        tokens: Sequence[StagingToken] = (),
    ):
        self.committed = committed
        self.metarange = metarange
        self.staging = staging
        self.tokens = tuple(tokens) if staging is not None else ()

    # -- point reads ---------------------------------------------------------------------

    def lookup(self, key: bytes) -> tuple[ValueRecord | None, bool]:
        """``(record_or_None, from_staging)``: the visible record of ``key`` and whether a
        staging layer decided it (a tombstone decides too)."""
        for token in self.tokens:
            staged = self.staging.get(token, key)
            if staged is not ...:
                return staged, True
        return self.committed.get(self.metarange, key), False

    def get(self, key: bytes) -> ValueRecord | None:
        return self.lookup(key)[0]

    # -- iteration -----------------------------------------------------------------------

    def layers(self) -> list[Layer]:
        layers = [staging_layer(self.staging, token) for token in self.tokens]
        layers.append(committed_layer(self.committed, self.metarange))
        return layers

    def staged_layers(self) -> list[Layer]:
        return [staging_layer(self.staging, token) for token in self.tokens]

    def iterate(self, from_key: bytes = b"") -> Iterator[ValueRecord]:
        """Every visible record with key >= ``from_key``, in key order."""
        for _key, record in Overlay(self.layers(), from_key):
            if record is not None:
                yield record

    def staged_changes(self, from_key: bytes = b"") -> Iterator[tuple[bytes, ValueRecord | None]]:
        """The staged entries of all tokens merged (newest wins), tombstones included."""
        if not self.tokens:
            return iter(())
        return Overlay(self.staged_layers(), from_key)

    def list(self, prefix: bytes = b"", delimiter: bytes = b"", after: bytes = b"",
             markers: bool = False) -> Iterator[tuple[bytes, ValueRecord | None]]:
        """S3-style listing in key order: ``(key, record)`` for objects under ``prefix`` and,
        with a ``delimiter``, ``(common_prefix, None)`` once per deeper "directory" that holds
        at least one visible object.  Only items strictly after ``after``; as in
        ``CommittedManager.list_dir``, a common prefix that ``after`` falls inside counts as
        already listed.  Subtrees are skipped by seeking past them.  ``markers``: a common
        prefix comes with the record of the object named exactly like it (a directory marker,
        the first key of its subtree) instead of None, when there is one."""
        if not self.tokens:  # a commit: one loop over the ranges (a listing's cost per entry)
            return self.committed.list_dir(self.metarange, prefix, delimiter, after, markers)
        # staged rows are read in pages: none beyond the prefix (a page of the keys after it
        # cost a listing of a name's children a thousand rows in a big directory)
        until = prefix_successor(prefix) if prefix else None
        layers = [staging_layer(self.staging, token, until) for token in self.tokens]
        layers.append(committed_layer(self.committed, self.metarange))
        return _list(Overlay(layers, _start_key(prefix, delimiter, after)), prefix, delimiter, markers)


def _start_key(prefix: bytes, delimiter: bytes, after: bytes) -> bytes:
    if not after or after < prefix:
        return prefix
    if not after.startswith(prefix):
        return after + b"\x00"  # after is beyond the prefix: the listing is empty
    if delimiter:
        cut = after.find(delimiter, len(prefix))
        if cut >= 0:
            successor = prefix_successor(after[: cut + len(delimiter)])
            return successor if successor is not None else after + b"\x00"
    return after + b"\x00"


def _list(overlay: Overlay, prefix: bytes, delimiter: bytes,
          markers: bool = False) -> Iterator[tuple[bytes, ValueRecord | None]]:
    plen = len(prefix)
    pending = None
    while True:
        if pending is not None:
            (key, record), pending = pending, None
        else:
            item = next(overlay, None)
            if item is None:
                return
            key, record = item
        if not key.startswith(prefix):
            return
        if record is None:  # tombstone: hidden, and it does not make a common prefix
            continue
        cut = key.find(delimiter, plen) if delimiter else -1
        if cut < 0:
            yield key, record
            continue
        common = key[: cut + len(delimiter)]
        yield common, (record if markers and key == common else None)
        # skip the rest of the subtree: a few keys one by one, then seek past it
        skipped = 0
        while True:
            item = next(overlay, None)
            if item is None:
                return
            if not item[0].startswith(common):
                pending = item
                break
            skipped += 1
            if skipped >= _LINEAR_SKIP:
                successor = prefix_successor(common)
                if successor is None:
                    return
                overlay.seek(successor)
                break
