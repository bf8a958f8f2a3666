"""Merge and revert of a branch: ``BranchMerger``.

Owns: the clean-destination check (a merge or revert needs a branch without uncommitted
changes; staged entries that change nothing are sealed away), the three-way merge into a new
commit (``merge``'s table does the merging of content), the branch move (compare-and-swap from
the checked state, dropping its sealed tokens) and when the merge/revert hooks fire.  The
public entry points are ``Graveler.merge`` and ``Graveler.revert``, which check the committer
and delegate here.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable, Mapping

from lakefuse.errors import DirtyBranch, InvalidArgument, NoChanges, RefNotFound
from lakefuse.graveler.changes import diff_metaranges, staged_vs_head
from lakefuse.graveler.commits import CommitGraph, new_commit
from lakefuse.graveler.hooks import HookDispatcher
from lakefuse.graveler.merge import MergeStrategy, merge_metaranges, parse_strategy
from lakefuse.graveler.model import BranchID, Commit, StagingToken
from lakefuse.graveler.ports import Branch, CommittedStore, RefStore, Repository, StagingStore
from lakefuse.graveler.refexpr import ResolvedRef
from lakefuse.graveler.views import RefView


@dataclass(frozen=True, eq=False)
class BranchMerger:
    """Merges into and reverts on branches, through exactly the collaborators it needs (the
    ``Graveler`` builds it from its own).  ``hooks`` is the Graveler's own dispatcher: a hooks
    object set on the Graveler later is seen here too."""

    refs: RefStore
    commits: CommitGraph
    staging: StagingStore
    store_of: Callable[[Repository], CommittedStore]  # a repository's committed store
    hooks: HookDispatcher
    repository: Callable[[str], Repository]  # a repository by ID
    resolve: Callable[[str, str], ResolvedRef]  # (repository ID, ref expression)
    branch_view: Callable[[Repository, Branch, Commit], RefView]  # head + the branch's staging
    new_token: Callable[[], StagingToken]  # a fresh staging token
    drop_tokens: Callable[[Iterable[StagingToken]], None]  # best effort, never raises
    now: Callable[[], int]  # the clock, in whole seconds

    def _clean_destination(self, repo: Repository, branch_id: str, what: str) -> tuple[Branch, Commit]:
        """The state a merge or revert compare-and-swaps from, and its head commit.

        ``DirtyBranch`` if the branch has uncommitted changes.  Staged entries that change
        nothing (an identical re-upload) must not survive on top of the result, where they
        would shadow it: then the staging token is sealed first (as a commit does) and the
        returned state's sealed tokens are what the caller swaps away and drops."""
        branch = self.refs.get_branch(repo.id, BranchID(branch_id))
        head = self.commits.get(repo.id, branch.commit_id)
        tokens = (branch.staging_token, *branch.sealed_tokens)
        if all(self.staging.count(token) == 0 for token in tokens):
            return branch, head
        dirty = DirtyBranch(f"{what}: branch {branch_id!r} has uncommitted changes; commit or reset them first")
        if next(staged_vs_head(self.branch_view(repo, branch, head)), None) is not None:
            raise dirty
        sealed = self.refs.seal_staging_token(repo.id, BranchID(branch_id), self.new_token())
        head = self.commits.get(repo.id, sealed.commit_id)
        content = RefView(self.store_of(repo), head.metarange_id, self.staging, sealed.sealed_tokens)
        if next(staged_vs_head(content), None) is not None:
            raise dirty  # a write landed meanwhile: it stays staged (sealed), a commit takes it
        return sealed, head

    def _move_branch(self, repo: Repository, expected: Branch, commit: Commit) -> None:
        """CAS the branch to ``commit``, keeping its staging token, dropping sealed tokens."""
        self.refs.add_commit(repo.id, commit)
        self.commits.remember(repo.id, commit)
        self.refs.compare_and_swap_branch(
            repo.id, expected.id, expected, Branch(expected.id, commit.id, expected.staging_token, ())
        )
        self.drop_tokens(expected.sealed_tokens)

    def merge(self, repo_id: str, dest_branch_id: str, source_ref: str, committer: str, message: str | None,
              metadata: Mapping[str, str] | None, strategy: str | MergeStrategy | None) -> Commit:
        """``Graveler.merge`` (see there), after its argument checks."""
        strategy = parse_strategy(strategy)
        metadata = dict(metadata or {})
        repo = self.repository(repo_id)
        store = self.store_of(repo)
        what = f"merge of {source_ref!r} into {dest_branch_id!r}"
        try:
            self.refs.get_branch(repo.id, BranchID(dest_branch_id))
        except RefNotFound:
            raise RefNotFound(f"merge destination {dest_branch_id!r} is not a branch of repository {repo_id!r}") from None
        source = self.resolve(repo_id, source_ref).commit
        dest, dest_head = self._clean_destination(repo, dest_branch_id, what)
        base = self.commits.merge_base(repo.id, source, dest_head)
        if base is not None and base.id == source.id:
            raise NoChanges(f"{what}: nothing to merge, {source_ref!r} is already contained in {dest_branch_id!r}")
        base_metarange = base.metarange_id if base is not None else store.empty_metarange()
        message = message if message else f"Merge '{source_ref}' into '{dest_branch_id}'"

        event = self.hooks.commit_events(repo, dest.id, source_ref, message, committer, metadata)

        def pre_merge() -> None:
            self.hooks.fire_pre("pre-merge", partial(
                event, view=RefView(store, source.metarange_id),
                changes=lambda: diff_metaranges(store, base_metarange, source.metarange_id)))

        metarange = merge_metaranges(
            store, base_metarange, source.metarange_id, dest_head.metarange_id, strategy, what, before_write=pre_merge
        )
        commit = new_commit(metarange, [dest_head, source], message, committer, self.now(), metadata)
        self._move_branch(repo, dest, commit)
        self.hooks.fire_post("post-merge", partial(
            event, view=RefView(store, metarange), commit=commit,
            changes=lambda: diff_metaranges(store, dest_head.metarange_id, metarange)))
        return commit

    def revert(self, repo_id: str, branch_id: str, ref: str, committer: str, parent_number: int | None,
               message: str | None, metadata: Mapping[str, str] | None, allow_empty: bool) -> Commit:
        """``Graveler.revert`` (see there), after its argument checks."""
        metadata = dict(metadata or {})
        repo = self.repository(repo_id)
        store = self.store_of(repo)
        self.refs.get_branch(repo.id, BranchID(branch_id))
        target = self.resolve(repo_id, ref).commit
        what = f"revert of {ref!r} on {branch_id!r}"
        if not target.parents:
            raise InvalidArgument(f"{what}: commit {target.id[:12]} is the initial commit, it has no parent to revert to")
        if parent_number is None:
            if len(target.parents) > 1:
                raise InvalidArgument(
                    f"{what}: commit {target.id[:12]} is a merge commit; choose the parent to revert to (parent number 1-{len(target.parents)})"
                )
            parent_number = 1
        if not 1 <= parent_number <= len(target.parents):
            raise InvalidArgument(f"{what}: commit {target.id[:12]} has no parent {parent_number} (it has {len(target.parents)})")
        branch, head = self._clean_destination(repo, branch_id, what)
        parent = self.commits.get(repo.id, target.parents[parent_number - 1])
        metarange = merge_metaranges(store, target.metarange_id, parent.metarange_id, head.metarange_id, None, what)
        if metarange == head.metarange_id and not allow_empty:
            raise NoChanges(f"{what}: reverting changes nothing on the branch")
        first_line = target.message.splitlines()[0] if target.message else ""
        message = message if message else f'Revert "{first_line}"\n\nThis reverts commit {target.id}.'
        event = self.hooks.commit_events(repo, branch_id, branch_id, message, committer, metadata)
        self.hooks.fire_pre("pre-revert", partial(
            event, view=RefView(store, head.metarange_id),
            changes=lambda: diff_metaranges(store, head.metarange_id, metarange)))
        commit = new_commit(metarange, [head], message, committer, self.now(), metadata)
        self._move_branch(repo, branch, commit)
        self.hooks.fire_post("post-revert", partial(
            event, view=RefView(store, metarange), commit=commit,
            changes=lambda: diff_metaranges(store, head.metarange_id, metarange)))
        return commit
