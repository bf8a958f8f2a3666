"""Value types of the Graveler core: what an object entry, a record, a range and a commit are.

Plain immutable dataclasses, no I/O.  Identity and on-disk encodings of these live in
``lakefuse.graveler.committed.encoding``; this module only says what the fields mean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, NewType

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
