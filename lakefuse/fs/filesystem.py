"""What lakeFS repositories look like as a filesystem: ``LakeFilesystem``, the one entry point.

``LakeFilesystem`` implements every filesystem operation a mount needs in terms of a
``LakeBackend``, with plain Python types and no FUSE library: the adapter in ``lakefuse.fuse``
only translates.  Layout of a mount (the root may also be one repository, or one ref)::

    /<repo>/                       branches and tags (readdir); any ref expression, commit ID
                                   or unique prefix of one resolves on lookup (read-only);
                                   mkdir creates a branch from the default branch, rmdir
                                   deletes one if that loses no work
    /<repo>/<branch>/a/b.csv       objects, split on '/'; directories implied by keys, or
                                   persisted empty as a zero-size marker object ``a/``
    /<repo>/<branch>/.lakefuse/    control directory (hidden from readdir):
        commit                     write a message -> commit (when a write ends with a newline,
                                   else at close; a failure fails that write or close with the
                                   error's errno); read -> the last result
        merge, tag, branch, reset  the same, with one line: SOURCE_REF [STRATEGY] merged into
                                   the branch; NAME of a tag or branch made at its head; a
                                   prefix whose uncommitted changes are dropped ('.': all)
        head                       the branch's head commit ID
        status                     uncommitted changes: "+ key", "~ key", "- key"

This class is a thin coordinator: it owns no state and no rules, and hands each call to the
part that does (one method call).  The parts share one ``MountState`` (``state``):

- ``inodes.Inodes``: lookup, forget, getattr; names to nodes, stat freshness, which tree a
  change goes to.  ``attributes.NodeAttributes``: nodes as stat(2) attributes.
- ``files.Files``: open, create, read, write, flush, fsync, release (FUSE passthrough, direct
  I/O); ``uploads.Uploader``: spools, tails, uploads; ``native_reads``: which handles the
  FUSE binding reads for itself.
- ``readdir.Readdir``: opendir, readdir.  ``namespace.Namespace``: mkdir, rmdir, unlink,
  rename.  ``special.Special``: symlink, readlink, mknod of FIFOs, sockets and devices, link
  (refused).  ``refdirs.RefDirectories``: mkdir and rmdir of branch directories.
  ``metadata.Metadata``: setattr.  ``xattrs.Xattrs``: extended attributes.
- ``control.ControlFiles``: ``.lakefuse/``, with ``refops.RefOperations`` (merge, tag,
  branch, reset).  ``changes.ChangeFeed``: other writers' changes, and this mount's merges
  and resets, as kernel invalidations.
- ``handles``: the typed handle of each ``fh``, which names the part serving it.
  ``replies``: what calls return.

Semantics in short (details in each part): names and attributes under a tag or commit never
change (long kernel timeouts); under a branch they are trusted ``branch_ttl`` seconds, or
``watched_branch_ttl`` with a change feed (``poll_changes``).  Writes go to branches only (else
EROFS), through a local spool, uploaded and staged on fsync, close or commit.  Modes, owners,
times, symbolic links and special files are kept in the entries' user metadata
(``lakefuse.posix``).  Names longer than 255 bytes: ENAMETOOLONG; hard links: EPERM.

Thread-safety: every method may be called from any thread, concurrently.  Methods taking
``blocking=False`` raise ``WouldBlock`` instead of calling the backend, so the adapter can
answer from memory on the event loop and go to a worker thread only when needed.
"""

from __future__ import annotations

import errno
import logging
import os
import stat as stat_mode
from typing import Callable, TypeVar

from lakefuse.fs.attributes import MODE_KEY, MTIME_NS_KEY, NodeAttributes, may_access
from lakefuse.fs.backend import LakeBackend
from lakefuse.fs.changes import ChangeFeed
from lakefuse.fs.control import ControlFiles
from lakefuse.fs.files import Files
from lakefuse.fs.handles import Handle
from lakefuse.fs.inodes import Inodes
from lakefuse.fs.metadata import Metadata
from lakefuse.fs.namespace import Namespace
from lakefuse.fs.native_answers import BindingAnswers
from lakefuse.fs.native_reads import NativeReads
from lakefuse.fs.nodes import Node, NodeKind
from lakefuse.fs.passthrough import BackingFiles, Passthrough
from lakefuse.fs.readdir import Readdir
from lakefuse.fs.refdirs import RefDirectories
from lakefuse.fs.refops import RefOperations
from lakefuse.fs.special import Special
from lakefuse.fs.replies import BLOCK_SIZE, Attributes, Invalidations, OpenResult, WouldBlock
from lakefuse.fs.state import WATCHED_BRANCH_TTL, MountState
from lakefuse.fs.tree import MAX_NAME_BYTES, METADATA_ENTRIES, Tree
from lakefuse.fs.uploads import Uploader
from lakefuse.fs.walkers import Walkers
from lakefuse.fs.xattrs import Xattrs

