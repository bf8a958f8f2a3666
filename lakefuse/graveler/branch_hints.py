"""``BranchHints``: the state of each branch this process last read or wrote, and
``CheckedReads``: the read path of any ref, re-checked against the branch it read.

A hint saves the database read of the branch row that a staged write or a read would
otherwise start with, and it is never trusted alone: a staged write hands the hinted state to
``RefStore.stage_on_branch``, whose transaction checks it (a stale hint costs one refused
write, then the branch is read and the write computed again), and a read started from a hint
reads the branch once afterwards and starts over if it moved (``Graveler.get``).  So a hint
changes how many round trips an operation makes, never what it answers.  Thread-safe: a
dict's single-key reads and writes are atomic, and a lost update only makes a hint older.

A read of a branch (``CheckedReads.read``) re-reads the branch row after it and reads again if
the branch moved meanwhile: a commit may have dropped the staging rows under the read.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from lakefuse.errors import RefNotFound
from lakefuse.graveler.commits import CommitGraph
from lakefuse.graveler.model import BranchID, RepositoryID
from lakefuse.graveler.ports import Branch, RefStore, Repository
from lakefuse.graveler.refexpr import RefKind, ResolvedRef
from lakefuse.graveler.views import RefView


def same_state(left: Branch, right: Branch) -> bool:
    """Whether two states of a branch are the same (head, staging token, sealed tokens)."""
    return (left.commit_id, left.staging_token, tuple(left.sealed_tokens)) == (
        right.commit_id,
        right.staging_token,
        tuple(right.sealed_tokens),
    )


class BranchHints:
    def __init__(self, refs: RefStore):
        self._refs = refs
        self._seen: dict[tuple[str, str], Branch] = {}

    def hint(self, repo_id: str, branch_id: str) -> Branch | None:
        """The branch as last seen here, or None (never seen, or seen gone)."""
        return self._seen.get((repo_id, branch_id))

    def read(self, repo_id: str, branch_id: str) -> Branch:
        """The branch as the database has it now (``RefNotFound`` if gone), remembered."""
        try:
            branch = self._refs.get_branch(RepositoryID(repo_id), BranchID(branch_id))
        except RefNotFound:
            self._seen.pop((repo_id, branch_id), None)
            raise
        self._seen[(repo_id, branch_id)] = branch
        return branch

    def saw(self, repo_id: str, branch: Branch) -> None:
        """The branch is now ``branch`` (this process just moved or read it)."""
        self._seen[(repo_id, branch.id)] = branch

    def forget(self, repo_id: str, branch_id: str | None = None) -> None:
        """Drop the hint of a branch (deleted, reset), or of every branch of a repository."""
        if branch_id is not None:
            self._seen.pop((repo_id, branch_id), None)
            return
        for key in [key for key in self._seen if key[0] == repo_id]:
            self._seen.pop(key, None)


class CheckedReads:
    """Reads of a ref through a ``RefView``, re-checked on a branch (see the module docstring)."""

    def __init__(self, hints: BranchHints, commits: CommitGraph, resolve: Callable[[str, str], ResolvedRef],
                 view_of: Callable[[Repository, ResolvedRef], RefView], retries: int):
        self._hints = hints
        self._commits = commits
        self._resolve = resolve
        self._view_of = view_of
        self._retries = retries

    def read(self, repo: Repository, ref: str, read: Callable[[RefView], tuple]):
        """``read(view)`` -> ``(answer, from_staging)`` on ``ref``; the answer.  One from the
        staging rows of the branch's state read just before needs no check; one from a hinted
        state always gets it."""
        repo_id = repo.id
        hint = self._hints.hint(repo_id, ref)
        if hint is not None:
            resolved = ResolvedRef(ref, RefKind.BRANCH, self._commits.get(repo_id, hint.commit_id), hint)
        else:
            resolved = self._resolve(repo_id, ref)
            if resolved.branch is not None:
                self._hints.saw(repo_id, resolved.branch)
        answer = None
        for _attempt in range(self._retries):
            answer, from_staging = read(self._view_of(repo, resolved))
            if resolved.branch is None or (from_staging and hint is None):
                break
            try:
                moved = self._moved(repo_id, resolved)
            except RefNotFound:
                if hint is None:
                    raise
                moved = self._resolve(repo_id, ref)  # the hinted branch is gone: what the name is now
            hint = None
            if moved is None:
                break
            resolved = moved
        return answer

    def _moved(self, repo_id: str, resolved: ResolvedRef) -> ResolvedRef | None:
        """None if the branch of ``resolved`` has not moved, else it re-resolved."""
        current = self._hints.read(repo_id, resolved.branch.id)
        if same_state(current, resolved.branch):
            return None
        return replace(resolved, branch=current, commit=self._commits.get(RepositoryID(repo_id), current.commit_id))
