"""What differs between two sides of the core's content: the ``Change`` type, the diffs that
produce it (committed vs committed, staged vs head), the ``EffectiveChanges`` a commit applies,
and the ``ListingPage`` a listing returns.

Owns: how a difference is named (added / changed / removed) and when a staged entry counts as
a change (not when it has the head's identity, nor when it is a tombstone of an absent key).
Reading the content itself is ``views``' business; the merge table is ``merge``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Iterator

from lakefuse.graveler.model import MetaRangeID, ValueRecord, same_value
from lakefuse.graveler.ports import CommittedStore
from lakefuse.graveler.views import RefView


class ChangeType(str, Enum):
    ADDED = "added"
    CHANGED = "changed"
    REMOVED = "removed"


@dataclass(frozen=True, slots=True)
class Change:
    """One key that differs between a left and a right side (``None``: absent on that side)."""

    key: bytes
    type: ChangeType
    left: ValueRecord | None
    right: ValueRecord | None


def change_of(key: bytes, left: ValueRecord | None, right: ValueRecord | None) -> Change:
    if left is None:
        return Change(key, ChangeType.ADDED, None, right)
    if right is None:
        return Change(key, ChangeType.REMOVED, left, None)
    return Change(key, ChangeType.CHANGED, left, right)


def no_changes() -> Iterator[Change]:
    return iter(())


def diff_metaranges(store: CommittedStore, left: MetaRangeID, right: MetaRangeID, prefix: bytes = b"") -> Iterator[Change]:
    """Committed differences from ``left`` to ``right`` in key order, under ``prefix``."""
    if left == right:
        return
    for key, left_record, right_record in store.diff(left, right):
        if prefix and not key.startswith(prefix):
            if key > prefix:
                return
            continue
        yield change_of(key, left_record, right_record)


def staged_vs_head(view: RefView, prefix: bytes = b"") -> Iterator[Change]:
    """The staged changes of ``view`` against its committed layer, in key order, under
    ``prefix``; a staged entry equal to the head is not a change."""
    for key, staged in view.staged_changes(prefix):
        if prefix and not key.startswith(prefix):
            return
        committed = view.committed.get(view.metarange, key)
        if not same_value(committed, staged):
            yield change_of(key, committed, staged)


@dataclass(frozen=True, slots=True)
class ListingPage:
    """One page of a listing: ``(key, record)`` for objects, ``(common_prefix, None)`` for
    "directories"; ``has_more``: pass ``next_after`` as ``after`` for the next page."""

    items: list[tuple[bytes, ValueRecord | None]]
    has_more: bool

    @property
    def next_after(self) -> bytes | None:
        return self.items[-1][0] if self.has_more and self.items else None


class EffectiveChanges:
    """Staged changes minus those equal to the head (same identity, or a tombstone of an
    absent key), counted as they stream into ``apply``.  The lookups hit the ranges ``apply``
    reads anyway."""

    def __init__(self, store: CommittedStore, metarange: MetaRangeID, staged: Iterable[tuple[bytes, ValueRecord | None]]):
        self._store = store
        self._metarange = metarange
        self._staged = staged
        self.count = 0

    def __iter__(self) -> Iterator[tuple[bytes, ValueRecord | None]]:
        get = self._store.get
        metarange = self._metarange
        for key, staged in self._staged:
            if same_value(get(metarange, key), staged):
                continue
            self.count += 1
            yield key, staged
