"""The control files of a branch, ``<branch>/.lakefuse/``: ``ControlFiles``.

Owns what they read and what writing does: ``commit`` (write a message -> commit the branch's
written files and staged changes; read -> the last result, "error: ..." if it failed),
``head`` (the branch's head commit ID) and ``status`` (uncommitted changes, "+ key", "~ key",
"- key", then files being written).  A write to ``commit`` that ends with a newline commits
before write(2) returns, so a failed commit fails that write (``echo``, ``printf``, ``tee``
exit non-zero) with the error's errno; a message without one commits at close, and a failure
fails close(2).  Reads come from a snapshot taken at offset 0 (one consistent text for a
reader going on in pieces).
"""

from __future__ import annotations

import errno
import logging
import os

from lakefuse.errors import InvalidArgument, LakefuseError, ReadOnly
from lakefuse.fs.attributes import NodeAttributes
from lakefuse.fs.handles import ControlHandle, HandleOps, HandleTable
from lakefuse.fs.nodes import Node
from lakefuse.fs.replies import Attributes, OpenResult
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import CONTROL_DIR_NAME, Tree
from lakefuse.fs.uploads import Uploader

log = logging.getLogger(__name__)

#: lines of ``status`` at most (then a line saying there are more)
STATUS_LIMIT = 100_000


class ControlFiles(HandleOps):
    def __init__(self, state: MountState, attributes: NodeAttributes, uploader: Uploader):
        self._state = state
        self._handles: HandleTable = state.handles
        self._attrs = attributes.get
        self._uploader = uploader

    def open(self, node: Node, flags: int) -> OpenResult:
        if (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR):
            if node.name != "commit":
                raise OSError(errno.EACCES, f"{CONTROL_DIR_NAME}/{node.name} is read-only")
            if not node.tree.writable:
                raise ReadOnly("the mount is read-only")
        return OpenResult(self._handles.add(ControlHandle(self, node)), direct_io=True)

    def setattr(self, node: Node, size: int | None) -> Attributes:
        """truncate(2) of ``commit`` is accepted (``>`` opens with O_TRUNC); of the others EACCES."""
        if size is not None and node.name != "commit":
            raise OSError(errno.EACCES, f"{CONTROL_DIR_NAME}/{node.name} is read-only")
        return self._attrs(node)

    # ------------------------------------------------------------------ requests on a handle

    def read(self, h: ControlHandle, offset: int, size: int) -> bytes:
        if offset == 0 or h.snapshot is None:
            h.snapshot = self._text(h.node)
        return h.snapshot[offset:offset + size]

    def write(self, h: ControlHandle, offset: int, data: bytes) -> int:
        """A write to ``.lakefuse/commit``: a write ending with a newline completes the message
        and commits before write(2) returns, so a failed commit fails the writer's write(2)
        (``echo``, ``printf``, ``tee`` exit non-zero) with the error's errno."""
        if h.node.name != "commit":
            raise OSError(errno.EBADF, "read-only control file")
        end = offset + len(data)
        if len(h.written) < end:
            h.written.extend(b"\0" * (end - len(h.written)))
        h.written[offset:end] = data
        h.dirty = True
        if data.endswith(b"\n"):
            self._commit_written(h)
        return len(data)

    def sync(self, h: ControlHandle, any_descriptor: bool) -> None:
        """close(2) (or fsync) after a message not ended by a newline: it commits now, and a
        failure fails close(2)."""
        self._commit_written(h)

    def _commit_written(self, h: ControlHandle) -> None:
        """Commit the message written so far, if any."""
        if not h.dirty:
            return
        h.dirty = False
        message = bytes(h.written).replace(b"\0", b"").decode("utf-8", "replace").strip()
        h.written.clear()
        self.commit(h.node.tree, message)

    # ------------------------------------------------------------------ what they say and do

    def _text(self, node: Node) -> bytes:
        tree = node.tree
        backend = self._state.backend
        if node.name == "head":
            return (backend.branch_head(tree.repo, tree.branch) + "\n").encode()
        if node.name == "status":
            self._state.stager.flush(tree)  # closed files are changes, not files being written
            changes = backend.list_changes(tree.repo, tree.branch, STATUS_LIMIT + 1)
            lines = [f"{c.kind.value} {c.key}" for c in changes[:STATUS_LIMIT]]
            if len(changes) > STATUS_LIMIT:
                lines.append(f"... more than {STATUS_LIMIT} changes")
            lines.extend(f"+ {p} (being written)" for p in self._state.unstaged.paths(tree))
            return ("\n".join(lines) + "\n" if lines else "").encode()
        result = tree.last_commit
        if result is None:
            return b""
        status, text = result
        return (f"{text}\n" if status == "ok" else f"error: {text}\n").encode()

    def commit(self, tree: Tree, message: str) -> str:
        """Upload the branch's written files, then commit; the result is what reading
        ``.lakefuse/commit`` shows."""
        try:
            if not message:
                raise InvalidArgument("empty commit message")
            failures = self._uploader.flush_all(tree)
            if failures:
                path, exc = failures[0]
                raise exc if isinstance(exc, LakefuseError) else OSError(errno.EIO, f"upload of {path} failed: {exc}")
            self._state.stager.flush(tree)
            commit_id = self._state.backend.commit(tree.repo, tree.branch, message)
        except (LakefuseError, OSError) as exc:
            tree.last_commit = ("error", str(exc) or type(exc).__name__)
            raise
        tree.last_commit = ("ok", commit_id)
        log.info("committed %s/%s: %s", tree.repo, tree.branch, commit_id)
        return commit_id
