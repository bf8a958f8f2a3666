"""Branch directories made and removed in a repository directory: ``RefDirectories`` serves
mkdir and rmdir of ``<repo>/<name>``.

``mkdir <repo>/<name>`` is ``lakefuse branch create lakefs://<repo>/<name> --source
lakefs://<repo>/<default branch>`` (the same name rules and errors: an invalid name EINVAL, a
name a branch or tag has EEXIST; the same hooks); the new directory is the branch.

``rmdir <repo>/<name>`` is ``lakefuse branch delete`` under rules that lose no work, checked in
this order (a refusal changes nothing):

- a tag or any other ref that is not a branch: EROFS (tags are deleted with the CLI);
- the repository's default branch: EPERM;
- files being written on the branch through this mount, or uncommitted changes: ENOTEMPTY;
- a head commit that no other branch or tag contains (what ``git branch -d`` checks, so no
  commit becomes unreachable): ENOTEMPTY;
- a pre-delete-branch hook's rejection: EPERM.

So ``rm -r`` of a repository directory never deletes a branch that had files: it stages their
deletions first, which are uncommitted changes.
"""

from __future__ import annotations

import errno
import logging

from lakefuse.errors import ReadOnly
from lakefuse.fs.attributes import NodeAttributes
from lakefuse.fs.inodes import Inodes
from lakefuse.fs.nodes import Node
from lakefuse.fs.replies import Attributes
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import decode_name

log = logging.getLogger(__name__)


class RefDirectories:
    def __init__(self, state: MountState, inodes: Inodes, attributes: NodeAttributes):
        self._state = state
        self._backend = state.backend
        self._inodes = inodes
        self._attrs = attributes.get

    def _writable(self) -> None:
        if self._state.read_only:
            raise ReadOnly("the mount is read-only")

    def mkdir(self, parent: Node, name: bytes | str, mode: int) -> Attributes:
        """A new branch ``name`` of the repository ``parent`` from its default branch; ``mode``
        is not kept (a branch directory is always 0755)."""
        self._writable()
        name = decode_name(name)
        repo = parent.repo
        ref = self._backend.create_branch(repo, name, self._backend.default_branch(repo))
        self._state.refs.branch_created(repo, ref)
        node = self._inodes.ref_node(repo, ref)
        self._state.table.add_lookup(node)
        log.info("created branch %s/%s (mkdir): %s", repo, name, ref.commit_id)
        return self._attrs(node)

    def rmdir(self, parent: Node, name: bytes | str) -> None:
        """Delete the branch ``name`` if that loses no work (see the module docstring)."""
        self._writable()
        name = decode_name(name)
        repo = parent.repo
        backend = self._backend
        ref = backend.resolve_ref(repo, name)
        if not ref.is_branch:
            raise ReadOnly(f"{name!r} is a {ref.kind.value}, not a branch: delete tags with 'lakefuse tag delete'")
        if name == backend.default_branch(repo):
            raise OSError(errno.EPERM, f"{name!r} is the default branch of repository {repo!r}")
        tree = self._state.refs.branch_tree(repo, name)
        if tree is not None:
            self._state.stager.flush(tree)  # closed files are uncommitted changes
            if self._state.unstaged.paths(tree) or any(
                    node.tree is tree and node.open_file is not None and node.open_file.dirty
                    for node in self._state.table.nodes()):
                raise OSError(errno.ENOTEMPTY, f"branch {name!r} has files being written through the mount")
        if backend.list_changes(repo, name, 1):
            raise OSError(errno.ENOTEMPTY, f"branch {name!r} has uncommitted changes (commit or reset them)")
        if not backend.contained_elsewhere(repo, name):
            raise OSError(errno.ENOTEMPTY, f"branch {name!r} has commits no other branch or tag contains "
                                           "(merge or tag them, or delete it with 'lakefuse branch delete')")
        backend.delete_branch(repo, name)
        self._state.refs.branch_deleted(repo, name)
        log.info("deleted branch %s/%s (rmdir)", repo, name)
