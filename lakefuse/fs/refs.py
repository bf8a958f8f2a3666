"""Which tree a name under a repository directory stands for: ``Refs``.

Owns the mount's ``Tree`` of each ref (one per branch, one per tag or commit), the short-lived
caches of names that are not paths in a tree (what a ref name resolves to, which repositories
exist), and how long the kernel may trust each: a full commit ID forever, a tag for a minute,
a branch for ``branch_ttl`` (``watched_branch_ttl`` inside a watched branch); and what a
branch created or deleted through this mount leaves of them (``branch_created``,
``branch_deleted``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lakefuse.fs.backend import MountRef, MountRefKind
from lakefuse.fs.replies import WouldBlock
from lakefuse.fs.tree import Tree, tree_key

if TYPE_CHECKING:
    from lakefuse.fs.state import MountState

#: resolved ref names kept at most (the cache is emptied when full)
REF_CACHE_ENTRIES = 10_000


class Refs:
    """Thread-safe (the mount's lock)."""

    def __init__(self, state: MountState):
        self._state = state
        self._trees: dict[tuple, Tree] = {}
        self._ref_cache: dict[tuple[str, str], tuple[float, MountRef]] = {}
        self._repo_cache: tuple[float, set[str]] | None = None

    def tree_for(self, repo: str, ref: MountRef) -> Tree:
        state = self._state
        key = tree_key(repo, ref)
        with state.lock:
            tree = self._trees.get(key)
            if tree is None:
                writable = ref.is_branch and not state.read_only
                feed = state.change_feed if ref.is_branch else None
                ttl = None if not ref.is_branch else state.watched_branch_ttl if feed else state.branch_ttl
                tree = Tree(state.backend, repo, ref, writable=writable, ttl=ttl, change_feed=feed,
                            metadata_entries=state.metadata_entries, learn_in_background=state.learner.learn)
                self._trees[key] = tree
            return tree

    def branch_tree(self, repo: str, branch: str) -> Tree | None:
        """The tree of branch ``branch`` if this mount made one."""
        with self._state.lock:
            return self._trees.get(tree_key(repo, MountRef(MountRefKind.BRANCH, branch, "")))

    def branch_created(self, repo: str, ref: MountRef) -> None:
        """The branch ``ref`` was just created through this mount: its name resolves to it,
        and whatever the mount knew of an earlier branch of that name is gone."""
        self._drop_branch_tree(repo, ref.name)
        self.remember(repo, ref, time.monotonic())

    def branch_deleted(self, repo: str, name: str) -> None:
        """The branch ``name`` was just deleted through this mount: its name resolves again,
        and its nodes no longer stand for anything."""
        with self._state.lock:
            self._ref_cache.pop((repo, name), None)
        self._drop_branch_tree(repo, name)

    def _drop_branch_tree(self, repo: str, name: str) -> None:
        tree = self.branch_tree(repo, name)
        if tree is None:
            return
        tree.forget_all()
        tree.control_results.clear()
        table = self._state.table
        for node in table.nodes():
            if node.tree is tree:
                table.detach(node)
        table.detach_listed(tree.key)

    def trees(self) -> list[Tree]:
        with self._state.lock:
            return list(self._trees.values())

    def ttl(self, tree: Tree | None) -> float:
        """How long the kernel may trust names and attributes in ``tree``."""
        if tree is None:
            return self._state.branch_ttl
        return self._state.immutable_ttl if tree.ttl is None else tree.ttl

    def resolve(self, repo: str, name: str, blocking: bool) -> MountRef:
        now = time.monotonic()
        hit = self._ref_cache.get((repo, name))
        if hit is not None and hit[0] > now:
            return hit[1]
        if not blocking:
            raise WouldBlock
        ref = self._state.backend.resolve_ref(repo, name)
        self.remember(repo, ref, now)
        return ref

    def remember(self, repo: str, ref: MountRef, now: float) -> None:
        """``ref`` was resolved (or listed) at ``now``."""
        with self._state.lock:
            if len(self._ref_cache) > REF_CACHE_ENTRIES:
                self._ref_cache.clear()
            self._ref_cache[(repo, ref.name)] = (now + self.timeout(ref), ref)

    def timeout(self, ref: MountRef) -> float:
        """How long the kernel may trust the name of ``ref``."""
        if ref.kind is MountRefKind.COMMIT and ref.name == ref.commit_id:
            return self._state.immutable_ttl  # a full commit ID never changes meaning
        if ref.kind is MountRefKind.TAG:
            return min(60.0, self._state.immutable_ttl)
        return self._state.branch_ttl

    def repositories(self, blocking: bool) -> set[str]:
        now = time.monotonic()
        cached = self._repo_cache
        if cached is not None and cached[0] > now:
            return cached[1]
        if not blocking:
            raise WouldBlock
        return self.listed_repositories(self._state.backend.list_repositories())

    def listed_repositories(self, repos) -> set[str]:
        """The repositories are ``repos`` (just listed)."""
        names = set(repos)
        self._repo_cache = (time.monotonic() + self._state.branch_ttl, names)
        return names
