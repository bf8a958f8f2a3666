"""The narrow interfaces the Graveler core uses, and nothing else of its adapters.

- ``RefStore``: repositories, branches, tags, commits, and the staged writes that must be
  checked against a branch's state in the same transaction (SQL: ``lakefuse.db.refs``).
- ``StagingStore``: the staged entries of staging tokens (SQL: ``lakefuse.db.staging``).
- ``CommittedStore``: immutable ranges and metaranges (``lakefuse.graveler.committed``).

Each has a memory twin for fast unit tests (``lakefuse.graveler.memory``) and the SQL adapters
run the same contract tests on SQLite and PostgreSQL.

Conventions: keys are ``bytes`` (UTF-8 object paths); a staged ``None`` value is a tombstone
(a deletion staged over the committed content); listings are in bytewise key order.

Change feed: a staging token has a version, 0 until its first write, +1 per write transaction
(``set``, ``set_many``, ``RefStore.stage_on_branch``, ``drop_prefix``), and each staged row
remembers the version and the ``origin`` of the store that last wrote it.  ``origin`` tells a
process's own writes from everyone else's: on SQL it is ``Database.origin``, shared by every
store on one ``Database`` object; a memory store has its own (its ``MemoryRefStore`` uses its
staging store's).  ``StagingStore.changes_since`` reads the feed; ``Graveler.branch_changes``
is the feed of a branch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Protocol, Sequence

from lakefuse.graveler.model import (
    BranchID,
    Commit,
    CommitID,
    MetaRangeID,
    RangeInfo,
    RepositoryID,
    StagingChanges,
    StagingToken,
    TagID,
    ValueRecord,
)


@dataclass(frozen=True)
class Repository:
    id: RepositoryID
    storage_namespace: str
    default_branch: BranchID
    creation_date: int


@dataclass(frozen=True)
class Branch:
    id: BranchID
    commit_id: CommitID
    staging_token: StagingToken
    #: tokens sealed by commits in progress, newest first; reads see them under the staging token
    sealed_tokens: tuple[StagingToken, ...] = field(default_factory=tuple)


class RefStore(Protocol):
    """Refs in a transactional store.  Every method is atomic on its own."""

    #: the origin ``stage_on_branch`` stamps on the rows it stages (see the module docstring)
    origin: str

    # repositories
    def create_repository(self, repo: Repository, initial_commit: Commit, branch: Branch) -> None:
        """Create the repository, its initial commit and default branch in one transaction.
        Raises AlreadyExists."""

    def get_repository(self, repo_id: RepositoryID) -> Repository: ...  # RepositoryNotFound

    def list_repositories(self) -> list[Repository]: ...

    def delete_repository(self, repo_id: RepositoryID) -> None:
        """Delete the repository's refs, commits and staging rows (not its objects)."""

    # branches
    def create_branch(self, repo_id: RepositoryID, branch: Branch) -> None: ...  # AlreadyExists

    def get_branch(self, repo_id: RepositoryID, branch_id: BranchID) -> Branch: ...  # RefNotFound

    def list_branches(self, repo_id: RepositoryID) -> list[Branch]: ...

    def delete_branch(self, repo_id: RepositoryID, branch_id: BranchID) -> None: ...

    def seal_staging_token(self, repo_id: RepositoryID, branch_id: BranchID, new_token: StagingToken) -> Branch:
        """Atomically move the branch's staging token to the front of ``sealed_tokens`` and
        make ``new_token`` the staging token.  Returns the branch as it is after the change."""

    def compare_and_swap_branch(self, repo_id: RepositoryID, branch_id: BranchID, expected: Branch, new: Branch) -> None:
        """Set the branch to ``new`` iff its stored state (commit, staging token, sealed tokens)
        equals ``expected``; else raise ConcurrentUpdate.  One transaction."""

    def stage_on_branch(
        self,
        repo_id: RepositoryID,
        branch_id: BranchID,
        expected: Branch,
        items: Iterable[tuple[bytes, ValueRecord | None]],
    ) -> bool:
        """Stage ``items`` (``None``: tombstone; a key given twice: the last one counts) into
        ``expected.staging_token`` iff the branch is still exactly ``expected`` (commit, staging
        token, sealed tokens); return whether it was.  Check and write are one transaction,
        ordered against ``seal_staging_token`` and ``compare_and_swap_branch`` of every process:
        once a seal returns, no write lands in the token it sealed any more.  ``items`` is read
        only after the check passed.  False (nothing written) if the branch moved or is gone:
        re-read it and retry.  No items: only the check.  The staged entries go to the
        ``StagingStore`` sharing this store's database (SQL) or given to it (memory), as one
        write transaction of the change feed (one version, rows stamped with ``origin``)."""

    # tags
    def create_tag(self, repo_id: RepositoryID, tag_id: TagID, commit_id: CommitID, force: bool = False) -> None: ...

    def get_tag(self, repo_id: RepositoryID, tag_id: TagID) -> CommitID: ...  # RefNotFound

    def list_tags(self, repo_id: RepositoryID) -> list[tuple[TagID, CommitID]]: ...

    def delete_tag(self, repo_id: RepositoryID, tag_id: TagID) -> None: ...

    # commits
    def add_commit(self, repo_id: RepositoryID, commit: Commit) -> None:
        """Store a commit; adding an identical commit again is a no-op."""

    def get_commit(self, repo_id: RepositoryID, commit_id: CommitID) -> Commit: ...  # RefNotFound

    def find_commits_by_prefix(self, repo_id: RepositoryID, prefix: str, limit: int = 10) -> list[CommitID]: ...

    def list_commits(self, repo_id: RepositoryID) -> Iterator[Commit]:
        """Every commit of the repository (for garbage collection), any order."""


