"""Value types of the Graveler core: what an object entry, a record, a range and a commit are,
and what a staging token's / a branch's change feed answers.

Plain immutable dataclasses, no I/O.  Identity and on-disk encodings of these live in
``lakefuse.graveler.committed.encoding``; this module only says what the fields mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, NewType

from lakefuse.errors import InvalidArgument

# Distinct ID types (hex strings of SHA-256 digests, except names).
RepositoryID = NewType("RepositoryID", str)
BranchID = NewType("BranchID", str)
TagID = NewType("TagID", str)
CommitID = NewType("CommitID", str)
RangeID = NewType("RangeID", str)
MetaRangeID = NewType("MetaRangeID", str)
StagingToken = NewType("StagingToken", str)


@dataclass(frozen=True, slots=True)
class Entry:
    """Metadata of one object, as stored in a range (committed) or a staging area.

    ``physical_address`` is relative to the repository's storage namespace unless
    ``address_is_full`` is true (then it is a full URI, e.g. an imported object).
    ``metadata`` is the user metadata (string -> string).
    """

    physical_address: str
    size: int
    mtime: int  # seconds since the epoch
    checksum: str
    content_type: str = "application/octet-stream"
    metadata: Mapping[str, str] = field(default_factory=dict)
    address_is_full: bool = False

    def __hash__(self) -> int:  # metadata is a dict: hash what identifies the value
        return hash((self.physical_address, self.size, self.mtime, self.checksum))


@dataclass(frozen=True, slots=True)
class ValueRecord:
    """One record of a Graveler file: key, identity (bytes) and the encoded value (bytes)."""

    key: bytes
    identity: bytes
    value: bytes


def same_value(left: ValueRecord | None, right: ValueRecord | None) -> bool:
    """Whether two records (or absences) hold the same value: compared by identity."""
    if left is None or right is None:
        return left is right
    return left.identity == right.identity


def string_map(mapping: Mapping[str, str] | None, what: str) -> dict[str, str]:
    """``mapping`` as a plain dict, checked to map strings to strings (``what`` names it in
    the error: "commit metadata", "user metadata")."""
    result: dict[str, str] = {}
    for key, value in (mapping or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidArgument(f"{what} must map strings to strings, got {key!r}: {value!r}")
        result[key] = value
    return result


@dataclass(frozen=True, slots=True)
class RangeInfo:
    """What a metarange says of one range."""

    id: RangeID
    min_key: bytes
    max_key: bytes
    count: int
    estimated_size: int


@dataclass(frozen=True, slots=True)
class Commit:
    id: CommitID
    metarange_id: MetaRangeID
    parents: tuple[CommitID, ...]
    message: str
    committer: str
    creation_date: int  # seconds since the epoch
    metadata: Mapping[str, str] = field(default_factory=dict)
    generation: int = 0  # 1 + max(parent generations); speeds up merge-base search

    def __hash__(self) -> int:
        return hash(self.id)


@dataclass(frozen=True, slots=True)
class StagingChanges:
    """What ``StagingStore.changes_since(token, since)`` answers.

    ``version``: the token's version now (0: never written, or dropped).  ``keys``: the keys
    whose staged rows were set or tombstoned after ``since`` (bytewise order), or None when
    anything may have changed: a ``drop_prefix`` after ``since``, a token dropped since
    (``version < since``), or more keys than the caller's limit."""

    version: int
    keys: tuple[bytes, ...] | None

    @classmethod
    def between(cls, since: int, version: int, reset_version: int, keys: Collection[bytes], limit: int) -> "StagingChanges":
        """The answer for a reader at ``since`` of a token at ``version`` whose last
        ``drop_prefix`` was at ``reset_version``, given the keys written in between (at most
        ``limit + 1`` need be read: more than ``limit`` is None)."""
        if version < since or reset_version > since or len(keys) > limit:
            return cls(version=version, keys=None)
        return cls(version=version, keys=tuple(sorted(keys)))


def check_feed_arguments(version, limit) -> tuple[int, int]:
    """``(version, limit)`` of a ``changes_since`` call; InvalidArgument unless ints >= 0."""
    for name, value in (("staging version", version), ("change limit", limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgument(f"{name} must be an int >= 0, got {value!r}")
    return version, limit


@dataclass(frozen=True, slots=True)
class BranchCursor:
    """Where a reader of a branch's change feed (``Graveler.branch_changes``) left off: the
    branch's head commit and staging token then, and the token's version."""

    commit_id: CommitID
    staging_token: StagingToken
    version: int
