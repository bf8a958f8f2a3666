"""Commits as a graph: how a commit ID is computed, how history is walked, and which commit is
the merge base of two others.

Owns, and nothing else does:

- ``commit_id_of`` / ``new_commit``: the commit ID, computed exactly as lakeFS's
  ``Commit.Identity`` and hex content address compute it: the hex SHA-256 of the typed
  stream of ``lakefuse.graveler.ident`` holding the string ``CANONICAL_COMMIT_FORMAT``
  (``"commit:v1"``), the committer, the message and the metarange ID (strings), the creation
  date in whole Unix seconds (int64), the metadata (string map, keys in byte order) and, as an
  embedded identity, the identity of the parents (the SHA-256 of the parent IDs as a string
  slice, in order).  A parent's ID is itself such a digest, so a commit ID covers its whole
  history.  The parents are in lakeFS's current order (``CommitVersionParentSwitch``): a merge
  commit's first parent is the destination's head, its second the source.  The generation
  (derived from the parents) and lakeFS's commit version are not part of the digest.
- ``CommitGraph``: cached commit lookups (commits are immutable), history walks (``log``) and
  ``merge_bases`` / ``merge_base`` as git-merge-base defines them.

Merge base: a *best* common ancestor is a common ancestor that is not an ancestor of another
common ancestor.  The search paints ancestors of both sides in descending generation order
(generation = 1 + max parent generation, so every commit is visited after all its descendants
in the walk) and stops once every commit still queued is an ancestor of an already-found base,
so it touches only the commits between the two heads and their bases.  With criss-cross
histories there can be several best bases; ``merge_base`` then picks deterministically the one
with the highest generation, then the latest creation date, then the smallest commit ID (git
without ``--all`` also returns just one of them; it does no recursive merge of the bases here
and neither does lakeFS).
"""

from __future__ import annotations

import heapq
import threading
from typing import Iterator, Mapping, Sequence

from cachetools import LRUCache

from lakefuse.graveler.ident import AddressWriter
from lakefuse.graveler.model import Commit, CommitID, MetaRangeID, RepositoryID, string_map
from lakefuse.graveler.ports import RefStore

#: the first string of every commit's identity stream, as lakeFS writes it
CANONICAL_COMMIT_FORMAT = "commit:v1"

_PARENT1 = 1
_PARENT2 = 2
_STALE = 4
_BOTH = _PARENT1 | _PARENT2


def commit_id_of(
    metarange_id: MetaRangeID,
    parents: Sequence[CommitID],
    message: str,
    committer: str,
    creation_date: int,
    metadata: Mapping[str, str],
) -> CommitID:
    """lakeFS's commit ID of this content (see the module docstring); InvalidArgument for a
    creation date outside int64 or text that is not valid Unicode."""
    parents_identity = AddressWriter().string_slice(str(parent) for parent in parents).identity()
    return CommitID(
        AddressWriter()
        .string(CANONICAL_COMMIT_FORMAT)
        .string(committer)
        .string(message)
        .string(str(metarange_id))
        .int64(int(creation_date))
        .string_map(metadata)
        .embedded(parents_identity)
        .hex_identity()
    )


def new_commit(
    metarange_id: MetaRangeID,
    parents: Sequence[Commit],
    message: str,
    committer: str,
    creation_date: int,
    metadata: Mapping[str, str] | None = None,
) -> Commit:
    """A commit on top of ``parents`` (first parent first) with its ID and generation."""
    meta = string_map(metadata, "commit metadata")
    parent_ids = tuple(parent.id for parent in parents)
    creation_date = int(creation_date)
    return Commit(
        id=commit_id_of(metarange_id, parent_ids, message, committer, creation_date, meta),
        metarange_id=metarange_id,
        parents=parent_ids,
        message=message,
        committer=committer,
        creation_date=creation_date,
        metadata=meta,
        generation=1 + max((parent.generation for parent in parents), default=0),
    )


