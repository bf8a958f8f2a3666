"""Written files to objects: ``Uploader`` owns spools and uploads.

A file being written lives in a local spool file (``lakefuse.fs.spool``), seeded with the
object's bytes on the first write that does not truncate it (``ensure_spool``) or emptied
(``truncate``); ``upload`` stores it as a new object and stages it (fsync, close, commit,
rename, unmount).  Only an fsync(2) asks for a durable upload: other uploads leave the object's
bytes to the kernel's writeback (they survive a crash of the mount, not of the machine) and
note the repository in ``unsynced``; the next fsync(2) of a file or directory of it syncs
storage, and a commit makes everything it takes durable first (``Catalog.commit``).  Where
storage is a local directory, a spool is made where it becomes an object (``MountState.spools_for``,
``SpoolReserve`` in place), and storing it gives it an entry there (``_store_file``); other
local spools are moved into storage, not copied.  A big file written in order from empty gets a
``SpoolTail`` once it passes ``TAIL_MIN_BYTES``: its bytes are hashed as they arrive when
storage is on this machine, else streamed to storage while written, so close costs little
more than an fsync.  Also the empty objects of directory markers (``upload_empty``).

Objects the mount stored and nobody else can have seen are recorded in ``MountState.owned``
(``lakefuse.fs.owned``): an append to such a file writes into its object's own file
(``ensure_spool``, then ``_restage_appended``), and the object a rewrite replaces is deleted
from storage soon after (``upload``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time

from lakefuse.checksums import ContentHasher, content_hasher
from lakefuse.errors import LakefuseError, ObjectNotFound
from lakefuse.fs.attributes import MTIME_NS_KEY, content_changed
from lakefuse.fs.handles import RELEASE_WAIT, OpenFile
from lakefuse.fs.spool import Spool, SpoolTail
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import PathStat, Tree
from lakefuse.graveler.model import Entry

log = logging.getLogger(__name__)

#: a file written sequentially from empty gets a ``SpoolTail`` once it is this big: hashing its
#: bytes as they arrive (storage on this machine) or streaming them to storage (remote)
TAIL_MIN_BYTES = 8 * 1024 * 1024
#: how much a hashing tail reads from the spool at a time
HASH_CHUNK = 4 * 1024 * 1024
#: the biggest new file a close uploads on the event loop (``uploads_locally_now``)
INLINE_UPLOAD_BYTES = 256 * 1024
#: a file at least this big is appended to in place when it may be (smaller ones are copied:
#: cheaper than the database read that decides)
ADOPT_MIN_BYTES = 256 * 1024
#: the most bytes below the end of an appended-in-place file compared with a write's
#: (``spool_for_write``: the writeback cache's whole pages)
REPEAT_CHECK_BYTES = 1024 * 1024


#: the checksum of no bytes (directory markers)
_EMPTY_CHECKSUM = content_hasher().hexdigest()


class Uploader:
    def __init__(self, state: MountState):
        self._state = state
        self._backend = state.backend
        self._stream_upload = getattr(state.backend, "upload_stream", None)  # optional: see SpoolTail
        self._stores_locally: dict[str, bool] = {}  # repo -> backend.stores_locally(repo)
        self._owned = state.owned
        self._local_file = getattr(state.backend, "local_file", None)
        #: repositories holding objects uploaded without ``durable`` since their last sync
        self.unsynced: set[str] = set()

    # ------------------------------------------------------------------ spools

    def ensure_spool(self, of: OpenFile, keep: int | None = None, at: int | None = None) -> None:
        """Give ``of`` a writable spool holding the file's current bytes (the first ``keep``
        of them): from its object, or from its sealed spool (whose file storage took).  For a
        write at ``at`` at or after the end of a file whose object the mount may append to
        in place (see ``lakefuse.fs.owned``), that object's own file."""
        sealed = of.spool
        if sealed is not None and not sealed.sealed:
            if not sealed.adopted or (keep is None and (at is None or at >= sealed.base_size)):
                return
            # an object's own file takes appends only: copy it to a spool of its own first
        elif keep is None and at is not None and self._adopt(of, at):
            return
        spool = self._state.spools_for(of.node.tree.repo).new()
        try:
            if sealed is not None:
                size = sealed.size() if keep is None else min(sealed.size(), keep)
                if size > 0:
                    spool.fill_from(sealed, size)
            else:
                entry = of.entry
                size = entry.size if entry is not None else 0
                if keep is not None:
                    size = min(size, keep)
                if size > 0:
                    reader = self._backend.open_reader(of.node.tree.repo, entry)
                    try:
                        spool.fill_from(reader, size)
                    finally:
                        reader.close()
        except BaseException:
            spool.close()
            raise
        of.spool = spool
        of.seq_end = 0 if size == 0 else None
        if sealed is not None:
            if sealed.adopted:  # bytes appended to the object's file are in the copy: cut them off
                os.ftruncate(sealed.fd, sealed.base_size)
                of.owned = None
            sealed.close()

    def spool_for_write(self, of: OpenFile, offset: int, data: bytes) -> tuple[int, bytes]:
        """``ensure_spool`` for writing ``data`` at ``offset`` (under ``of.lock``); the part of
        the write still to make.  The kernel's writeback cache writes whole pages: an append
        comes as a write that starts in the last page of the file, repeating bytes the object
        already holds.  Those repeated bytes are skipped, so the write is still an append in
        place; a write that changes bytes below the staged size copies the file first."""
        spool = of.spool
        if spool is None or spool.sealed:
            entry = of.entry
            reaches_past_end = entry is not None and offset < entry.size < offset + len(data)
            self.ensure_spool(of, at=entry.size if reaches_past_end else offset)
            spool = of.spool
        if spool.adopted and offset < spool.base_size:
            overlap = min(len(data), spool.base_size - offset)
            if overlap <= REPEAT_CHECK_BYTES and spool.read(offset, overlap) == data[:overlap]:
                return offset + overlap, data[overlap:]
            self.ensure_spool(of, at=offset)  # a real change below the end: copied first
        return offset, data

    def _adopt(self, of: OpenFile, at: int) -> bool:
        """Make the object's own file the spool of ``of`` for an append (see ensure_spool)."""
        entry, node = of.entry, of.node
        if (entry is None or entry.size < ADOPT_MIN_BYTES or at < entry.size or of.spool is not None
                or self._local_file is None or not self.local_storage(node.tree.repo)):
            return False
        owned = self._owned.adoptable(node.tree, node.path, entry)
        if owned is None:
            return False
        try:
            path = self._local_file(node.tree.repo, entry)
            if path is None:
                return False
            of.spool = Spool.adopt(path, entry.size)
        except (OSError, LakefuseError) as exc:
            log.debug("appending to %s in place: %s", node.path, exc)
            return False
        of.owned = owned
        of.seq_end = None
        return True

    def truncate(self, of: OpenFile, size: int) -> None:
        """Cut (or extend) the file to ``size`` bytes, now (under ``of.lock``): open(O_TRUNC),
        create of an existing file, and truncate(2) all come here.  The file is changed and
        its mtime is now (no longer one set by utime)."""
        self.ensure_spool(of, keep=min(size, of.size()))
        self.stop_tail(of)
        of.spool.truncate(size)
        of.seq_end = 0 if size == 0 and not of.spool.kernel_writes else None
        content_changed(of.metadata, of.mtime_ns if not of.dirty and of.entry is not None else None)
        of.dirty = True
        of.mtime_ns = time.time_ns()
        of.mtime_explicit = False

    # ------------------------------------------------------------------ tails

    def local_storage(self, repo: str) -> bool:
        """Whether the repository's objects live on this machine (asked once: the first call
        opens its storage, so it is made on a worker thread)."""
        local = self._stores_locally.get(repo)
        if local is None:
            local = bool(self._backend.stores_locally(repo))
            site = self._backend.in_place_objects(repo) if local else None
            if site is not None:  # its files' spools are made where they become objects
                self._state.add_in_place(repo, site)
            self._stores_locally[repo] = local
        return local

    def appended(self, of: OpenFile, written: int) -> None:
        """``written`` bytes were appended to a file written in order from empty: once it is
        big, start its tail."""
        of.seq_end += written
        if of.tail is None and of.seq_end >= TAIL_MIN_BYTES:
            self._start_tail(of)

    def _start_tail(self, of: OpenFile) -> None:
        """Hash the appended bytes as they arrive when storage is on this machine (the spool is
        moved there at close), else stream them to storage."""
        tree, path = of.node.tree, of.node.path
        if self.local_storage(tree.repo):
            hasher = self._backend.content_hasher()
            spool = of.spool

            def consume(stream) -> ContentHasher:
                position = 0
                while chunk := stream.read(HASH_CHUNK):
                    hasher.update(chunk)  # hashlib releases the GIL: this runs beside the writes
                    # storage fsyncs the file at close: have the disk take the bytes meanwhile
                    spool.start_writeback(position, len(chunk))
                    position += len(chunk)
                return hasher

            of.tail = SpoolTail(spool, of.seq_end, consume, name="lakefuse-spool-hash")
            spool.listener = of.tail.feed
            return
        if self._stream_upload is None:
            return
        mtime, metadata, content_type = self._upload_settings(of)

        def consume(stream) -> Entry:
            return self._stream_upload(tree.repo, tree.branch, path, stream, mtime=mtime, metadata=metadata,
                                       content_type=content_type)

        of.tail = SpoolTail(of.spool, of.seq_end, consume, name="lakefuse-spool-upload")
        of.spool.listener = of.tail.feed

    @staticmethod
    def stop_tail(of: OpenFile) -> None:
        tail, of.tail = of.tail, None
        if tail is not None:
            if of.spool is not None:
                of.spool.listener = None
            tail.abort()

    def _finish_tail(self, of: OpenFile) -> Entry | ContentHasher | None:
        """What the tail made of the file's bytes if it read exactly all of them: the entry of
        a streaming upload (restaged if metadata changed meanwhile) or their hash; else None
        (the caller stores the spool the ordinary way)."""
        of.spool.drain()  # every byte in the file (raises what failed the spool)
        tail, of.tail = of.tail, None
        of.spool.listener = None
        node = of.node
        if not node.attached or of.seq_end is None or of.seq_end != of.spool.size() or tail is None:
            if tail is not None:
                tail.abort()
            return None
        try:
            result = tail.finish()
        except Exception as exc:  # noqa: BLE001 - the ordinary upload follows
            log.debug("spool tail of %s failed (%s); storing the spool", node.path, exc)
            return None
        if tail.consumed != of.seq_end:
            return None
        if not isinstance(result, Entry):
            return result  # the hash
        entry = result
        if entry.size != of.seq_end:
            return None
        mtime, metadata, content_type = self._upload_settings(of)
        if entry.mtime != mtime or dict(entry.metadata) != metadata or (content_type and entry.content_type != content_type):
            entry = dataclasses.replace(entry, mtime=mtime, metadata=metadata,
                                        content_type=content_type or entry.content_type)
            self._state.stager.stage_now(node.tree, [(node.path, entry)])
        return entry

    # ------------------------------------------------------------------ uploads

    @staticmethod
    def _upload_settings(of: OpenFile) -> tuple[int, dict[str, str], str | None]:
        """mtime, user metadata and content type an upload of ``of`` stores."""
        metadata = dict(of.metadata)
        if of.mtime_explicit:
            metadata[MTIME_NS_KEY] = str(of.mtime_ns)
        else:
            metadata.pop(MTIME_NS_KEY, None)
        return of.mtime_ns // 1_000_000_000, metadata, of.content_type

    def sync(self, repo: str) -> None:
        """Make what was uploaded to ``repo`` without ``durable`` durable (fsync(2) of a
        directory, or of a file uploaded at an earlier close)."""
        if repo in self.unsynced:
            self.unsynced.discard(repo)  # before: an upload racing the sync notes it again
            try:
                self._backend.sync(repo)
            except BaseException:
                self.unsynced.add(repo)
                raise

    def known_local(self, repo: str) -> bool:
        """``local_storage(repo)`` if already asked, else False (never opens storage)."""
        return self._stores_locally.get(repo) is True

    def uploads_locally_now(self, of: OpenFile, releasing_writer: bool = False) -> bool:
        """Whether ``upload(of)`` costs only a few local system calls (under ``of.lock``): a new
        file (its entry waits for the stager), small, written without a tail, to storage known
        to be on this machine; it reads its spool once for the checksum and renames it.  Not
        while the kernel may write into the spool (the upload would copy it, or wait for a
        release), except for the release of its last such handle (``releasing_writer``)."""
        node = of.node
        spool = of.spool
        return (of.tail is None and node.attached and spool is not None and not spool.sealed
                and of.kernel_writers == (1 if releasing_writer else 0)
                and self.known_local(node.tree.repo)
                and self._state.unstaged.node(node.tree, node.path) is node
                and spool.size() <= INLINE_UPLOAD_BYTES)

    def upload(self, of: OpenFile, durable: bool = False) -> None:
        """Store and stage the file's bytes if it changed since its last upload; ``durable``:
        for fsync(2), the bytes must survive a crash of the machine once this returns."""
        with of.lock:
            if not of.dirty:
                if durable:  # stored meanwhile (a release on another thread): fsync makes it durable
                    self.make_durable(of)
                return
            node = of.node
            tree = node.tree
            if not node.attached:
                self.stop_tail(of)
                of.dirty = False  # unlinked while open: nothing to keep
                return
            spool = of.spool
            kernel_written = spool is not None and spool.kernel_writes and not spool.sealed
            signature = None
            # right after close(2) (a rename, a commit, an fsync through another descriptor):
            # the release stores the spool itself, where an upload now would copy it
            if kernel_written and of.await_kernel_release(RELEASE_WAIT):
                if durable:  # what the release stored, durably before fsync(2) returns
                    self.make_durable(of)
                return
            if kernel_written:
                signature = spool.signature()
                if signature == of.kernel_signature:  # stored before, and not written since
                    self._stored_unchanged(of, durable)
                    return
                written = spool.write_time_ns(signature[1])  # the time of the kernel's last write
                if written is not None and not of.mtime_explicit:
                    of.mtime_ns = written
            tail_result = self._finish_tail(of) if of.tail is not None else None
            # a new file's first entries wait for the stager's next batch, unless fsync asks
            deferred = not durable and self._state.unstaged.node(tree, node.path) is node
            replaced = of.entry
            # asked once (a lease, where a mapping may hold the spool): the kernel may change
            # the spool later, so the file stays to be stored again
            may_change = kernel_written and of.kernel_may_change_spool()
            if isinstance(tail_result, Entry):
                entry = tail_result  # streamed while written, and staged
                deferred = False
            elif spool.adopted:
                entry = self._restage_appended(of, durable)
            elif may_change or (kernel_written and of.spool_is_backing()):
                # the spool stays the file's: storage takes a copy (see ``spool_is_backing``)
                entry = self._store_copy(of, durable=durable, deferred=deferred)
            else:  # the size the signature's fstat gave: the kernel no longer writes (``may_change``)
                entry = self._store_spool(of, hasher=tail_result, durable=durable, deferred=deferred,
                                          size=signature[0] if signature is not None else None)
            if replaced is not None and replaced.physical_address != entry.physical_address and of.handles <= 1:
                self._owned.superseded(tree, node.path, replaced)  # no other handle reads it
            # stored again if the spool changes meanwhile (``kernel_signature`` tells)
            of.dirty = may_change
            of.kernel_signature = signature if of.dirty else None
            of.unsynced = not durable
            of.seq_end = None
            # the stored object, but the open file keeps its own mtime (to the nanosecond) and
            # content type (None: the backend's choice): not ``take_entry``
            of.entry = entry
            of.metadata = dict(entry.metadata)
            of.mtime_explicit = False
            node.stat = PathStat(False, entry)
            node.expires = tree.remember(node.path, node.stat, pending=deferred)
            # the kernel's pages hold these bytes, unless some were written around its cache
            # (direct I/O, or by the kernel into the spool: the file's own pages never saw them)
            node.cache_id = None if of.uncached_writes or kernel_written else (entry.physical_address, entry.checksum)
            of.uncached_writes = False
            if not deferred:
                self._state.unstaged.discard(tree, node.path, node)

    def _stored_unchanged(self, of: OpenFile, durable: bool) -> None:
        """``upload`` of a spool the kernel writes into whose bytes were stored already and
        did not change since: for fsync(2), make that upload durable."""
        of.dirty = of.kernel_may_change_spool()
        if durable:
            self.make_durable(of)

    def make_durable(self, of: OpenFile) -> None:
        """For fsync(2): what earlier uploads of ``of`` stored without durability (at a
        close, or at a release on another thread) survives a crash once this returns: its
        entry is staged and its object synced."""
        if of.unsynced:
            of.unsynced = False
            self._state.stager.flush(of.node.tree)
            self.sync(of.node.tree.repo)

    def _store_copy(self, of: OpenFile, durable: bool, deferred: bool) -> Entry:
        """Store a copy of a spool the kernel may still write into (a descriptor of it is
        open: fsync(2), a commit, a rename): the object must not change once stored, so the
        spool itself stays the file's, and storage takes the copy (holes kept as holes)."""
        live = of.spool
        copy = self._state.spools_for(of.node.tree.repo).new()
        try:
            copy.fill_from(live, live.size())
            # not put in ``of.spool``, even for a moment: the event loop reads the file's size
            # and times from it without the file's lock (a closed copy there answered EBADF)
            return self._store_spool(of, hasher=None, durable=durable, deferred=deferred, spool=copy)
        finally:
            copy.close()

    def _store_spool(self, of: OpenFile, hasher: ContentHasher | None, durable: bool, deferred: bool,
                     spool: Spool | None = None, size: int | None = None) -> Entry:
        """Store the spool as a new object and stage it, now or (``deferred``) in the stager's
        next batch.  Storage on this machine takes the spool file itself (moved, not copied:
        the spool is sealed first, and a later write copies its bytes to a new spool); the
        object is then the mount's own (``lakefuse.fs.owned``), with its hash state if big.
        ``size``: the spool's, if the caller just asked it (one fstat less)."""
        node = of.node
        tree = node.tree
        spool = of.spool if spool is None else spool  # (a copy of it: ``_store_copy``)
        if spool.sealed:  # an earlier move failed half-way: the file may be gone
            self.ensure_spool(of)
            spool, hasher, size = of.spool, None, None
        move = self.local_storage(tree.repo)
        cursor = tree.change_cursor  # before storing: what the branch was at most
        if move:
            spool.seal()
            if hasher is None:  # from the open spool: storage need not open the file again
                hasher = self._backend.content_hasher()
                hasher.update_file(spool.fd, spool.size() if size is None else size)
        mtime, metadata, content_type = self._upload_settings(of)
        if not durable:
            self.unsynced.add(tree.repo)
        entry = self._store_file(tree.repo, spool, checksum=hasher.hexdigest() if hasher else None, mtime=mtime,
                                 metadata=metadata, content_type=content_type, move=move, durable=durable)
        if move:
            self._owned.stored(tree, node.path, entry, cursor, hasher)
        if deferred:
            self._state.stager.put(tree, node.path, entry)
        else:
            self._state.stager.stage_now(tree, [(node.path, entry)])
        return entry

    def _store_file(self, repo: str, spool: Spool, *, checksum: str | None, mtime: int, metadata: dict[str, str],
                    content_type: str | None = None, move: bool, durable: bool) -> Entry:
        """A new object of ``repo`` holding the spool's bytes, staging nothing: its file made
        where it becomes that object is given an entry there (``Spool.in_place_address``);
        else the file is moved into storage (``move``, the spool sealed) or copied.  The spool
        is handed over once storage took its file."""
        reserve = self._state.in_place_spools.get(repo)
        address = spool.in_place_address(reserve.in_place) if reserve is not None and checksum else None
        if address is not None:
            try:
                entry = self._backend.store_in_place(repo, address, spool.fd, checksum=checksum, mtime=mtime,
                                                     metadata=metadata, content_type=content_type, durable=durable)
            except ObjectNotFound:  # deleted meanwhile (by hand, or a gc with a short --min-age)
                log.warning("the spool file %s was deleted before it was stored; storing a copy", spool.path)
                move = False  # its bytes are still there, through the descriptor
            else:
                spool.handed_over(entry.size)
                return entry
        entry = self._backend.store_file(repo, spool.path, mtime=mtime, metadata=metadata, content_type=content_type,
                                         checksum=checksum, move=move, durable=durable, source_fd=spool.fd)
        if move:
            spool.handed_over(entry.size)
        return entry

    def _restage_appended(self, of: OpenFile, durable: bool) -> Entry:
        """Stage the object appended to in place (its own file is the spool): same address,
        the new size, the checksum extended by the appended bytes."""
        node, spool, owned = of.node, of.spool, of.owned
        tree = node.tree
        spool.drain()
        checksum, hasher = self._owned.checksum_after_appends(owned, spool.read, spool.size())
        if durable:
            os.fsync(spool.fd)
        else:
            self.unsynced.add(tree.repo)
        mtime, metadata, content_type = self._upload_settings(of)
        entry = dataclasses.replace(of.entry, size=spool.size(), checksum=checksum, mtime=mtime, metadata=metadata,
                                    content_type=content_type or of.entry.content_type)
        self._state.stager.stage_now(tree, [(node.path, entry)])
        self._owned.appended(owned, entry, hasher)
        spool.base_size = entry.size  # these bytes are the staged object's now: appends only after them
        return entry

    def flush_all(self, tree: Tree | None = None) -> list[tuple[str, Exception]]:
        """Upload every written file (of one tree); the failures.  Their entries may still wait
        in the stager (``stager.flush`` writes them)."""
        failures = []
        for node in self._state.table.nodes():
            of = node.open_file
            if of is None or not of.dirty or (tree is not None and node.tree is not tree):
                continue
            try:
                self.upload(of)
            except Exception as exc:  # noqa: BLE001 - reported to the caller
                failures.append((node.path, exc))
        return failures

    def store_bytes(self, tree: Tree, data: bytes, metadata: dict[str, str], mtime: int) -> Entry:
        """Store ``data`` as a new object of ``tree``'s repository, staging nothing (a symbolic
        link's target, a special file's empty object): moved into local storage like a closed
        file, and durable at the next sync like one."""
        spool = self._state.spools_for(tree.repo).new()
        try:
            if data:
                spool.write(0, data)
            move = self.local_storage(tree.repo)
            if move:
                spool.seal()
            self.unsynced.add(tree.repo)
            hasher = self._backend.content_hasher()
            hasher.update(data)
            return self._store_file(tree.repo, spool, checksum=hasher.hexdigest(), mtime=mtime, metadata=metadata,
                                    move=move, durable=False)
        finally:
            spool.close()

    def upload_empty(self, tree: Tree, key: str, metadata: dict[str, str], mtime: int | None = None) -> Entry:
        """Store and stage an empty object (a directory marker); ``mtime``: default now."""
        entry = self.store_empty(tree, metadata, mtime)
        self._state.stager.stage_now(tree, [(key, entry)])
        return entry

    def store_empty(self, tree: Tree, metadata: dict[str, str], mtime: int | None = None) -> Entry:
        """Store an empty object (a directory marker), staging nothing: ``upload_empty`` for a
        caller that stages it with the stager's next batch.  A new empty spool's file, where it
        lies or moved into storage, not fsynced (the checksum given: storage does not read it)."""
        spool = self._state.spools_for(tree.repo).new()
        self.unsynced.add(tree.repo)
        try:
            return self._store_file(tree.repo, spool, checksum=_EMPTY_CHECKSUM,
                                    mtime=int(time.time()) if mtime is None else mtime, metadata=metadata,
                                    move=True, durable=False)
        finally:
            spool.close()
