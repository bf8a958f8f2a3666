"""``BranchHints``: the state of each branch this process last read or wrote.

A hint saves the database read of the branch row that a staged write or a read would
otherwise start with, and it is never trusted alone: a staged write hands the hinted state to
``RefStore.stage_on_branch``, whose transaction checks it (a stale hint costs one refused
write, then the branch is read and the write computed again), and a read started from a hint
reads the branch once afterwards and starts over if it moved (``Graveler.get``).  So a hint
changes how many round trips an operation makes, never what it answers.  Thread-safe: a
dict's single-key reads and writes are atomic, and a lost update only makes a hint older.
"""

from __future__ import annotations

from lakefuse.errors import RefNotFound
from lakefuse.graveler.model import BranchID, RepositoryID
from lakefuse.graveler.ports import Branch, RefStore


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