class CommitGraph:
    """Commit lookups through an LRU cache, history walks and merge bases."""

    def __init__(self, refs: RefStore, cache_size: int = 100_000):
        self._refs = refs
        self._cache: LRUCache = LRUCache(maxsize=cache_size)
        self._lock = threading.Lock()

    def get(self, repo_id: RepositoryID, commit_id: CommitID) -> Commit:
        key = (repo_id, commit_id)
        with self._lock:
            commit = self._cache.get(key)
        if commit is None:
            commit = self._refs.get_commit(repo_id, commit_id)
            with self._lock:
                self._cache[key] = commit
        return commit

    def remember(self, repo_id: RepositoryID, commit: Commit) -> None:
        with self._lock:
            self._cache[(repo_id, commit.id)] = commit

    def forget_repository(self, repo_id: RepositoryID) -> None:
        with self._lock:
            for key in [key for key in self._cache.keys() if key[0] == repo_id]:
                self._cache.pop(key, None)

    # -- history -------------------------------------------------------------------------

    def log(self, repo_id: RepositoryID, head: Commit, all_parents: bool = False) -> Iterator[Commit]:
        """``head`` and its history, newest first: first parents only, or (``all_parents``)
        every ancestor once, ordered by creation date then generation, both descending."""
        if not all_parents:
            commit: Commit | None = head
            while commit is not None:
                yield commit
                commit = self.get(repo_id, commit.parents[0]) if commit.parents else None
            return
        seen = {head.id}
        queue = [(-head.creation_date, -head.generation, head.id, head)]
        while queue:
            _date, _gen, _id, commit = heapq.heappop(queue)
            yield commit
            for parent_id in commit.parents:
                if parent_id not in seen:
                    seen.add(parent_id)
                    parent = self.get(repo_id, parent_id)
                    heapq.heappush(queue, (-parent.creation_date, -parent.generation, parent.id, parent))

    def is_ancestor(self, repo_id: RepositoryID, ancestor: Commit, descendant: Commit) -> bool:
        """True if ``ancestor`` is ``descendant`` or reachable from it through parents."""
        if ancestor.id == descendant.id:
            return True
        seen = {descendant.id}
        stack = [descendant]
        while stack:
            commit = stack.pop()
            for parent_id in commit.parents:
                if parent_id == ancestor.id:
                    return True
                if parent_id in seen:
                    continue
                seen.add(parent_id)
                parent = self.get(repo_id, parent_id)
                if parent.generation >= ancestor.generation:  # lower generations cannot lead to it
                    stack.append(parent)
        return False

    # -- merge bases ---------------------------------------------------------------------

    def merge_bases(self, repo_id: RepositoryID, left: Commit, right: Commit) -> list[Commit]:
        """All best common ancestors of ``left`` and ``right`` (git merge-base --all), in the
        order ``merge_base`` prefers them.  Empty if they share no history."""
        if left.id == right.id:
            return [left]
        flags: dict[CommitID, int] = {left.id: _PARENT1, right.id: _PARENT2}
        commits: dict[CommitID, Commit] = {left.id: left, right.id: right}
        queue = [(-left.generation, left.id), (-right.generation, right.id)]
        queued = {left.id, right.id}
        active = 2  # queued commits not (yet) known to be ancestors of a found base
        bases: list[Commit] = []
        while queue and active:
            _gen, commit_id = heapq.heappop(queue)
            queued.discard(commit_id)
            flag = flags[commit_id]
            if not flag & _STALE:
                active -= 1
                if flag & _BOTH == _BOTH:
                    bases.append(commits[commit_id])
                    flag |= _STALE
            for parent_id in commits[commit_id].parents:
                old = flags.get(parent_id, 0)
                new = old | flag
                if new == old:
                    continue
                flags[parent_id] = new
                if parent_id in queued:
                    if new & _STALE and not old & _STALE:
                        active -= 1
                    continue
                if parent_id not in commits:
                    commits[parent_id] = self.get(repo_id, parent_id)
                heapq.heappush(queue, (-commits[parent_id].generation, parent_id))
                queued.add(parent_id)
                if not new & _STALE:
                    active += 1
        bases.sort(key=lambda c: (-c.generation, -c.creation_date, c.id))
        return bases

    def merge_base(self, repo_id: RepositoryID, left: Commit, right: Commit) -> Commit | None:
        """The best common ancestor (deterministic choice among several, see module docstring)."""
        bases = self.merge_bases(repo_id, left, right)
        return bases[0] if bases else None
