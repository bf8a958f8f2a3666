"""What the control files ``merge``, ``tag``, ``branch`` and ``reset`` of a branch do:
``RefOperations`` (``lakefuse.fs.control`` decides when they run and keeps their results).

Each takes one line and is the CLI's operation through the backend (the same rules for names,
the same errors, the same hooks with the same payloads):

- ``merge``: ``SOURCE_REF [dest-wins|source-wins]`` merges that ref (a name, commit ID, ref
  expression or ``lakefs://REPO/REF`` of this repository) into this branch, like ``lakefuse
  merge`` with its default message.  The mount adds one check to the core's clean-destination
  rule: a file being written through this mount on the branch is an uncommitted change too
  (``DirtyBranch``).  The result: the merge commit's ID.
- ``tag``: ``NAME`` tags the branch's head commit; the result: that commit's ID.
- ``branch``: ``NAME`` creates a branch at the branch's head commit; the result: that ID.
- ``reset``: a key prefix relative to the branch (``.`` for everything, the CLI's prefix rule:
  end a directory with ``/``) drops the uncommitted changes under it, files closed and waiting
  for the stager included.  Files open for writing there are dropped too: every handle open
  for writing on a file under the prefix, and every handle of a file being written there, fails
  with ESTALE from then on (``StaleHandles``: its close too, but a reader's); handles that only
  read an object keep reading it.  The result: the branch's head commit ID.

After a merge or reset the branch's tree forgets what it knew and the kernel is told at once
(``ChangeFeed.changed_here``); a branch created here resolves at once (``Refs.branch_created``).
"""

from __future__ import annotations

import errno
import logging

from lakefuse.errors import DirtyBranch, InvalidArgument
from lakefuse.fs.changes import ChangeFeed
from lakefuse.fs.files import Files
from lakefuse.fs.handles import FileHandle, HandleOps
from lakefuse.fs.nodes import NodeKind
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import Tree
from lakefuse.fs.uploads import Uploader
from lakefuse.graveler.merge import parse_strategy
from lakefuse.uri import SCHEME, parse_uri

log = logging.getLogger(__name__)

#: file names of those being written shown at most in an error
SHOWN_PATHS = 5