class StagingStore(Protocol):
    """Staged entries per staging token.  ``None`` value = tombstone."""

    #: stamped on the rows this store writes: "own" writes for ``changes_since``
    origin: str

    def set(self, token: StagingToken, key: bytes, value: ValueRecord | None) -> None:
        """Stage one key: one transaction, the token's version + 1."""

    def set_many(self, token: StagingToken, items: Iterable[tuple[bytes, ValueRecord | None]]) -> None:
        """Stage several keys in one transaction (a directory rename is all or nothing): the
        token's version + 1, all rows stamped with it.  No items: nothing happens."""

    def get(self, token: StagingToken, key: bytes) -> ValueRecord | None | type(Ellipsis):
        """The staged value, ``None`` for a tombstone, ``...`` (Ellipsis) if nothing is staged."""

    def iterate(self, token: StagingToken, from_key: bytes = b"",
                until: bytes | None = None) -> Iterator[tuple[bytes, ValueRecord | None]]:
        """Staged entries with key >= from_key (and < ``until``, when given: a listing of a
        prefix reads no page of rows beyond it) in key order (tombstones included), paginated
        internally so a million staged keys never sit in memory at once."""

    def drop(self, token: StagingToken) -> None:
        """Delete the token's entries and its version (it reads as never written: version 0)."""

    def drop_prefix(self, token: StagingToken, prefix: bytes) -> None:
        """Delete the entries under ``prefix``: the token's version + 1, and a reader of the
        feed from before it gets ``keys=None`` (what was deleted is not recorded)."""

    def count(self, token: StagingToken) -> int: ...

    def changes_since(
        self, token: StagingToken, version: int, limit: int = 10_000, exclude_origin: str | None = None
    ) -> StagingChanges:
        """The token's version now and the keys set or tombstoned after ``version`` (rows last
        written by ``exclude_origin`` left out; a key written after ``version`` by another
        origin and then by ``exclude_origin`` is left out too: its latest state is its own).
        ``keys`` is None if anything may have changed: a ``drop_prefix`` after ``version``, the
        token dropped since (version now < ``version``), more than ``limit`` keys.  Consistent:
        ``keys`` are exactly the changes of versions ``version + 1`` to the version returned,
        so passing that version next time misses nothing.  InvalidArgument for a negative
        ``version`` or ``limit``."""


class CommittedStore(Protocol):
    """Immutable committed content of one storage namespace."""

    def write_metarange(self, records: Iterable[ValueRecord]) -> MetaRangeID:
        """Write a metarange of a sorted record stream (ranges split at content-defined
        boundaries).  Raises InvalidArgument for unsorted / duplicate / empty / non-UTF-8 keys."""

    def apply(self, base: MetaRangeID, changes: Iterable[tuple[bytes, ValueRecord | None]]) -> MetaRangeID:
        """A new metarange: ``base`` with sorted ``changes`` applied (None deletes a key).
        Ranges without changes are reused by ID, unread."""

    def get(self, metarange: MetaRangeID, key: bytes) -> ValueRecord | None: ...

    def iterate(self, metarange: MetaRangeID, from_key: bytes = b"") -> Iterator[ValueRecord]: ...

    def list_dir(self, metarange: MetaRangeID, prefix: bytes, delimiter: bytes = b"/", after: bytes = b"",
                 markers: bool = False) -> Iterator[tuple[bytes, ValueRecord | None]]:
        """``RefView.list`` of a view with no staging (a commit): same items, same order."""
        ...

    def ranges(self, metarange: MetaRangeID) -> Sequence[RangeInfo]: ...

    def diff(self, left: MetaRangeID, right: MetaRangeID) -> Iterator[tuple[bytes, ValueRecord | None, ValueRecord | None]]:
        """Keys whose records differ (by identity) between two metaranges, in key order:
        ``(key, left_record_or_None, right_record_or_None)``.  Ranges with equal IDs are skipped
        without being read."""

    def empty_metarange(self) -> MetaRangeID: ...
