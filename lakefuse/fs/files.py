"""Open files: ``Files`` serves open, create, read, write, flush, fsync and release of files.

Owns the life of an ``OpenFile`` (made at the first open of a node, dropped with its last
handle), each ``FileHandle``'s choices (direct I/O, the kernel's page cache, FUSE passthrough:
``lakefuse.fs.passthrough``), reads (the handle's object through a backend reader, or the
file's spool while it is written) and writes into the spool; spools, tails and uploads are
``lakefuse.fs.uploads``.  ``read_nowait``, ``write_nowait``, ``flush_nowait``,
``release_nowait`` and ``create(blocking=False)`` run on the adapter's event loop when they
cost only memory or a few local system calls (a small write into a live spool, a small new
file moved into local storage, a spool closed): a thread hop costs more than they do, and a
shell tool creating small files makes five of these requests per file.  Anything that needs
the database, remote storage, a lock another thread holds or big I/O raises ``WouldBlock``
first, before any side effect, and the adapter runs the blocking version on a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time

from lakefuse.errors import LakefuseError
from lakefuse.fs import native_reads
from lakefuse.fs.attributes import DEFAULT_FILE_MODE, NodeAttributes, content_changed, mode_metadata
from lakefuse.fs.handles import FileHandle, Handle, HandleOps, OpenFile
from lakefuse.fs.inodes import Inodes, refuse_control_dir_name
from lakefuse.fs.mapped import MappedSpools
from lakefuse.fs.native_answers import BindingAnswers, NativeAnswers
from lakefuse.fs.nodes import Node, NodeKind
from lakefuse.fs.passthrough import NO_GRANT, BackingFiles, Grant, Passthrough
from lakefuse.fs.readers import LocalFileReader, read_ahead_bytes
from lakefuse.fs.replies import Attributes, OpenResult, WouldBlock
from lakefuse.fs.siblings import SiblingReadAhead
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import PathStat, check_name, decode_name, join
from lakefuse.fs.uploads import Uploader
from lakefuse.graveler.model import Entry

log = logging.getLogger(__name__)

#: the largest write ``write_nowait`` puts in a spool file on the event loop
INLINE_WRITE_BYTES = 128 * 1024


def writes_from_empty_only(flags: int, truncated: bool) -> bool:
    """Whether an open(2) may get direct I/O for its writes: write-only, of a file it creates
    or truncates (``cp``, ``>``).  The kernel then hands the writer's bytes straight to us
    instead of first copying them into its page cache as well: half the memory traffic, and
    no page cache that the written data would also occupy.  Only when no other handle of the
    file is open (see ``Files._new_file_handle``); after the upload the kernel's cache is not
    trusted to hold the new bytes (``OpenFile.uncached_writes``)."""
    return (flags & os.O_ACCMODE) == os.O_WRONLY and truncated


def kernel_may_write(flags: int, truncated: bool) -> bool:
    """Whether an open(2) may have the kernel write into the file's spool itself
    (``Files._grant_kernel_writes``): write-only or read-write (``mkstemp``, HDF5, SQLite), of a
    file it creates or truncates, not for appending (a log is appended to in place through the
    mount: see ``Files._grant_passthrough``)."""
    return (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR) and truncated and not flags & os.O_APPEND


class Files(HandleOps):
    def __init__(self, state: MountState, inodes: Inodes, attributes: NodeAttributes, uploader: Uploader):
        self._state = state
        self._table = state.table
        self._handles = state.handles
        self._inodes = inodes
        self._attrs = attributes.get
        self._mode_and_group = attributes.mode_and_group
        self._uploader = uploader
        self._local_file = getattr(state.backend, "local_file", None)  # optional: see enable_passthrough
        #: reads the next files of a directory in when a program walks it cold
        self.siblings = SiblingReadAhead(self._local_file) if self._local_file is not None else None
        self._opened_repos: set[str] = set()  # opened once on a worker thread: see open(blocking=False)
        self._mapped = MappedSpools(self._settle_mapped)
        self.passthrough: Passthrough | None = None
        self._passthrough_branches = False
        #: the FUSE binding's registry of handles whose reads it answers itself, once
        #: ``enable_native_reads`` gave one (``lakefuse.fs.native_reads``)
        self.native_reads: native_reads.NativeReads | None = None
        #: the kernel caches writes (``LakeFilesystem.enable_writeback_cache``): no handle gets
        #: direct I/O (see ``_new_file_handle``)
        self.writeback_cache = False

    # ------------------------------------------------------------------ passthrough

    def enable_passthrough(self, backings: BackingFiles, *, branches: bool = False) -> None:
        """Let the kernel read objects that are local files itself (``lakefuse.fs.passthrough``);
        the adapter calls this once the kernel granted FUSE passthrough.  Only in trees nothing
        writes through this mount (commits, tags, a read-only mount) unless ``branches``: a
        handle the kernel serves keeps reading the bytes it opened, so on a writable branch it
        would not see writes made through other handles after it opened (``tail -f``).  On
        branches the kernel also writes files created or truncated into their spools
        (``_grant_kernel_writes``)."""
        if self._local_file is not None:
            self.passthrough = Passthrough(backings)
            self._passthrough_branches = branches

    def enable_native_answers(self, binding: BindingAnswers) -> bool:
        """Let the FUSE binding answer lookups of names that directories of commits and tags do
        not have itself, and, if passthrough is on, read-only opens of their files whose
        objects are local files (``lakefuse.fs.native_answers``); whether it answers those
        opens.  If it reads files itself (``enable_native_reads``), it answers read-only opens
        of unmodified small branch files too.  The adapter calls this once at start, after
        ``enable_passthrough`` and ``enable_native_reads``."""
        opens = self.passthrough is not None and self._local_file is not None
        # branch files: the binding reads small ones as the mount would (``native_reads``)
        branch_files = self.native_reads is not None and self._local_file is not None
        native = NativeAnswers(binding, self._local_file if opens else None, self.passthrough,
                               self._state.immutable_ttl, self._state.unstaged.names_in,
                               branch_local_file=self._local_file if branch_files else None)
        self._inodes.native_answers = native
        self._table.on_forgotten = native.forget
        return opens

    def enable_native_reads(self, native: native_reads.NativeReads) -> None:
        """Let the FUSE binding answer the reads of handles that read an unmodified local
        object itself (``lakefuse.fs.native_reads``); the adapter calls this once at start."""
        self.native_reads = native

    def _grant_passthrough(self, of: OpenFile, readable_object: bool, writes_from_empty: bool = False) -> Grant:
        """Passthrough for a new handle of ``of`` (under ``of.lock``, its count taken);
        ``readable_object``: the handle only reads ``of.entry``, unmodified;
        ``writes_from_empty``: it writes a file it created or truncated (``kernel_may_write``),
        not for appending (a log is fsynced as it grows: appends in place cost only what was
        appended, where each fsync of a spool the kernel writes stores a copy of it)."""
        if self.passthrough is None:
            return NO_GRANT
        if writes_from_empty:
            grant = self._grant_kernel_writes(of)
            if grant.backing_id:
                return grant
        local_file = None
        # on a writable branch a handle the kernel serves would miss later writes through the mount
        tree_allows = not of.node.tree.writable or self._passthrough_branches
        if tree_allows and readable_object and of.spool is None and not of.dirty and of.entry is not None:
            try:
                local_file = self._local_file(of.node.tree.repo, of.entry)
            except (LakefuseError, OSError) as exc:  # the mount serves the handle, and says why if it cannot
                log.debug("no passthrough for %s: %s", of.node.path, exc)
                local_file = None
        return self.passthrough.open(of.passthrough, local_file, alone=of.handles == 1,
                                     size=of.entry.size if local_file is not None else None,
                                     read_ahead=read_ahead_bytes(of.entry.size) if local_file is not None else 0)

    def _grant_kernel_writes(self, of: OpenFile) -> Grant:
        """The kernel writes into the spool itself (``Passthrough.open_for_writes``) when this
        is the file's only handle, on a branch whose storage is known to be on this machine
        (the spool is then moved there at the end), and the kernel does not cache writes."""
        spool = of.spool
        if (of.handles != 1 or self.writeback_cache or spool is None or spool.sealed or spool.adopted
                or not self._uploader.known_local(of.node.tree.repo)):
            return NO_GRANT
        grant = self.passthrough.open_for_writes(of.passthrough, spool.path, spool.fd)
        if grant.backing_id:
            self._uploader.stop_tail(of)
            spool.kernel_writes = True
            of.seq_end = None  # the mount does not see the writes: no tail can follow them
            of.kernel_signature = None
        return grant

    # ------------------------------------------------------------------ open files

    def _open_file(self, node: Node) -> tuple[OpenFile, bool]:
        """The node's OpenFile, creating one (``True``) if none is open.  Not yet counted in:
        the release of its last handle may drop it before the caller takes its lock (see
        ``_join_open_file``)."""
        with self._table.lock:
            of = node.open_file
            if of is not None:
                return of, False
            entry = node.stat.entry if node.stat is not None else None
            of = OpenFile(node, entry)
            node.open_file = of
            return of, True

    def close_open_file(self, of: OpenFile) -> None:
        """Drop ``of`` if no handle uses it (and the node, if nothing else does)."""
        with of.lock:  # an open joins ``of`` under this lock only while the node still names it
            with self._table.lock:
                if of.handles > 0:
                    return
                node = of.node
                if node.open_file is of:
                    node.open_file = None
                self._table.drop_if_unused(node)
            self._uploader.stop_tail(of)
            spool, of.spool = of.spool, None
            if spool is not None:
                spool.close()

    @contextlib.contextmanager
    def _join_open_file(self, node: Node, handle: bool = True):
        """``(of, created)``: the node's OpenFile, under its lock, with the new handle counted in
        (unless not ``handle``: a path-based truncate).

        RELEASE reaches the mount whenever the kernel sends it, on another worker thread than
        the next OPEN of the file.  That OPEN may find the OpenFile just before the release of
        its last handle drops it (``close_open_file``); counted into the dropped one, the new
        handle would be invisible to the opens after it: the first would register a backing
        file there, the next would see no backing file, answer without passthrough, and the
        kernel, holding the backing file, refuses that open with EIO.  So an open joins the
        OpenFile only while the node still names it (checked under its lock, the lock under
        which ``close_open_file`` drops it), else looks again."""
        while True:
            of, created = self._open_file(node)
            with of.lock:
                if node.open_file is not of:
                    continue  # dropped by the release of its last handle meanwhile
                native = self._inodes.native_answers
                if native is not None and native.may_hold(node.ino):
                    self._take_native_handles(native, of)
                if handle:
                    of.handles += 1
                yield of, created
                return

    def _take_native_handles(self, native: NativeAnswers, of: OpenFile) -> None:
        """Under ``of.lock``: the handles of ``of``'s file the FUSE binding opened become the
        mount's, one handle standing for all of them (``lakefuse.fs.native_answers``).  From
        the binding's hand-over to this handle's place in the table, a request about them
        finds no handle and waits for ``of.lock`` (``native_handle``)."""
        taken = native.take(of.node.ino)
        if taken is None:
            return
        fh, count, fd, size = taken
        path = os.readlink(f"/proc/self/fd/{fd}")
        entry = of.entry
        if entry is None or entry.size != size or self._local_file(of.node.tree.repo, entry) != path:
            # not (or not known to be) the file's current object: another writer changed the
            # path since the binding opened it; its handles read on what they opened
            entry = Entry(physical_address=path, size=size, mtime=0, checksum="", address_is_full=True)
        handle = FileHandle(self, of, writable=False, entry=entry)
        handle.reader = LocalFileReader(path, fd)
        handle.shares = count
        of.handles += count
        self._handles.put(fh, handle)
        if self.native_reads is not None:
            native_reads.start(self.native_reads, handle)  # its reads stay the binding's while they may

    def native_handle(self, fh: int) -> FileHandle | None:
        """The handle ``fh`` names, if it is one the FUSE binding opened: taken over now if the
        binding still holds it (a request about it reached the handlers: an fsync, a read the
        binding could not answer), or just taken over by another thread; else None."""
        native = self._inodes.native_answers
        ino = native.ino_of_handle(fh) if native is not None else None
        if ino is None:
            return None
        try:
            node = self._table.get(ino)
        except OSError:  # no such inode
            return None
        # a listed file's stat is read at its first open; a file removed since still reads
        with contextlib.suppress(LakefuseError, OSError):
            self._inodes.refresh(node, True)
        with self._join_open_file(node, handle=False) as (of, created):
            handle = self._handles.get(fh)
        if handle is None and created:
            self.close_open_file(of)
        return handle

    def release_share(self, h: Handle, blocking: bool = True) -> bool:
        """One of several kernel handles ``h`` stands for was released (``_take_native_handles``):
        True, and ``h`` stays open; False if it stands for one only (release it).
        ``blocking=False``: WouldBlock rather than wait for the file's lock."""
        if getattr(h, "shares", 1) == 1:
            return False
        of = h.open_file
        if not of.lock.acquire(blocking=blocking):
            raise WouldBlock
        try:
            if h.shares == 1:  # the others were released meanwhile
                return False
            h.shares -= 1
            of.handles -= 1
            of.released.notify_all()
        finally:
            of.lock.release()
        return True

    def close_all(self) -> None:
        """Unmount: drop every open file, whatever its handles (upload first)."""
        if self.siblings is not None:
            self.siblings.close()
        self._mapped.close()
        for node in self._table.nodes():
            of = node.open_file
            if of is not None:
                of.handles = 0
                self.close_open_file(of)

    def open(self, node: Node, flags: int, blocking: bool = True) -> OpenResult:
        """``blocking=False``: a read-only open of a file whose stat memory holds, in a
        repository opened before (its storage adapter exists), else WouldBlock."""
        if node.kind is not NodeKind.FILE:
            raise OSError(errno.EISDIR, "is a directory")
        writable = (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
        truncate = bool(flags & os.O_TRUNC)
        if not blocking and (writable or truncate or node.tree.repo not in self._opened_repos):
            raise WouldBlock
        if writable or truncate:
            self._inodes.writable_tree(node)
        elif node.tree.is_branch:
            self._inodes.read_through_handlers(node, blocking)
        self._inodes.refresh(node, blocking)
        with self._join_open_file(node) as (of, created):
            current = node.stat.entry if node.stat is not None else None
            if of.spool is None and not of.dirty and current is not None and current is not of.entry:
                of.take_entry(current)  # the object changed since the other handles opened it
            if truncate and writable:
                self._truncate_new(of, created)
            from_empty = writable and writes_from_empty_only(flags, truncate)
            grant = self._grant_passthrough(of, readable_object=not writable and not truncate,
                                            writes_from_empty=kernel_may_write(flags, truncate))
            keep_cache = False
            first_open = False  # of these bytes, since the kernel made this inode: none of them cached
            if not writable and of.spool is None and of.entry is not None and not grant.backing_id:
                identity = (of.entry.physical_address, of.entry.checksum)
                first_open = node.cache_id != identity
                keep_cache = not node.tree.is_branch or not first_open
                node.cache_id = identity
            handle = self._new_file_handle(of, writable, grant, from_empty,
                                           read_write=(flags & os.O_ACCMODE) == os.O_RDWR)
        if node.tree.repo not in self._opened_repos:
            self._uploader.local_storage(node.tree.repo)  # ask once, here (see read_nowait)
            self._opened_repos.add(node.tree.repo)
        read_only = not writable and not truncate
        fh = self._handles.add(handle)
        if read_only and first_open:
            self._start_reading(handle)
        return OpenResult(fh, keep_cache=keep_cache, direct_io=handle.direct_io,
                          backing_id=grant.backing_id, noflush=read_only or handle.kernel_writes)

    def _start_reading(self, h: FileHandle) -> None:
        """The first read-only handle of these bytes the mount serves from a local object (a
        branch file; a commit's or tag's without passthrough): open the object now and have the
        kernel start reading its first bytes in without waiting for them (``will_need``).  The
        first READ comes a round trip later and then usually finds them in the page cache, so
        it is answered on the event loop (``read_nowait``) instead of costing a thread hop and
        a disk wait; that hop was most of the cost of reading a small file.  Later opens of the
        same bytes find them in the kernel's cache (``keep_cache``) and send no READ.  Best
        effort: anything unusual is left to the read."""
        entry = h.entry
        if entry is None or not entry.size or h.open_file.spool is not None:
            return
        try:
            if not self._open_local_reader(h, entry):
                return
        except (LakefuseError, OSError) as exc:  # e.g. the object is missing: the read says so
            log.debug("no read-ahead for %s: %s", h.open_file.node.path, exc)
            return
        will_need = getattr(h.reader, "will_need", None)
        if will_need is not None:
            will_need(0, read_ahead_bytes(entry.size))
            if self.siblings is not None:
                node = h.open_file.node
                self.siblings.opened(node.tree, node.path)  # a walk read ahead goes on

    def _open_local_reader(self, h: FileHandle, entry) -> bool:
        """Give ``h`` a reader of its object if that is a file of storage known to be on this
        machine (an ``open``, never a wait: may run on the event loop); whether ``h`` has a
        reader.  False if the object is not local or another thread holds the handle."""
        if h.reader is not None:
            return True
        repo = h.open_file.node.tree.repo
        if self._local_file is None or not self._uploader.known_local(repo):
            return False
        if self._local_file(repo, entry) is None or not h.lock.acquire(blocking=False):
            return False
        try:
            if h.reader is None:
                h.reader = self._state.backend.open_reader(repo, entry)
                if self.native_reads is not None:
                    native_reads.start(self.native_reads, h)
        finally:
            h.lock.release()
        return True

    def create(self, parent: Node, name: bytes | str, mode: int, flags: int, blocking: bool = True,
               uid: int | None = None, gid: int | None = None) -> tuple[OpenResult, Attributes]:
        """``uid``/``gid``: the requester's, the new file's owner (None: not stored)."""
        tree = self._inodes.writable_tree(parent)
        if parent.kind is not NodeKind.DIR:
            raise OSError(errno.ENOTDIR, "not a directory")
        if tree.repo not in self._opened_repos:
            if not blocking:
                raise WouldBlock  # asking where its storage is may open it
            self._uploader.local_storage(tree.repo)  # whether the kernel may write the spool
            self._opened_repos.add(tree.repo)
        name = check_name(decode_name(name))
        refuse_control_dir_name(parent, name, errno.EEXIST)
        path = join(parent.path, name)
        stat, expires = self._inodes.stat_path(tree, path, blocking)  # WouldBlock: not known in memory
        if stat is not None and stat.is_dir:
            raise OSError(errno.EISDIR, path)
        if stat is not None and flags & os.O_EXCL:
            raise OSError(errno.EEXIST, path)
        new_stat = stat if stat is not None else PathStat(False, None)
        node = self._inodes.tree_node(tree, path, new_stat, expires if stat is not None else float("inf"))
        truncated = stat is None or bool(flags & os.O_TRUNC)
        with self._join_open_file(node) as (of, created):
            if truncated:
                self._truncate_new(of, created)
            if stat is None:
                of.metadata.update(mode_metadata(mode, DEFAULT_FILE_MODE))
                if uid is not None:
                    parent_mode, parent_gid = self._mode_and_group(parent)
                    of.metadata.update(self._state.owners.new_entry(uid, gid, parent_mode, parent_gid))
            # before the kernel may write the spool: what it answers now needs no fstat(2) of it
            attrs = self._attrs(node)
            writable = (flags & os.O_ACCMODE) in (os.O_WRONLY, os.O_RDWR)
            from_empty = writable and writes_from_empty_only(flags, truncated)
            grant = self._grant_passthrough(of, readable_object=False,
                                            writes_from_empty=kernel_may_write(flags, truncated))
            handle = self._new_file_handle(of, writable, grant, from_empty,
                                           read_write=(flags & os.O_ACCMODE) == os.O_RDWR)
        if stat is None:
            self._state.unstaged.add(node)
            self._inodes.dir_changed(tree, parent.path)
        self._table.add_lookup(node)
        result = OpenResult(self._handles.add(handle), direct_io=handle.direct_io, backing_id=grant.backing_id,
                            noflush=handle.kernel_writes)
        return result, attrs

    def _truncate_new(self, of: OpenFile, created: bool) -> None:
        """Empty the file for a new handle (its count taken: given back if this fails)."""
        try:
            self._uploader.truncate(of, 0)
        except BaseException:
            of.handles -= 1
            if created:
                self.close_open_file(of)
            raise

    def _new_file_handle(self, of: OpenFile, writable: bool, grant: Grant, writes_from_empty: bool,
                         read_write: bool = False) -> FileHandle:
        """A handle of ``of`` (under ``of.lock``, its count taken).  It gets direct I/O (the
        kernel sends all its reads and writes here, bypassing its page cache of the file):

        - where the passthrough grant asks for it;
        - for a write-only open that creates or truncates the file, if it is the file's only
          handle (``cp``, ``>``: see ``writes_from_empty_only``);
        - for a read-only open while the file is being written (a live spool), and for any
          open beside another direct-I/O handle.

        None of these when the kernel caches writes (``writeback_cache``): its pages gather
        small writes into big ones and hold the newest bytes.  The last rule keeps readers off
        the kernel's page cache while the file changes under them.  A read answered short
        because a rewrite just truncated the file is zero-filled by the kernel, and when the
        kernel's idea of the size is stale at that moment the reader gets those zeros (4
        readers beside a rewriter did, about every other run).
        Handles opened before the writes began keep the page cache; the writer then writes
        through it (it is not alone), so the pages those readers see hold what it wrote."""
        if grant.direct_io:
            direct_io = True
        elif grant.backing_id or self.writeback_cache:
            # with the writeback cache the kernel's pages are the file's newest bytes: a direct
            # read would miss writes still in them (a reader saw EOF in a hole a writer had made)
            direct_io = False
        else:
            direct_io = of.direct_handles > 0 or (writes_from_empty and of.handles == 1) or \
                (not writable and of.spool is not None and not of.spool.sealed)
        handle = FileHandle(self, of, writable, of.entry, direct_io)
        handle.passthrough = grant.backing_id != 0
        names_spool = grant.backing_id and of.spool is not None and of.spool.kernel_writes \
            and of.passthrough.path == of.spool.path
        if names_spool and not direct_io:
            handle.kernel_writes = True
            of.kernel_writers += 1
        if names_spool and read_write:
            handle.maps_spool = True
            of.spool_mappers += 1
            of.spool.mappable = True  # a shared mapping through it may outlive it (``lakefuse.fs.mapped``)
        of.direct_handles += direct_io
        return handle

    def truncate(self, node: Node, size: int) -> None:
        """truncate(2) of a file (with or without an open handle)."""
        self._inodes.refresh(node, True)
        of = created = None
        try:
            with self._join_open_file(node, handle=False) as (of, created):
                self._uploader.truncate(of, size)
                if of.handles == 0:
                    self._uploader.upload(of)  # path-based truncate: no close will follow
        finally:
            if created:
                self.close_open_file(of)

    # ------------------------------------------------------------------ requests on a handle

    def read(self, h: FileHandle, offset: int, size: int) -> bytes:
        of = h.open_file
        if of.spool is not None:
            with of.lock:
                if of.spool is not None:
                    return of.spool.read(offset, size)
        entry = h.entry
        if entry is None or offset >= entry.size:
            return b""
        reader = h.reader
        if reader is None:
            with h.lock:
                if h.reader is None:
                    h.reader = self._state.backend.open_reader(of.node.tree.repo, entry)
                reader = h.reader
        return reader.read(offset, min(size, entry.size - offset))

    def read_nowait(self, h: FileHandle, offset: int, size: int, buffer: bytearray):
        if h.open_file.spool is not None:
            raise WouldBlock  # being written
        if h.fh in h.open_file.native_reads:
            self._missed(h, offset)
            raise WouldBlock  # the binding just tried these bytes: not cached
        entry = h.entry
        if entry is None or offset >= entry.size:
            return b""
        self._open_local_reader(h, entry)  # a local object: opened here
        read_nowait = getattr(h.reader, "read_nowait", None)
        if read_nowait is None:
            raise WouldBlock
        want = min(size, entry.size - offset)
        if len(buffer) < want:
            raise WouldBlock
        data = read_nowait(offset, want, buffer)
        if data is None:
            self._missed(h, offset)
            raise WouldBlock
        return data

    def _missed(self, h: FileHandle, offset: int) -> None:
        """A READ of ``h`` found its bytes uncached: at the file's start, a program may be
        walking its directory cold (``lakefuse.fs.siblings``)."""
        if offset == 0 and self.siblings is not None and not h.writable and h.entry is not None:
            node = h.open_file.node
            self.siblings.missed(node.tree, node.path, h.entry.size)

    def write(self, h: FileHandle, offset: int, data: bytes) -> int:
        if not h.writable:
            raise OSError(errno.EBADF, "file not open for writing")
        of = h.open_file
        with of.lock:
            at, rest = self._uploader.spool_for_write(of, offset, data)
            if rest:
                self._write_spool(of, h, at, rest)
            return len(data)

    def _write_spool(self, of: OpenFile, h: FileHandle, offset: int, data: bytes) -> int:
        """Write into the live spool of ``of`` (under ``of.lock``)."""
        if of.seq_end is not None and offset != of.seq_end:
            of.seq_end = None  # not an append: the tail cannot follow
            self._uploader.stop_tail(of)
        if of.tail is not None:
            of.spool.write_behind(offset, data)
            written = len(data)
        else:
            written = of.spool.write(offset, data)
        self._wrote(of, h, written)
        return written

    def write_nowait(self, h: FileHandle, offset: int, data: bytes) -> int:
        if not h.writable:
            raise WouldBlock
        of = h.open_file
        if not of.lock.acquire(blocking=False):
            raise WouldBlock
        try:
            spool = of.spool
            if spool is None or spool.sealed or (spool.adopted and offset < spool.base_size):
                raise WouldBlock  # a spool must be made (maybe from the object's bytes) first
            if of.tail is None:  # a small write into the spool file: one pwrite
                if len(data) > INLINE_WRITE_BYTES:
                    raise WouldBlock
                return self._write_spool(of, h, offset, data)
            if offset != of.seq_end:
                raise WouldBlock
            if not spool.write_behind(offset, data, block=False):
                raise WouldBlock  # the queue is full: wait for room on a worker thread
            self._wrote(of, h, len(data))
            return len(data)
        finally:
            of.lock.release()

    def _wrote(self, of: OpenFile, h: FileHandle, written: int) -> None:
        # set-ID bits: the kernel leaves them to us (FUSE_HANDLE_KILLPRIV_V2)
        content_changed(of.metadata, of.mtime_ns if not of.dirty and of.entry is not None else None)
        of.dirty = True
        of.uncached_writes |= h.direct_io
        of.mtime_ns = time.time_ns()
        of.mtime_explicit = False
        if of.seq_end is not None:
            self._uploader.appended(of, written)

    def write_time(self, node: Node, mtime_ns: int) -> Attributes:
        """An mtime the kernel's writeback cache sends on its own, from memory: for a file being
        written, the time of its writes (kept as such, not as a utime); for an unlinked file
        nothing; the mtime it already has (the kernel repeats it after an unlink or rename of
        the file) changes nothing.  Else WouldBlock: a change to store."""
        if not node.attached:
            return self._attrs(node)  # unlinked: never stage it again
        of = node.open_file
        if of is not None:
            if not of.lock.acquire(blocking=False):
                raise WouldBlock
            try:
                if of.dirty:
                    of.mtime_ns = mtime_ns
                    of.mtime_explicit = False
                    return self._attrs(node)
            finally:
                of.lock.release()
        self._inodes.ensure_stat(node, blocking=False)
        attrs = self._attrs(node)
        if attrs.mtime_ns != mtime_ns:
            raise WouldBlock
        return attrs

    def flush_nowait(self, h: FileHandle) -> None:
        of = h.open_file
        if h.kernel_writes:
            self._closed(h)
            return  # stored at the handle's release (see ``sync``)
        if not h.writable or not of.dirty:
            return  # nothing to upload
        if not of.lock.acquire(blocking=False):
            raise WouldBlock
        try:
            if not self._uploader.uploads_locally_now(of):
                raise WouldBlock
            self._uploader.upload(of)
        finally:
            of.lock.release()

    def sync(self, h: FileHandle, any_descriptor: bool) -> None:
        """close(2) (``any_descriptor`` False: only a descriptor that may have written uploads)
        or fsync(2): durably, also when a close already uploaded the bytes without)."""
        of = h.open_file
        if h.kernel_writes and not any_descriptor:
            # close(2) of a descriptor the kernel writes for: a dup of it may write on (a
            # shell's ``>`` closes one right away), so the file is stored at its release
            self._closed(h)
            return
        if (any_descriptor or h.writable) and of.dirty:
            self._uploader.upload(of, durable=any_descriptor)
        elif any_descriptor:
            self._uploader.make_durable(of)

    @staticmethod
    def _closed(h: FileHandle) -> None:
        """A descriptor of ``h`` was closed (FLUSH), or all of them (its RELEASE came): the
        RELEASE is on its way or being answered, unless a dup is still open
        (``Uploader.await_kernel_release``).  The kernel sends no FLUSH for a handle it writes
        into the spool (``noflush``: one round trip less per file created), so for those the
        RELEASE says it, as it arrives (``release_nowait``)."""
        if not h.closed:
            of = h.open_file
            with of.lock:
                h.closed = True
                of.kernel_closed += h.kernel_writes

    def release_nowait(self, h: FileHandle) -> None:
        of = h.open_file
        if (of.dirty and not h.kernel_writes) or not of.lock.acquire(blocking=False):
            raise WouldBlock  # an upload to make, or a busy file (closing a reader is cheap)
        try:
            # the kernel sends no FLUSH for a handle it writes (``noflush``): its RELEASE is
            # where the mount learns that its descriptors are closed, before the hop below
            if h.kernel_writes:
                self._closed(h)
            # the last handle of a small new file the kernel wrote: stored here (a rename and a
            # read of its spool), as a close stores one the mount wrote (``flush_nowait``)
            if of.dirty and not (h.kernel_writes and of.handles == 1
                                 and self._uploader.uploads_locally_now(of, releasing_writer=True)):
                raise WouldBlock
            self.release(h)  # under the (re-entrant) lock: nothing dirties the file meanwhile
        finally:
            of.lock.release()

    def release(self, h: FileHandle) -> None:
        if h.reader is not None:
            native_reads.stop(h)  # before its descriptor closes
            with contextlib.suppress(Exception):
                h.reader.close()
        of = h.open_file
        # the file's lock is held from the counts to the store: an upload waiting for this
        # release (``OpenFile.await_kernel_release``) wakes to find the file stored, and none
        # starts in between to store a copy of the spool this release moves into storage
        with of.lock:
            of.handles -= 1
            last = of.handles == 0
            of.direct_handles -= h.direct_io
            of.kernel_writers -= h.kernel_writes
            of.spool_mappers -= h.maps_spool
            of.kernel_closed -= h.kernel_writes and h.closed
            if h.passthrough:
                self.passthrough.release(of.passthrough)
            # the kernel wrote the spool for this handle, and no longer can: store the file now,
            # whatever other handles (readers served by the mount) stay open
            writes_ended = h.kernel_writes and of.kernel_writers == 0
            # a mapping made through a handle of the file may write on into its spool, or the
            # kernel has not let go of the handle's backing file yet: ``MappedSpools`` stores it
            mapped = last and of.dirty and of.kernel_may_change_spool()
            if (last or writes_ended) and not mapped:
                try:
                    if of.dirty:
                        self._uploader.upload(of)
                except Exception:
                    log.exception("upload of %s on release failed; its changes are lost", of.node.path)
                finally:
                    if last:
                        self._drop_released(of)
            of.released.notify_all()
        if mapped:
            self._mapped.watch(of)

    def _drop_released(self, of: OpenFile) -> None:
        """The last handle of ``of`` was released, and what it wrote stored: drop it."""
        node = of.node
        if node.stat is None or node.stat.entry is None:  # never stored: no entry waits to be staged
            self._state.unstaged.discard(node.tree, node.path, node)
        self.close_open_file(of)

    def _settle_mapped(self, of: OpenFile) -> bool:
        """For ``MappedSpools``: store a released file whose spool may still be mapped (a copy
        while it is), and drop it once it is not; whether it is done with (also when a new
        handle took it over, or it was dropped meanwhile)."""
        with of.lock:
            if of.handles > 0 or of.node.open_file is not of:
                return True
            try:
                if of.dirty:
                    self._uploader.upload(of)  # a copy while mapped (unchanged since the last: nothing)
            except Exception:
                log.exception("upload of %s after its release failed; its changes are lost", of.node.path)
                of.dirty = False
            if of.dirty:  # the upload leaves it so while the spool may still change
                return False
            self._drop_released(of)
            return True