__all__ = ["Attributes", "Invalidations", "LakeFilesystem", "MODE_KEY", "MTIME_NS_KEY", "OpenResult", "WouldBlock"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _option(name: str) -> property:
    """A mount option, kept in the shared state (read by the parts at each use)."""
    return property(lambda self: getattr(self.state, name), lambda self, value: setattr(self.state, name, value))


class LakeFilesystem:
    branch_ttl = _option("branch_ttl")
    watched_branch_ttl = _option("watched_branch_ttl")
    readdir_page = _option("readdir_page")

    def __init__(self, backend: LakeBackend, *, spool_dir: str, repo: str | None = None, ref: str | None = None,
                 read_only: bool = False, uid: int | None = None, gid: int | None = None,
                 branch_ttl: float = 1.0, immutable_ttl: float = 86400.0, readdir_page: int = 5000,
                 change_feed: bool = False, watched_branch_ttl: float = WATCHED_BRANCH_TTL, uid_map=None, gid_map=None,
                 force_owner: bool = False, metadata_entries: int = METADATA_ENTRIES,
                 names_only_programs: frozenset[str] = frozenset()):
        """``uid``/``gid``: the default owner (of entries storing none; default: this process's);
        ``uid_map``/``gid_map`` ({stored: shown}) and ``force_owner``: see ``lakefuse.fs.owners``;
        ``metadata_entries``: paths each ref's metadata cache keeps, and entries of its listing
        pages (``lakefuse.fs.tree``); ``names_only_programs``: programs whose listings give
        regular files by name alone (``lakefuse.fs.walkers``)."""
        self.state = state = MountState(
            backend, spool_dir=spool_dir, read_only=read_only, uid=uid, gid=gid, branch_ttl=branch_ttl,
            immutable_ttl=immutable_ttl, readdir_page=readdir_page, change_feed=change_feed,
            watched_branch_ttl=watched_branch_ttl, uid_map=uid_map, gid_map=gid_map, force_owner=force_owner,
            metadata_entries=metadata_entries)
        self.table = state.table
        self._handles = state.handles
        attributes = NodeAttributes(state)
        self._inodes = inodes = Inodes(state, attributes)
        self._uploader = uploader = Uploader(state)
        self._files = files = Files(state, inodes, attributes, uploader)
        #: which processes stat what they list (``lakefuse.fs.walkers``)
        self.walkers = walkers = Walkers(programs=names_only_programs)
        self._readdir = Readdir(state, inodes, attributes, walkers)
        self._namespace = Namespace(state, inodes, attributes, uploader)
        self._metadata = metadata = Metadata(state, inodes, attributes, files, uploader)
        self._special = Special(state, inodes, attributes, uploader)
        self._xattrs = Xattrs(inodes, metadata, uploader)
        self._changes = changes = ChangeFeed(state, inodes)
        self._control = ControlFiles(state, attributes, uploader, RefOperations(state, changes, files))
        self._refdirs = RefDirectories(state, inodes, attributes)
        inodes.set_root(repo, ref)

    @property
    def passthrough(self) -> Passthrough | None:
        """The kernel's passthrough of local objects, once ``enable_passthrough`` turned it on."""
        return self._files.passthrough

    # ------------------------------------------------------------------ names and attributes

    def lookup(self, parent_ino: int, name: bytes | str, blocking: bool = True, caller: int = 0) -> Attributes:
        """The child ``name`` of a directory (its lookup count goes up by one), for the process
        ``caller`` (a thread ID; a regular file found counts it as a process that stats what it
        lists: ``lakefuse.fs.walkers``).  Raises ENOENT; on immutable trees returns attributes
        with ``ino == 0`` instead (a negative entry the kernel may cache)."""
        attrs = self._inodes.lookup(parent_ino, name, blocking)
        if caller and self.walkers.programs and stat_mode.S_ISREG(attrs.mode):  # (none named: nothing to tell)
            self.walkers.looked_up_file(caller)
        return attrs

    def forget(self, items) -> None:
        self._inodes.forget(items)

    def getattr(self, ino: int, blocking: bool = True) -> Attributes:
        return self._inodes.getattr(ino, blocking)

    def access(self, ino: int, mode: int, uid: int, gid: int, groups=(), blocking: bool = True) -> bool:
        """access(2) and chdir(2) of the node by a caller with ``uid``, ``gid`` and supplementary
        ``groups``: whether its mode bits allow ``mode`` (``attributes.may_access``).  Asked
        only where the kernel does not check permissions itself (a mount without
        ``default_permissions``, see ``lakefuse.fuse.runner``)."""
        return may_access(self._inodes.getattr(ino, blocking), mode, uid, gid, groups)

    def setattr(self, ino: int, *, size: int | None = None, mode: int | None = None,
                mtime_ns: int | None = None, atime_ns: int | None = None, uid: int | None = None,
                gid: int | None = None, fh: int | None = None, chown: bool = False,
                blocking: bool = True) -> Attributes:
        """truncate, chmod, chown (``uid``/``gid`` as the mount shows ids; ``chown`` without
        them: chown(-1, -1)) and utime (``atime_ns``/``mtime_ns``); the ctime becomes now.
        ``blocking=False``: from memory only (a change queued for the stager), else WouldBlock
        before anything changed."""
        node = self.table.get(ino)
        if node.kind is NodeKind.CONTROL_FILE:
            if not blocking:
                raise WouldBlock
            return self._control.setattr(node, size)
        return self._metadata.setattr(node, size=size, mode=mode, mtime_ns=mtime_ns, atime_ns=atime_ns, uid=uid,
                                      gid=gid, chown=chown, blocking=blocking)

    @property
    def watched(self) -> bool:
        """Whether branch metadata is kept long and ``poll_changes`` must be called (often)."""
        return self._changes.watched

    def set_kernel_invalidator(self, invalidate: Callable[[Invalidations], None] | None) -> None:
        """``invalidate(Invalidations)`` tells the kernel to drop names and attributes that an
        operation through this mount just made stale (a merge or reset through
        ``.lakefuse/``), before that operation returns.  Called from a worker thread, holding
        no lock of the filesystem's.  The adapter sets it; without one the kernel keeps them
        until they expire."""
        self.state.kernel_invalidator = invalidate

    def poll_changes(self) -> Invalidations:
        """Forget what other writers changed on the watched branches since the last poll, and
        say which kernel entries and attributes to invalidate.  Blocking: asks the backend
        once per branch read so far, and re-stats the directories the kernel knows above
        changed paths.  A branch whose poll fails is logged and tried again next time."""
        return self._changes.poll()

    # ------------------------------------------------------------------ directories

    def opendir(self, ino: int) -> int:
        return self._readdir.opendir(self.table.get(ino))

    def open_dir(self, ino: int, caller: int = 0) -> OpenResult:
        """``opendir`` by the process ``caller`` (a thread ID), and whether the kernel may keep
        the directory's listing (see ``lakefuse.fs.readdir``)."""
        return self._readdir.open_dir(self.table.get(ino), caller)

    def releasedir(self, fh: int) -> None:
        self._handles.pop(fh)

    def fsyncdir(self, fh: int) -> None:
        """fsync(2) of a directory: the files closed in its repository so far are durable."""
        h = self._handles.get(fh)
        if h is None:
            raise OSError(errno.EBADF, "not a directory handle")
        tree = h.node.tree
        if tree is not None:
            if tree.writable:
                self.state.stager.flush(tree)
            self._uploader.sync(tree.repo)

    def readdir(self, fh: int, offset: int, add: Callable[[bytes, Attributes, int], bool],
                blocking: bool = True, add_name: Callable[[bytes, int, int, int], bool] | None = None,
                caller: int = 0) -> None:
        """Report entries from position ``offset`` through ``add(name, attrs, next_offset)``
        until it returns False (the kernel's buffer is full); each reported entry's lookup
        count goes up by one.  ``add_name(name, ino, mode, next_offset)``, if given, reports an
        entry without attributes (and without a lookup count), which regular files get when the
        process ``caller`` is not one that stats what it lists (``lakefuse.fs.walkers``).
        Offsets are positions in this handle's listing; resuming at the last one continues the
        backend listing after the last key (``after=``), so a huge directory is listed in
        pages, never re-read from the start."""
        h = self._handles.get(fh)
        if h is None:
            raise OSError(errno.EBADF, "not a directory handle")
        h.ops.readdir(h, offset, add, blocking, add_name, caller)

    def mkdir(self, parent_ino: int, name: bytes | str, mode: int, uid: int | None = None,
              gid: int | None = None, blocking: bool = True) -> Attributes:
        """``uid``/``gid``: the requester's (the new directory's owner; None: not stored).
        ``blocking=False``: from memory and local files only, else WouldBlock (nothing done)."""
        parent = self.table.get(parent_ino)
        if parent.kind is NodeKind.REPOSITORY:  # a new branch
            if not blocking:
                raise WouldBlock
            return self._refdirs.mkdir(parent, name, mode)
        return self._made(parent_ino, name, self._namespace.mkdir, parent, name, mode, uid, gid, blocking)

    def rmdir(self, parent_ino: int, name: bytes | str, blocking: bool = True) -> None:
        """``blocking=False``: WouldBlock unless it is an empty directory's removal memory can
        decide, queued for the stager."""
        parent = self.table.get(parent_ino)
        if parent.kind is NodeKind.REPOSITORY:  # a branch
            if not blocking:
                raise WouldBlock
            self._refdirs.rmdir(parent, name)
        else:
            self._namespace.rmdir(parent, name, blocking)

    def unlink(self, parent_ino: int, name: bytes | str, blocking: bool = True) -> None:
        """``blocking=False``: WouldBlock unless it is a deletion queued from memory."""
        self._namespace.unlink(self.table.get(parent_ino), name, blocking)

    def rename(self, old_parent_ino: int, old_name: bytes | str, new_parent_ino: int, new_name: bytes | str,
               flags: int = 0, blocking: bool = True) -> None:
        """``blocking=False``: a file's rename memory can decide, queued for the stager, else
        WouldBlock before any change."""
        self._made(new_parent_ino, new_name, self._namespace.rename, self.table.get(old_parent_ino), old_name,
                   self.table.get(new_parent_ino), new_name, flags, blocking)

    def link(self, *args) -> None:
        """Hard links: EPERM."""
        self._special.link(*args)

    def symlink(self, parent_ino: int, name: bytes | str, target: bytes | str, uid: int | None = None,
                gid: int | None = None) -> Attributes:
        return self._made(parent_ino, name, self._special.symlink, self.table.get(parent_ino), name, target, uid, gid)

    def readlink(self, ino: int, blocking: bool = True) -> bytes:
        """``blocking=False``: WouldBlock unless the link's entry is in memory."""
        return self._special.readlink(self.table.get(ino), blocking)

    def mknod(self, parent_ino: int, name: bytes | str, mode: int, rdev: int = 0, uid: int | None = None,
              gid: int | None = None) -> Attributes:
        """A regular file (created and closed), a FIFO, a socket or a device (``rdev``)."""
        if stat_mode.S_ISREG(mode) or stat_mode.S_IFMT(mode) == 0:
            result, attrs = self.create(parent_ino, name, mode, os.O_WRONLY | os.O_EXCL, uid=uid, gid=gid)
            self.flush(result.fh)
            self.release(result.fh)
            return self.getattr(attrs.ino)
        return self._made(parent_ino, name, self._special.mknod, self.table.get(parent_ino), name, mode, rdev, uid,
                          gid)

    def _made(self, parent_ino: int, name: bytes | str, make: Callable[..., T], *args) -> T:
        """``make(*args)``, which makes ``name`` in directory ``parent_ino``: if the binding
        answers that directory's missing names, it sends this one's lookups to the handler
        from before the make on, and again after it (``lakefuse.fs.native_answers``: a
        registration made meanwhile may come from names read before the make)."""
        native = self._inodes.native_answers
        if native is None:
            return make(*args)
        native.may_exist(parent_ino, name)
        try:
            return make(*args)
        finally:
            native.may_exist(parent_ino, name)

    # ------------------------------------------------------------------ files

    def enable_passthrough(self, backings: BackingFiles, *, branches: bool = False) -> None:
        """Let the kernel read objects that are local files itself (see ``Files.enable_passthrough``)."""
        self._files.enable_passthrough(backings, branches=branches)

    def enable_native_answers(self, binding: BindingAnswers) -> bool:
        """Let the FUSE binding answer lookups of names that directories of commits and tags do
        not have, and opens of their files that are local files, itself (see
        ``lakefuse.fs.native_answers``); whether it answers opens (passthrough is on)."""
        return self._files.enable_native_answers(binding)

    @property
    def native_branch_opens(self) -> bool:
        """Whether the FUSE binding answers read-only opens of unmodified branch files
        (``lakefuse.fs.native_answers``)."""
        native = self._inodes.native_answers
        return native is not None and native.opens_branch_files

    def enable_native_reads(self, native: NativeReads) -> None:
        """Let the FUSE binding answer reads of unmodified local objects itself (see
        ``lakefuse.fs.native_reads``)."""
        self._files.enable_native_reads(native)

    @property
    def native_reads(self) -> NativeReads | None:
        """The binding's registry given to ``enable_native_reads``, if any."""
        return self._files.native_reads

    @property
    def files_read_ahead(self) -> int:
        """Files read in ahead of programs walking directories cold (``lakefuse.fs.siblings``)."""
        siblings = self._files.siblings
        return siblings.files_read_ahead if siblings is not None else 0

    def enable_writeback_cache(self) -> None:
        """The kernel keeps written pages and flushes them at close and fsync (the adapter
        calls this when it asked for the writeback cache)."""
        self._files.writeback_cache = True

    def open(self, ino: int, flags: int, blocking: bool = True) -> OpenResult:
        """``blocking=False``: WouldBlock unless a read-only open answered from memory."""
        node = self.table.get(ino)
        if node.kind is NodeKind.CONTROL_FILE:
            if not blocking:
                raise WouldBlock
            return self._control.open(node, flags)
        return self._files.open(node, flags, blocking)

    def create(self, parent_ino: int, name: bytes | str, mode: int, flags: int, blocking: bool = True,
               uid: int | None = None, gid: int | None = None) -> tuple[OpenResult, Attributes]:
        """``blocking=False``: WouldBlock unless what the name is now is known in memory.
        ``uid``/``gid``: the requester's (a new file's owner; None: not stored)."""
        return self._made(parent_ino, name, self._files.create, self.table.get(parent_ino), name, mode, flags,
                          blocking, uid, gid)

    def read(self, fh: int, offset: int, size: int) -> bytes:
        h = self._handle(fh)
        if h is None:
            raise OSError(errno.EBADF, "bad file handle")
        return h.ops.read(h, offset, size)

    def read_nowait(self, fh: int, offset: int, size: int, buffer: bytearray):
        """``read`` if it can be answered without waiting (object bytes already in the page
        cache), into ``buffer`` (the result is a view of it, valid until ``buffer`` is reused);
        else raises WouldBlock."""
        h = self._handles.get(fh)
        if h is None:
            raise WouldBlock  # also a handle the binding opened: taken over by ``read``
        return h.ops.read_nowait(h, offset, size, buffer)

    def write(self, fh: int, offset: int, data: bytes) -> int:
        h = self._handle(fh)
        if h is None:
            raise OSError(errno.EBADF, "bad file handle")
        return h.ops.write(h, offset, data)

    def write_nowait(self, fh: int, offset: int, data: bytes) -> int:
        """``write`` if it can be answered without waiting: an append to a big file being
        written in order, whose bytes are queued for the spool's background writer (see
        ``Spool.write_behind``); else raises WouldBlock."""
        h = self._handles.get(fh)
        if h is None:
            raise WouldBlock
        return h.ops.write_nowait(h, offset, data)

    def write_time(self, ino: int, mtime_ns: int) -> Attributes:
        """An mtime the kernel's writeback cache sends on its own (``Files.write_time``):
        answered from memory, or WouldBlock (``setattr`` then applies it as a utime)."""
        node = self.table.get(ino)
        if node is None or node.kind is not NodeKind.FILE:
            raise WouldBlock
        return self._files.write_time(node, mtime_ns)

    def flush(self, fh: int) -> None:
        """close(2) of a descriptor: upload a written file (errors reach close), or commit
        after a write to ``.lakefuse/commit``.  Closing a read-only descriptor uploads nothing:
        another handle's writes in progress are not staged half-done."""
        self._sync(fh, any_descriptor=False)

    def flush_nowait(self, fh: int) -> None:
        """``flush`` if it costs a few local system calls at most, else WouldBlock."""
        h = self._handles.get(fh)
        if h is None:
            raise WouldBlock
        h.ops.flush_nowait(h)

    def fsync(self, fh: int, datasync: bool = False) -> None:
        """fsync(2) is about the file: it uploads the written file whichever descriptor asks."""
        self._sync(fh, any_descriptor=True)

    def _sync(self, fh: int, any_descriptor: bool) -> None:
        h = self._handle(fh)
        if h is None:
            raise OSError(errno.EBADF, "bad file handle")
        h.ops.sync(h, any_descriptor)

    def release(self, fh: int) -> None:
        h = self._handle(fh)
        if h is None or self._files.release_share(h):
            return
        if self._handles.pop(fh) is not None:
            h.ops.release(h)

    def release_nowait(self, fh: int) -> None:
        """``release`` if it costs a few local system calls at most, else WouldBlock."""
        h = self._handles.get(fh)
        if h is None:
            raise WouldBlock  # also a handle the binding opened: taken over by ``release``
        if self._files.release_share(h, blocking=False):
            return
        h.ops.release_nowait(h)
        self._handles.pop(fh)

    def _handle(self, fh: int) -> Handle | None:
        """The handle ``fh`` names; a handle the FUSE binding opened is taken over
        (``lakefuse.fs.native_answers``)."""
        h = self._handles.get(fh)
        if h is None:
            h = self._files.native_handle(fh)
        return h

    def flush_all(self, tree: Tree | None = None) -> list[tuple[str, Exception]]:
        """Upload every written file (of one tree); the failures."""
        return self._uploader.flush_all(tree)

    # ------------------------------------------------------------------ xattrs

    def getxattr(self, ino: int, name: bytes | str, blocking: bool = True) -> bytes:
        return self._xattrs.getxattr(self.table.get(ino), name, blocking)

    def listxattr(self, ino: int, blocking: bool = True) -> list[bytes]:
        return self._xattrs.listxattr(self.table.get(ino), blocking)

    def setxattr(self, ino: int, name: bytes | str, value: bytes) -> None:
        self._xattrs.setxattr(self.table.get(ino), name, value)

    def removexattr(self, ino: int, name: bytes | str) -> None:
        self._xattrs.removexattr(self.table.get(ino), name)

    # ------------------------------------------------------------------ the mount

    def commit(self, tree: Tree, message: str) -> str:
        """Upload the branch's written files, then commit; the result is what reading
        ``.lakefuse/commit`` shows."""
        return self._control.commit(tree, message)

    def node_of_handle(self, fh: int) -> Node | None:
        """The node an open handle is about (None if there is no such handle): for log lines."""
        handle = self._handles.get(fh)
        if handle is None:
            return None
        return getattr(handle, "node", None) or getattr(getattr(handle, "open_file", None), "node", None)

    def statfs(self) -> dict[str, int]:
        big = 1 << 40
        return {"f_bsize": BLOCK_SIZE, "f_frsize": BLOCK_SIZE, "f_blocks": big, "f_bfree": big, "f_bavail": big,
                "f_files": big, "f_ffree": big, "f_favail": big, "f_namemax": MAX_NAME_BYTES}

    def close(self) -> None:
        """Upload what is still written (unmount), then drop every open file and the spool files
        made ahead."""
        for path, exc in self.flush_all():
            log.error("upload of %s at unmount failed: %s", path, exc)
        for tree, exc in self.state.stager.close():
            log.error("staging the files closed last on %s failed at unmount, their changes are lost: %s", tree, exc)
        self.state.owned.close()
        self.state.learner.close()
        self._files.close_all()
        self.state.close_spools()
