"""Memory twins of the SQL ports: ``MemoryRefStore`` and ``MemoryStagingStore``.

Thread-safe, dict-based, same semantics as ``lakefuse.db`` (the same contract tests run on
both): same errors, same orderings (code-point order of names, bytewise order of keys), and
``iterate`` pages through keys like the SQL store, so changes made while iterating show up the
same way.  For fast unit tests of the core; nothing is persisted.

``MemoryRefStore(staging)`` deletes the staged entries of deleted branches and repositories
from ``staging``, as the SQL store does in the same database, and ``stage_on_branch`` writes
into ``staging`` under the same lock as every branch move (without ``staging`` it cannot).

Change feed: as in ``lakefuse.db.staging``, each write call bumps its token's version by one
and stamps the rows it writes with that version and the store's ``origin`` (a random ID per
instance); ``drop_prefix`` bumps it and records it as the reset version; ``drop`` forgets the
token's version.  ``MemoryStagingStore.peer()`` / ``MemoryRefStore.peer(staging)`` are stores
on the same data with another origin: what a second process on the same database would be.
"""

from __future__ import annotations

import threading
import uuid
from bisect import bisect_left, bisect_right, insort
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from lakefuse.errors import AlreadyExists, ConcurrentUpdate, InvalidArgument, RefNotFound, RepositoryNotFound
from lakefuse.graveler.model import (
    BranchID,
    Commit,
    CommitID,
    RepositoryID,
    StagingChanges,
    StagingToken,
    TagID,
    ValueRecord,
    check_feed_arguments,
)
from lakefuse.graveler.ports import Branch, Repository


def _key_bytes(key) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    raise InvalidArgument(f"staging key must be bytes, got {type(key).__name__}")


def _stored_value(value):
    """What the store keeps of a staged value: (identity, value) or None for a tombstone."""
    if value is None:
        return None
    if not isinstance(value, ValueRecord):
        raise InvalidArgument(f"staged value must be a ValueRecord or None, got {type(value).__name__}")
    return (bytes(value.identity), bytes(value.value))


def _normalized_branch(branch: Branch) -> Branch:
    return Branch(
        id=branch.id,
        commit_id=branch.commit_id,
        staging_token=branch.staging_token,
        sealed_tokens=tuple(branch.sealed_tokens),
    )


def _normalized_commit(commit: Commit) -> Commit:
    """A copy with tuple parents and its own metadata dict (callers may mutate theirs)."""
    return Commit(
        id=commit.id,
        metarange_id=commit.metarange_id,
        parents=tuple(commit.parents),
        message=commit.message,
        committer=commit.committer,
        creation_date=int(commit.creation_date),
        metadata=dict(commit.metadata),
        generation=int(commit.generation),
    )


class _TokenArea:
    """The entries of one staging token: a dict plus the sorted list of its keys, and for each
    key the version and origin of its last write (the change feed)."""

    __slots__ = ("values", "keys", "written")

    def __init__(self) -> None:
        self.values: dict[bytes, tuple[bytes, bytes] | None] = {}
        self.keys: list[bytes] = []
        self.written: dict[bytes, tuple[int, str]] = {}  # key -> (seq, origin)

    def put(self, key: bytes, stored, seq: int, origin: str) -> None:
        if key not in self.values:
            insort(self.keys, key)
        self.values[key] = stored
        self.written[key] = (seq, origin)