def one_line(text: str, usage: str) -> str:
    """The one line an operation takes (blank lines around it ignored): InvalidArgument
    naming ``usage`` if there is none or more than one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise InvalidArgument(f"expected one line, {usage}" if lines else f"empty: expected {usage}")
    return lines[0]


class StaleHandles(HandleOps):
    """The requests on a handle whose file a reset dropped while it was written: ESTALE, but
    the close of a read-only descriptor; release ends the handle as ``Files`` does."""

    def __init__(self, files: Files):
        self._files = files

    @staticmethod
    def _stale(h: FileHandle) -> OSError:
        return OSError(errno.ESTALE, f"{h.node.path}: its uncommitted changes were dropped by a reset")

    def read(self, h: FileHandle, offset: int, size: int) -> bytes:
        raise self._stale(h)

    def write(self, h: FileHandle, offset: int, data: bytes) -> int:
        raise self._stale(h)

    def sync(self, h: FileHandle, any_descriptor: bool) -> None:
        if any_descriptor or h.writable:
            raise self._stale(h)

    def release(self, h: FileHandle) -> None:
        self._files.release(h)


class RefOperations:
    def __init__(self, state: MountState, changes: ChangeFeed, files: Files):
        self._state = state
        self._backend = state.backend
        self._changes = changes
        self._stale_handles = StaleHandles(files)

    def run(self, tree: Tree, name: str, text: str) -> str:
        """Run the operation of control file ``name`` with what was written to it; the result."""
        return getattr(self, name)(tree, text)

    # ------------------------------------------------------------------ the operations

    def merge(self, tree: Tree, text: str) -> str:
        words = one_line(text, "SOURCE_REF [dest-wins|source-wins]").split()
        if len(words) > 2:
            raise InvalidArgument(f"merge: expected SOURCE_REF [dest-wins|source-wins], got {len(words)} words")
        source = self._ref_in_repository(tree, words[0])
        strategy = parse_strategy(words[1]) if len(words) == 2 else None
        self._no_files_being_written(tree, f"merge of {source!r} into {tree.branch!r}")
        commit_id = self._backend.merge(tree.repo, tree.branch, source, strategy.value if strategy else None)
        self._changes.changed_here(tree)
        log.info("merged %s into %s/%s: %s", source, tree.repo, tree.branch, commit_id)
        return commit_id

    def tag(self, tree: Tree, text: str) -> str:
        name = self._name(text, "tag")
        commit_id = self._backend.create_tag(tree.repo, name, tree.branch)
        log.info("tagged %s/%s as %s: %s", tree.repo, tree.branch, name, commit_id)
        return commit_id

    def branch(self, tree: Tree, text: str) -> str:
        name = self._name(text, "branch")
        ref = self._backend.create_branch(tree.repo, name, tree.branch)
        self._state.refs.branch_created(tree.repo, ref)
        log.info("created branch %s/%s from %s: %s", tree.repo, name, tree.branch, ref.commit_id)
        return ref.commit_id

    def reset(self, tree: Tree, text: str) -> str:
        line = one_line(text, "a path prefix relative to the branch, or '.' for everything")
        prefix = None if line in (".", "./") else line.removeprefix("./")
        if prefix is not None and prefix.startswith("/"):
            raise InvalidArgument(f"reset: {line!r} is not relative to the branch (no leading '/'; '.' is everything)")
        backend = self._backend
        backend.branch_head(tree.repo, tree.branch)  # RefNotFound before anything is dropped
        self._state.stager.flush(tree)  # closed files are staged changes: the reset drops them
        self._drop_writers(tree, prefix or "")
        backend.reset(tree.repo, tree.branch, prefix)
        self._changes.changed_here(tree)
        log.info("reset %s/%s under %r", tree.repo, tree.branch, prefix or ".")
        return backend.branch_head(tree.repo, tree.branch)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _name(text: str, kind: str) -> str:
        name = one_line(text, f"the new {kind}'s NAME")
        if name.startswith(SCHEME):
            raise InvalidArgument(f"{kind}: give the NAME only, the repository is this branch's")
        return name

    @staticmethod
    def _ref_in_repository(tree: Tree, text: str) -> str:
        """A ref given plainly or as ``lakefs://REPO/REF`` of this repository."""
        if not text.startswith(SCHEME):
            return text
        uri = parse_uri(text).require_ref()
        if uri.repository != tree.repo or uri.path:
            raise InvalidArgument(f"{text}: expected a ref of repository {tree.repo!r} (lakefs://{tree.repo}/REF)")
        return uri.ref

    def _no_files_being_written(self, tree: Tree, what: str) -> None:
        """Stage the branch's closed files, then refuse if files are still being written on it
        through this mount (uncommitted changes the backend does not know yet)."""
        self._state.stager.flush(tree)
        paths = set(self._state.unstaged.paths(tree))
        for node in self._state.table.nodes():
            of = node.open_file
            if node.tree is tree and of is not None and of.dirty and node.attached:
                paths.add(node.path)
        if paths:
            shown = ", ".join(sorted(paths)[:SHOWN_PATHS]) + (", ..." if len(paths) > SHOWN_PATHS else "")
            raise DirtyBranch(f"{what}: branch {tree.branch!r} has files being written through the mount "
                              f"({shown}); close them, then commit or reset first")

    def _drop_writers(self, tree: Tree, prefix: str) -> None:
        """Before a reset under ``prefix``: the files open for writing there lose what they
        wrote, and their handles (see ``StaleHandles``) and nodes (a new open finds what the
        branch has after the reset) are done."""
        state = self._state
        by_file: dict[int, list[FileHandle]] = {}
        for handle in state.handles.all():
            of = getattr(handle, "open_file", None)
            if of is not None:
                by_file.setdefault(id(of), []).append(handle)
        for node in state.table.nodes():
            of = node.open_file
            if node.tree is not tree or node.kind is not NodeKind.FILE or of is None or not node.path.startswith(prefix):
                continue
            with of.lock:
                handles = by_file.get(id(of), [])
                being_written = of.dirty or (of.spool is not None and not of.spool.sealed)
                stale = [h for h in handles if h.writable or being_written]
                if not stale and not being_written:
                    continue
                state.table.detach(node)  # a late write goes to a detached file: never uploaded
                state.unstaged.discard(tree, node.path, node)
                Uploader.stop_tail(of)
                spool, of.spool = of.spool, None
                of.dirty = False
                if spool is not None:
                    spool.close()
                for h in stale:
                    h.ops = self._stale_handles
            log.info("reset of %s/%s: %s was open for writing, %d handle(s) now answer ESTALE",
                     tree.repo, tree.branch, node.path, len(stale))
