"""The control files of a branch, ``<branch>/.lakefuse/``: ``ControlFiles``.

Owns what they read and when writing runs an operation.  Read-only: ``head`` (the branch's
head commit ID) and ``status`` (uncommitted changes, "+ key", "~ key", "- key", then files
being written).  Writable, each running one operation with what was written (``commit``
here; ``merge``, ``tag``, ``branch`` and ``reset``: ``lakefuse.fs.refops``): a write that ends
with a newline runs it before write(2) returns, so a failure fails that write (``echo``,
``printf``, ``tee`` exit non-zero) with the error's errno; text without one runs at close, and
a failure fails close(2).  Reading a writable file shows its last result in this mount
("error: ..." if it failed, then one "conflict: PATH" line per conflicting path of a merge).
Reads come from a snapshot taken at offset 0 (one consistent text for a reader going on in
pieces).
"""

from __future__ import annotations

import errno
import logging
import os

from lakefuse.errors import InvalidArgument, LakefuseError, MergeConflict, ReadOnly
from lakefuse.fs.attributes import NodeAttributes
from lakefuse.fs.handles import ControlHandle, HandleOps, HandleTable
from lakefuse.fs.nodes import WRITABLE_CONTROL_FILES, Node
from lakefuse.fs.refops import RefOperations
from lakefuse.fs.replies import Attributes, OpenResult
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import CONTROL_DIR_NAME, Tree
from lakefuse.fs.uploads import Uploader

log = logging.getLogger(__name__)

#: lines of ``status`` at most (then a line saying there are more)
STATUS_LIMIT = 100_000


class ControlFiles(HandleOps):
    def __init__(self, state: MountState, attributes: NodeAttributes, uploader: Uploader,
                 operations: RefOperations):
        self._state = state
        self._handles: HandleTable = state.handles
        self._attrs = attributes.get
        self._uploader = uploader
        self._operations = operations

    def open(self, node: Node, flags: int) -> OpenResult:
        if (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR):
            if node.name not in WRITABLE_CONTROL_FILES:
                raise OSError(errno.EACCES, f"{CONTROL_DIR_NAME}/{node.name} is read-only")
            if not node.tree.writable:
                raise ReadOnly("the mount is read-only")
        return OpenResult(self._handles.add(ControlHandle(self, node)), direct_io=True)

    def setattr(self, node: Node, size: int | None) -> Attributes:
        """truncate(2) of a writable one is accepted (``>`` opens with O_TRUNC); of the others EACCES."""
        if size is not None and node.name not in WRITABLE_CONTROL_FILES:
            raise OSError(errno.EACCES, f"{CONTROL_DIR_NAME}/{node.name} is read-only")
        return self._attrs(node)

    # ------------------------------------------------------------------ requests on a handle

    def read(self, h: ControlHandle, offset: int, size: int) -> bytes:
        if offset == 0 or h.snapshot is None:
            h.snapshot = self._text(h.node)
        return h.snapshot[offset:offset + size]

    def write(self, h: ControlHandle, offset: int, data: bytes) -> int:
        """A write to a writable control file: a write ending with a newline completes the text
        and runs the operation before write(2) returns, so a failure fails the writer's
        write(2) (``echo``, ``printf``, ``tee`` exit non-zero) with the error's errno."""
        if h.node.name not in WRITABLE_CONTROL_FILES:
            raise OSError(errno.EBADF, "read-only control file")
        end = offset + len(data)
        if len(h.written) < end:
            h.written.extend(b"\0" * (end - len(h.written)))
        h.written[offset:end] = data
        h.dirty = True
        if data.endswith(b"\n"):
            self._run_written(h)
        return len(data)

    def sync(self, h: ControlHandle, any_descriptor: bool) -> None:
        """close(2) (or fsync) after text not ended by a newline: the operation runs now, and
        a failure fails close(2)."""
        self._run_written(h)

    def _run_written(self, h: ControlHandle) -> None:
        """Run the operation with the text written so far, if any."""
        if not h.dirty:
            return
        h.dirty = False
        text = bytes(h.written).replace(b"\0", b"").decode("utf-8", "replace").strip()
        h.written.clear()
        if h.node.name == "commit":
            self.commit(h.node.tree, text)
        else:
            self.run(h.node.tree, h.node.name, text)

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
            # made meanwhile (the stager was just flushed): a directory's marker is a change
            # like any other, a file is being written
            lines.extend(f"+ {path}/" if is_dir else f"+ {path} (being written)"
                         for path, is_dir in self._state.unstaged.status_keys(tree))
            return ("\n".join(lines) + "\n" if lines else "").encode()
        result = tree.control_results.get(node.name)
        if result is None:
            return b""
        status, text = result
        return (f"{text}\n" if status == "ok" else f"error: {text}\n").encode()

    def run(self, tree: Tree, name: str, text: str) -> str:
        """Run the operation of the control file ``name`` (not ``commit``) of ``tree``; the
        result is what reading the file shows."""
        try:
            result = self._operations.run(tree, name, text)
        except (LakefuseError, OSError) as exc:
            message = str(exc) or type(exc).__name__
            if isinstance(exc, MergeConflict):
                message += "".join(f"\nconflict: {path}" for path in exc.conflicts)
            tree.control_results[name] = ("error", message)
            raise
        tree.control_results[name] = ("ok", result)
        return result

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
            tree.control_results["commit"] = ("error", str(exc) or type(exc).__name__)
            raise
        tree.control_results["commit"] = ("ok", commit_id)
        log.info("committed %s/%s: %s", tree.repo, tree.branch, commit_id)
        return commit_id