class _Shared:
    """What the peers of a MemoryStagingStore share: the lock, the entries, the versions."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.areas: dict[str, _TokenArea] = {}
        self.versions: dict[str, tuple[int, int]] = {}  # token -> (version, reset_version)


class MemoryStagingStore:
    """StagingStore in a dict (see ``lakefuse.graveler.ports.StagingStore``)."""

    def __init__(self, page_size: int = 1000, *, _shared: _Shared | None = None):
        if page_size < 1:
            raise InvalidArgument(f"staging page size must be >= 1, got {page_size}")
        self.page_size = page_size
        self.origin: str = uuid.uuid4().hex
        self._shared = _shared or _Shared()
        self._lock = self._shared.lock
        self._areas = self._shared.areas
        self._versions = self._shared.versions

    def peer(self) -> "MemoryStagingStore":
        """Another store on the same entries, with its own origin (a second process's view)."""
        return MemoryStagingStore(self.page_size, _shared=self._shared)

    def _bump(self, token: str, reset: bool = False) -> int:
        """The token's next version (call with the lock held)."""
        version, reset_version = self._versions.get(token, (0, 0))
        version += 1
        self._versions[token] = (version, version if reset else reset_version)
        return version

    def set(self, token: StagingToken, key: bytes, value: ValueRecord | None) -> None:
        key = _key_bytes(key)
        stored = _stored_value(value)
        with self._lock:
            seq = self._bump(token)
            self._areas.setdefault(token, _TokenArea()).put(key, stored, seq, self.origin)

    def set_many(self, token: StagingToken, items: Iterable[tuple[bytes, ValueRecord | None]]) -> None:
        rows = [(_key_bytes(key), _stored_value(value)) for key, value in items]  # validate all first
        if not rows:
            return
        with self._lock:
            seq = self._bump(token)
            area = self._areas.setdefault(token, _TokenArea())
            for key, stored in rows:
                area.put(key, stored, seq, self.origin)

    def get(self, token: StagingToken, key: bytes):
        key = _key_bytes(key)
        with self._lock:
            area = self._areas.get(token)
            if area is None or key not in area.values:
                return ...
            stored = area.values[key]
        return None if stored is None else ValueRecord(key=key, identity=stored[0], value=stored[1])

    def iterate(self, token: StagingToken, from_key: bytes = b"",
                until: bytes | None = None) -> Iterator[tuple[bytes, ValueRecord | None]]:
        position_after: bytes | None = None
        start = _key_bytes(from_key)
        while True:
            with self._lock:
                area = self._areas.get(token)
                if area is None:
                    return
                if position_after is None:
                    index = bisect_left(area.keys, start)
                else:
                    index = bisect_right(area.keys, position_after)
                page = [(key, area.values[key]) for key in area.keys[index : index + self.page_size]]
            for key, stored in page:
                if until is not None and key >= until:
                    return
                yield key, (None if stored is None else ValueRecord(key=key, identity=stored[0], value=stored[1]))
            if len(page) < self.page_size:
                return
            position_after = page[-1][0]

    def drop(self, token: StagingToken) -> None:
        self.drop_tokens((token,))

    def drop_tokens(self, tokens: Iterable[StagingToken]) -> None:
        with self._lock:
            for token in tokens:
                self._areas.pop(token, None)
                self._versions.pop(token, None)

    def drop_prefix(self, token: StagingToken, prefix: bytes) -> None:
        prefix = _key_bytes(prefix)
        with self._lock:
            self._bump(token, reset=True)
            area = self._areas.get(token)
            if area is None:
                return
            start = bisect_left(area.keys, prefix)
            end = start
            while end < len(area.keys) and area.keys[end].startswith(prefix):
                del area.values[area.keys[end]]
                del area.written[area.keys[end]]
                end += 1
            del area.keys[start:end]
            if not area.keys:
                del self._areas[token]

    def count(self, token: StagingToken) -> int:
        with self._lock:
            area = self._areas.get(token)
            return 0 if area is None else len(area.keys)

    def changes_since(
        self, token: StagingToken, version: int, limit: int = 10_000, exclude_origin: str | None = None
    ) -> StagingChanges:
        """See ``StagingStore.changes_since`` (a scan of the token's keys: for tests)."""
        since, limit = check_feed_arguments(version, limit)
        with self._lock:
            current, reset_version = self._versions.get(token, (0, 0))
            area = self._areas.get(token)
            keys: list[bytes] = []
            if area is not None and current > since:
                for key, (seq, origin) in area.written.items():
                    if since < seq <= current and origin != exclude_origin:
                        keys.append(key)
                        if len(keys) > limit:
                            break
        return StagingChanges.between(since, current, reset_version, keys, limit)


@dataclass
class _RepoState:
    repo: Repository
    branches: dict[str, Branch] = field(default_factory=dict)
    tags: dict[str, CommitID] = field(default_factory=dict)
    commits: dict[str, Commit] = field(default_factory=dict)


class MemoryRefStore:
    """RefStore in dicts (see ``lakefuse.graveler.ports.RefStore``)."""

    def __init__(self, staging: MemoryStagingStore | None = None):
        self._staging = staging
        self._lock = threading.RLock()
        self._repos: dict[str, _RepoState] = {}

    @property
    def origin(self) -> str | None:
        """The origin ``stage_on_branch`` stamps on staged rows: its staging store's."""
        return self._staging.origin if self._staging is not None else None

    def peer(self, staging: MemoryStagingStore | None = None) -> "MemoryRefStore":
        """Another store on the same refs, staging through ``staging`` (a ``peer()`` of this
        store's: another origin) - a second process's view, for tests."""
        other = MemoryRefStore(staging)
        other._lock = self._lock
        other._repos = self._repos
        return other

    def _state(self, repo_id: str) -> _RepoState:
        state = self._repos.get(repo_id)
        if state is None:
            raise RepositoryNotFound(f"repository {repo_id!r} not found")
        return state

    def _branch(self, repo_id: str, branch_id: str) -> Branch:
        branch = self._state(repo_id).branches.get(branch_id)
        if branch is None:
            raise RefNotFound(f"branch {branch_id!r} not found in repository {repo_id!r}")
        return branch

    def _drop_staging(self, branches: Iterable[Branch]) -> None:
        if self._staging is None:
            return
        tokens = set()
        for branch in branches:
            tokens.add(branch.staging_token)
            tokens.update(branch.sealed_tokens)
        self._staging.drop_tokens(tokens)

    # repositories -------------------------------------------------------------------------
    def create_repository(self, repo: Repository, initial_commit: Commit, branch: Branch) -> None:
        with self._lock:
            if repo.id in self._repos:
                raise AlreadyExists(f"repository {repo.id!r} already exists")
            state = _RepoState(repo=repo)
            state.commits[initial_commit.id] = _normalized_commit(initial_commit)
            state.branches[branch.id] = _normalized_branch(branch)
            self._repos[repo.id] = state

    def get_repository(self, repo_id: RepositoryID) -> Repository:
        with self._lock:
            return self._state(repo_id).repo

    def list_repositories(self) -> list[Repository]:
        with self._lock:
            return [self._repos[repo_id].repo for repo_id in sorted(self._repos)]

    def delete_repository(self, repo_id: RepositoryID) -> None:
        with self._lock:
            state = self._state(repo_id)
            del self._repos[repo_id]
            self._drop_staging(state.branches.values())

    # branches -----------------------------------------------------------------------------
    def create_branch(self, repo_id: RepositoryID, branch: Branch) -> None:
        with self._lock:
            state = self._state(repo_id)
            if branch.id in state.branches:
                raise AlreadyExists(f"branch {branch.id!r} already exists in repository {repo_id!r}")
            state.branches[branch.id] = _normalized_branch(branch)

    def get_branch(self, repo_id: RepositoryID, branch_id: BranchID) -> Branch:
        with self._lock:
            return self._branch(repo_id, branch_id)

    def list_branches(self, repo_id: RepositoryID) -> list[Branch]:
        with self._lock:
            branches = self._state(repo_id).branches
            return [branches[name] for name in sorted(branches)]

    def delete_branch(self, repo_id: RepositoryID, branch_id: BranchID) -> None:
        with self._lock:
            branch = self._branch(repo_id, branch_id)
            del self._repos[repo_id].branches[branch_id]
            self._drop_staging([branch])

    def seal_staging_token(self, repo_id: RepositoryID, branch_id: BranchID, new_token: StagingToken) -> Branch:
        with self._lock:
            current = self._branch(repo_id, branch_id)
            sealed = Branch(
                id=current.id,
                commit_id=current.commit_id,
                staging_token=new_token,
                sealed_tokens=(current.staging_token, *current.sealed_tokens),
            )
            self._repos[repo_id].branches[branch_id] = sealed
            return sealed

    def compare_and_swap_branch(self, repo_id: RepositoryID, branch_id: BranchID, expected: Branch, new: Branch) -> None:
        with self._lock:
            current = self._branch(repo_id, branch_id)
            if (current.commit_id, current.staging_token, current.sealed_tokens) != (
                expected.commit_id,
                expected.staging_token,
                tuple(expected.sealed_tokens),
            ):
                raise ConcurrentUpdate(f"branch {branch_id!r} of repository {repo_id!r} moved concurrently; retry")
            self._repos[repo_id].branches[branch_id] = Branch(
                id=current.id,
                commit_id=new.commit_id,
                staging_token=new.staging_token,
                sealed_tokens=tuple(new.sealed_tokens),
            )

    def stage_on_branch(
        self,
        repo_id: RepositoryID,
        branch_id: BranchID,
        expected: Branch,
        items: Iterable[tuple[bytes, ValueRecord | None]],
    ) -> bool:
        """Check and write under the lock every branch move takes (see the port)."""
        if self._staging is None:
            raise InvalidArgument("this MemoryRefStore was created without a staging store: it cannot stage writes")
        with self._lock:
            state = self._repos.get(repo_id)
            current = state.branches.get(branch_id) if state is not None else None
            if current is None or (current.commit_id, current.staging_token, current.sealed_tokens) != (
                expected.commit_id,
                expected.staging_token,
                tuple(expected.sealed_tokens),
            ):
                return False
            self._staging.set_many(expected.staging_token, items)
            return True

    # tags ---------------------------------------------------------------------------------
    def create_tag(self, repo_id: RepositoryID, tag_id: TagID, commit_id: CommitID, force: bool = False) -> None:
        with self._lock:
            tags = self._state(repo_id).tags
            if tag_id in tags and not force:
                raise AlreadyExists(f"tag {tag_id!r} already exists in repository {repo_id!r}")
            tags[tag_id] = commit_id

    def get_tag(self, repo_id: RepositoryID, tag_id: TagID) -> CommitID:
        with self._lock:
            commit_id = self._state(repo_id).tags.get(tag_id)
            if commit_id is None:
                raise RefNotFound(f"tag {tag_id!r} not found in repository {repo_id!r}")
            return commit_id

    def list_tags(self, repo_id: RepositoryID) -> list[tuple[TagID, CommitID]]:
        with self._lock:
            tags = self._state(repo_id).tags
            return [(TagID(name), tags[name]) for name in sorted(tags)]

    def delete_tag(self, repo_id: RepositoryID, tag_id: TagID) -> None:
        with self._lock:
            tags = self._state(repo_id).tags
            if tag_id not in tags:
                raise RefNotFound(f"tag {tag_id!r} not found in repository {repo_id!r}")
            del tags[tag_id]

    # commits ------------------------------------------------------------------------------
    def add_commit(self, repo_id: RepositoryID, commit: Commit) -> None:
        normalized = _normalized_commit(commit)
        with self._lock:
            commits = self._state(repo_id).commits
            existing = commits.get(commit.id)
            if existing is None:
                commits[commit.id] = normalized
            elif existing != normalized:
                raise AlreadyExists(f"commit {commit.id!r} already exists in repository {repo_id!r} with other content")

    def get_commit(self, repo_id: RepositoryID, commit_id: CommitID) -> Commit:
        with self._lock:
            commit = self._state(repo_id).commits.get(commit_id)
            if commit is None:
                raise RefNotFound(f"commit {commit_id!r} not found in repository {repo_id!r}")
            return _normalized_commit(commit)

    def find_commits_by_prefix(self, repo_id: RepositoryID, prefix: str, limit: int = 10) -> list[CommitID]:
        with self._lock:
            matches = sorted(cid for cid in self._state(repo_id).commits if cid.startswith(prefix))
        return [CommitID(cid) for cid in matches[: max(0, int(limit))]]

    def list_commits(self, repo_id: RepositoryID) -> Iterator[Commit]:
        with self._lock:
            commits = [_normalized_commit(commit) for commit in self._state(repo_id).commits.values()]
        return iter(commits)
