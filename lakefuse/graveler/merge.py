"""The three-way merge of committed content: which keys change when a source is merged into a
destination given their merge base, and which keys conflict.

Owns, and nothing else does, the decision table (A/B/C contents, X missing; identity compares
contents):

====  ======  ====  ========  ===============================================
base  source  dest  result    comment
====  ======  ====  ========  ===============================================
A     A       A     A         unchanged file
A     B       B     B         changed on both sides the same way
A     B       C     conflict  changed on both sides differently
A     A       B     B         changed only in dest
A     B       A     B         changed only in source
A     X       X     X         deleted on both sides
A     B       X     conflict  changed in source, deleted in dest
A     X       B     conflict  deleted in source, changed in dest
A     A       X     X         deleted in dest
A     X       A     X         deleted in source
====  ======  ====  ========  ===============================================

(keys missing from the base behave the same with A = X.)  With a strategy a conflict takes the
destination's (``dest-wins``) or the source's (``source-wins``) side.

The work: the side with fewer changed ranges since the base (known from the metaranges
alone) "drives": ``diff(base, driver)`` is walked (equal ranges skipped unread), each of its keys
looked up on the other side, and the winning driver changes are applied to the other side with
one ``apply`` (unchanged ranges reused by ID).  The result is the same whichever side drives;
the cost follows the smaller change set, not the size of the repository.  When one side has not
changed since the base the result is the other side's metarange itself: nothing is written.
"""

from __future__ import annotations

from enum import Enum
from itertools import chain, islice
from typing import Callable, Iterable, Iterator

from lakefuse.errors import InvalidArgument, MergeConflict
from lakefuse.graveler.model import MetaRangeID, ValueRecord, same_value
from lakefuse.graveler.ports import CommittedStore

#: changes kept in memory so that a conflicting merge writes nothing; past this the changes
#: stream into ``apply`` and a conflict found later aborts it (leaving unreferenced ranges)
MERGE_BUFFER_CHANGES = 100_000
#: conflicting paths kept for the error (the count is always exact)
MAX_REPORTED_CONFLICTS = 1000


class MergeStrategy(str, Enum):
    DEST_WINS = "dest-wins"
    SOURCE_WINS = "source-wins"


def parse_strategy(value: str | MergeStrategy | None) -> MergeStrategy | None:
    if value is None or value == "":
        return None
    try:
        return MergeStrategy(value)
    except ValueError:
        raise InvalidArgument(f"unknown merge strategy {value!r}: use 'dest-wins' or 'source-wins'") from None


class Conflicts:
    """Conflicting keys found so far: an exact count and the first few keys."""

    def __init__(self) -> None:
        self.count = 0
        self.keys: list[bytes] = []

    def add(self, key: bytes) -> None:
        self.count += 1
        if len(self.keys) < MAX_REPORTED_CONFLICTS:
            self.keys.append(key)

    def error(self, what: str) -> MergeConflict:
        paths = [key.decode("utf-8", "replace") for key in self.keys]
        shown = ", ".join(paths[:10]) + (", ..." if self.count > 10 else "")
        return MergeConflict(f"{what}: {self.count} conflicting path(s): {shown}", conflicts=paths)


def changed_range_count(committed: CommittedStore, base: MetaRangeID, other: MetaRangeID) -> int:
    """How many ranges of ``other`` are not ranges of ``base``: a bound on the work of
    ``diff(base, other)``, known from the two metaranges alone."""
    if base == other:
        return 0
    base_ids = {info.id for info in committed.ranges(base)}
    return sum(1 for info in committed.ranges(other) if info.id not in base_ids)


def three_way_changes(
    driver_diff: Iterable[tuple[bytes, ValueRecord | None, ValueRecord | None]],
    other_get: Callable[[bytes], ValueRecord | None],
    driver_wins: bool | None,
    conflicts: Conflicts,
) -> Iterator[tuple[bytes, ValueRecord | None]]:
    """The changes that turn the *other* side into the merge result, in key order.

    ``driver_diff`` is ``diff(base, driver)`` (``(key, base_record, driver_record)``) of one
    side; ``other_get`` looks a key up on the other side.  Per key: other side unchanged since
    the base -> take the driver's record; other side equal to the driver -> nothing to do;
    else a conflict, resolved for the driver (``driver_wins`` True), for the other side
    (False), or recorded in ``conflicts`` (None).  Keys the driver did not change keep the
    other side's record, which is the table's answer for them."""
    for key, base_record, driver_record in driver_diff:
        other_record = other_get(key)
        if same_value(other_record, base_record):
            yield key, driver_record
        elif same_value(other_record, driver_record):
            continue
        elif driver_wins is True:
            yield key, driver_record
        elif driver_wins is None:
            conflicts.add(key)


def merge_metaranges(
    committed: CommittedStore,
    base: MetaRangeID,
    source: MetaRangeID,
    dest: MetaRangeID,
    strategy: MergeStrategy | None,
    what: str,
    before_write=None,
) -> MetaRangeID:
    """The metarange of merging ``source`` into ``dest`` over ``base``.

    The side with fewer changed ranges since the base drives: its diff is walked, each of its
    keys looked up on the other side, and the result is the other side's metarange with the
    driver's winning changes applied.  So the cost follows the smaller change set (a branch
    with many changes merged into a main that moved little costs what main's moves cost).
    Raises ``MergeConflict`` (``what`` starts its message) before anything is written when the
    changes fit in ``MERGE_BUFFER_CHANGES``.  ``before_write()`` runs once conflicts are ruled
    out (or the changes are too many to hold) and before any range is written: the pre-merge
    hook."""
    if source == base or source == dest:
        if before_write:
            before_write()
        return dest
    if dest == base:
        if before_write:
            before_write()
        return source
    if changed_range_count(committed, base, dest) < changed_range_count(committed, base, source):
        driver, onto = dest, source
        driver_wins = None if strategy is None else strategy is MergeStrategy.DEST_WINS
    else:
        driver, onto = source, dest
        driver_wins = None if strategy is None else strategy is MergeStrategy.SOURCE_WINS
    conflicts = Conflicts()
    changes = three_way_changes(
        committed.diff(base, driver), lambda key: committed.get(onto, key), driver_wins, conflicts
    )
    buffered = list(islice(changes, MERGE_BUFFER_CHANGES))
    if len(buffered) < MERGE_BUFFER_CHANGES:
        if conflicts.count:
            raise conflicts.error(what)
        if before_write:
            before_write()
        if not buffered:
            return onto
        return committed.apply(onto, buffered)

    def checked_rest():
        yield from changes
        if conflicts.count:
            raise conflicts.error(what)

    if conflicts.count:
        raise conflicts.error(what)
    if before_write:
        before_write()
    return committed.apply(onto, chain(buffered, checked_rest()))
