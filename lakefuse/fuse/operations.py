"""``LakeOperations``: the pyfuse3 request handlers, a thin translation onto ``LakeFilesystem``.

Owns: converting pyfuse3 arguments and results (``EntryAttributes``, ``FileInfo``,
``StatvfsData``), deciding what runs on the trio thread (answers from memory: cached lookups and
attributes; the ``*_nowait`` and ``blocking=False`` calls that cost a few local system calls at
most, see ``lakefuse.fs.files``) and what goes to a worker thread (anything that may touch the
database, remote storage, or wait), and the one error boundary (``fuse_errors``): ``LakefuseError`` and ``OSError``
become their errno, anything unexpected is logged and answered with EIO, so one bad call never
takes the mount down.

Logging and counting of errors: ordinary answers (ENOENT of a lookup, EROFS under a tag...)
are logged at DEBUG; EIO (storage failures, corrupted data) and any error of a ``read`` (the
file is open: ENOENT there means its bytes are gone from storage) at WARNING; anything that
is neither a ``LakefuseError`` nor an ``OSError`` (a bug) at ERROR with its traceback; each
with the operation, the inode or handle and the ``lakefs://`` path it was about.  Every errno
answered is counted per operation (``LakeOperations.errors``: operation -> {errno: count});
the runner writes the counts to the mount's status file and logs them at unmount.
"""

from __future__ import annotations

import errno
import functools
import inspect
import logging
import time

import pyfuse3
import trio

from lakefuse.errors import LakefuseError
from lakefuse.fs.filesystem import Attributes, LakeFilesystem, OpenResult, WouldBlock
from lakefuse.fs.xattrs import UNSUPPORTED_NAMESPACES
from lakefuse.fuse.native_answers import BindingAnswers, binding_answers
from lakefuse.fuse.native_reads import binding_reads
from lakefuse.fuse.passthrough import KernelBackingFiles, granted_session_fd, has_cap_sys_admin
from lakefuse.fuse.spin import start_idle_reader
from lakefuse.fuse.status import errno_name

log = logging.getLogger(__name__)

#: worker threads serving requests that may block (database, storage, disk)
WORKER_THREADS = 16
#: the largest read the kernel sends (max_pages 256 of the libfuse session)
READ_BUFFER_BYTES = 1024 * 1024
#: what lakefuse's build of pyfuse3 adds for listings without attributes (None: a stock pyfuse3,
#: whose listings give every entry its attributes)
_reply_name = getattr(pyfuse3, "readdir_reply_name", None)
_readdir_caller = getattr(pyfuse3, "readdir_caller", None)
#: whether listings may give regular files by name alone (``lakefuse.fs.walkers``)
LISTINGS_BY_NAME = _reply_name is not None


#: errnos that say something went wrong in lakefuse or its storage, not in the request: logged
#: at WARNING (everything else a handler answers is an ordinary answer, logged at DEBUG)
UNEXPECTED_ERRNOS = frozenset({errno.EIO})
#: operations whose every error is unexpected: a read of an open file (its object's bytes
#: missing from storage, say, answers ENOENT)
UNEXPECTED_OPERATIONS = frozenset({"read"})


def is_unexpected(operation: str, code: int) -> bool:
    return code in UNEXPECTED_ERRNOS or operation in UNEXPECTED_OPERATIONS


def fuse_errors(handler):
    """Answer every failure of a handler with an errno; log what is not a user error (see the
    module docstring) and count every errno per operation."""
    operation = handler.__name__
    params = tuple(inspect.signature(handler).parameters)[1:]  # without self

    @functools.wraps(handler)
    async def wrapper(self, *args):
        try:
            return await handler(self, *args)
        except pyfuse3.FUSEError as exc:
            _count(self, operation, exc.errno)
            raise
        except LakefuseError as exc:
            code = exc.errno
            _count(self, operation, code)
            if is_unexpected(operation, code):
                log.warning("%s (%s): %s: %s: %s", operation, _describe(self, params, args), errno_name(code),
                            type(exc).__name__, exc)
            else:
                log.debug("%s: %s: %s", operation, type(exc).__name__, exc)
            raise pyfuse3.FUSEError(code) from None
        except OSError as exc:
            code = exc.errno or errno.EIO
            _count(self, operation, code)
            if is_unexpected(operation, code):
                log.warning("%s (%s): %s: %s", operation, _describe(self, params, args), errno_name(code), exc)
            else:
                log.debug("%s: %s", operation, exc)
            raise pyfuse3.FUSEError(code) from None
        except (trio.Cancelled, KeyboardInterrupt):
            raise
        except BaseException:  # noqa: BLE001 - the boundary: log, answer EIO, keep serving
            _count(self, operation, errno.EIO)
            log.exception("unexpected error in %s (%s), answered EIO", operation, _describe(self, params, args))
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


def _count(handlers, operation: str, code: int) -> None:
    count = getattr(handlers, "count_error", None)  # fuse_errors also serves other handler classes
    if count is not None:
        count(operation, code)


def _describe(handlers, params: tuple[str, ...], args: tuple) -> str:
    describe = getattr(handlers, "describe", None)
    if describe is not None:
        return describe(params, args)
    return ", ".join(f"{key} {value!r}" for key, value in zip(params, args) if key != "ctx") or "-"


def _text(name) -> str:
    return name.decode("utf-8", "surrogateescape") if isinstance(name, bytes) else str(name)


def entry_attributes(attrs: Attributes) -> pyfuse3.EntryAttributes:
    """pyfuse3's form of ``attrs``, built once per Attributes object (kept in ``attrs.wire``:
    pyfuse3 copies it into each reply and never changes it)."""
    entry = attrs.wire
    if entry is not None:
        return entry
    entry = attrs.wire = _build_entry_attributes(attrs)
    return entry


def _build_entry_attributes(attrs: Attributes) -> pyfuse3.EntryAttributes:
    entry = pyfuse3.EntryAttributes()
    entry.st_ino = attrs.ino
    entry.generation = 0
    entry.entry_timeout = attrs.entry_timeout
    entry.attr_timeout = attrs.attr_timeout
    entry.st_mode = attrs.mode
    entry.st_nlink = attrs.nlink
    entry.st_uid = attrs.uid
    entry.st_gid = attrs.gid
    entry.st_rdev = attrs.rdev
    entry.st_size = attrs.size
    entry.st_blksize = attrs.blksize
    entry.st_blocks = attrs.blocks
    mtime_ns = attrs.mtime_ns
    entry.st_atime_ns = mtime_ns if attrs.atime_ns is None else attrs.atime_ns
    entry.st_mtime_ns = mtime_ns
    entry.st_ctime_ns = mtime_ns if attrs.ctime_ns is None else attrs.ctime_ns
    return entry


def _file_info_takes_noflush() -> bool:
    """Whether this pyfuse3's FileInfo passes ``noflush`` on (as built by
    scripts/build_pyfuse3.py; a stock pyfuse3 has no such argument: the kernel then sends a
    FLUSH at every close(2), answered at once for a read-only handle)."""
    try:
        return pyfuse3.FileInfo(noflush=True).noflush
    except (TypeError, AttributeError):
        return False


#: see ``_file_info_takes_noflush``
FILE_INFO_TAKES_NOFLUSH = _file_info_takes_noflush()


def file_info(result: OpenResult) -> pyfuse3.FileInfo:
    # backing_id only where there is one: a stock pyfuse3 (no passthrough, so never a backing
    # ID) has no such argument; the kernel refuses keep_cache on a passthrough open
    extra = {"noflush": True} if result.noflush and FILE_INFO_TAKES_NOFLUSH else {}
    if result.backing_id:
        return pyfuse3.FileInfo(fh=result.fh, keep_cache=False, direct_io=result.direct_io,
                                backing_id=result.backing_id, **extra)
    return pyfuse3.FileInfo(fh=result.fh, keep_cache=result.keep_cache, direct_io=result.direct_io, **extra)


def _opendir_takes_file_info() -> bool:
    """Whether this pyfuse3 takes a FileInfo as the answer of opendir (as built by
    scripts/build_pyfuse3.py; a stock pyfuse3 takes only an fh, and the kernel then keeps no
    listing)."""
    try:
        return pyfuse3.FileInfo(cache_readdir=True).cache_readdir
    except (TypeError, AttributeError):
        return False


#: see ``_opendir_takes_file_info``
OPENDIR_TAKES_FILE_INFO = _opendir_takes_file_info()


def dir_info(result: OpenResult):
    """The answer of opendir: with this pyfuse3's FileInfo, whether the kernel keeps the
    listing (``cache_readdir``) and the one it kept before (``keep_cache``); else the fh."""
    if not OPENDIR_TAKES_FILE_INFO:
        return result.fh
    return pyfuse3.FileInfo(fh=result.fh, keep_cache=result.keep_cache, cache_readdir=result.cache_readdir)


def kernel_write_times(fields: pyfuse3.SetattrFields) -> bool:
    """Whether a setattr only carries the times the kernel's writeback cache keeps (mtime and
    ctime: of the writes it sent, at close and fsync; and of an unlinked or renamed file, its
    mtime unchanged, right after), not a utime(2), which sets atime too."""
    return (fields.update_mtime and fields.update_ctime and not fields.update_atime and not fields.update_size
            and not fields.update_mode and not fields.update_uid and not fields.update_gid)


class LakeOperations(pyfuse3.Operations):
    supports_dot_lookup = False
    #: the kernel keeps written pages and sends them in big writes (small writes cost no round
    #: trip each); it owns size and mtime meanwhile and flushes them at close and fsync.  The
    #: kernel grants no passthrough then.  Set per mount (``writeback_cache``)
    enable_writeback_cache = False
    enable_acl = False
    #: ask for FUSE_HANDLE_KILLPRIV_V2 (read by pyfuse3 as built by scripts/build_pyfuse3.py; a
    #: stock pyfuse3 ignores it): the kernel then stops asking for ``security.capability``
    #: before every write(2), and the filesystem clears set-user-ID bits on writes itself
    enable_killpriv_v2 = True
    #: names whose GETXATTR pyfuse3 as built by scripts/build_pyfuse3.py answers ENOTSUP itself,
    #: as ``getxattr`` would, without a round trip through Python (a stock pyfuse3 ignores it)
    refused_xattr_prefixes = tuple(prefix.encode() for prefix in UNSUPPORTED_NAMESPACES)

    def __init__(self, fs: LakeFilesystem, *, worker_threads: int = WORKER_THREADS,
                 spin: float = 0.0, passthrough: bool = True,
                 passthrough_branches: bool = False, writeback_cache: bool = False, idle_reader: bool = True):
        super().__init__()
        self.fs = fs
        self._idle_reader = idle_reader
        self.enable_writeback_cache = writeback_cache
        #: ask the kernel for FUSE passthrough in FUSE_INIT (read by pyfuse3 as built by
        #: scripts/build_pyfuse3.py; a stock pyfuse3 ignores it), if this process may use it
        self.enable_passthrough = passthrough and not writeback_cache and has_cap_sys_admin()
        self._passthrough_branches = passthrough_branches
        #: the binding's registries of the opens and lookups it answers itself, once ``init``
        #: gave them to the filesystem (``lakefuse.fs.native_answers``)
        self.native_answers: BindingAnswers | None = None
        #: nanoseconds the session loop polls /dev/fuse for the next request before it sleeps
        #: (read at FUSE_INIT by pyfuse3 as built by scripts/build_pyfuse3.py; a stock pyfuse3
        #: ignores it; see lakefuse.fuse.spin)
        self.spin_wait_ns = max(0, round(spin * 1e9))
        self._limiter = trio.CapacityLimiter(worker_threads)
        # answers of reads served on the event loop; reused: pyfuse3 copies a read's answer
        # to the kernel right after the handler returns, before any other task runs
        self._read_buffer = bytearray(READ_BUFFER_BYTES)
        #: errno answers per operation: {"read": {errno.EIO: 2}}; changed on the trio thread only
        self.errors: dict[str, dict[int, int]] = {}
        #: grows with every counted error (tells a status writer something changed)
        self.errors_version = 0

    # ------------------------------------------------------------------ errors

    def count_error(self, operation: str, code: int) -> None:
        counts = self.errors.get(operation)
        if counts is None:
            counts = self.errors[operation] = {}
        counts[code] = counts.get(code, 0) + 1
        self.errors_version += 1

    def error_counts(self) -> dict[str, dict[int, int]]:
        """A copy of ``errors``."""
        return {operation: dict(counts) for operation, counts in self.errors.items()}

    def unexpected_errors(self) -> int:
        """How many answers were unexpected errors (logged at WARNING or above)."""
        return sum(count for operation, counts in self.errors.items() for code, count in counts.items()
                   if is_unexpected(operation, code))

    def describe(self, params: tuple[str, ...], args: tuple) -> str:
        """What a request was about, for a log line: ``inode 12, lakefs://sales/v1/a.csv``
        (best effort: never raises)."""
        try:
            named = dict(zip(params, args))
            parts = []
            node = None
            if "fh" in named:
                parts.append(f"handle {named['fh']}")
                node = self.fs.node_of_handle(named["fh"])
            inode_key = next((key for key in ("inode", "parent_inode", "parent_inode_old") if key in named), None)
            if inode_key is not None:
                parts.append(f"inode {named[inode_key]}")
                node = self.fs.table.get(named[inode_key])
            uri = node.uri if node is not None else None
            name = named.get("name", named.get("name_old"))
            if name is not None and inode_key in ("parent_inode", "parent_inode_old"):
                name = _text(name)  # a name in that directory
                uri = f"{uri.rstrip('/')}/{name}" if uri else None
                parts.append(f"name {name!r}")
            elif name is not None:
                parts.append(f"xattr {_text(name)!r}")
            if uri:
                parts.append(uri)
            return ", ".join(parts) or "-"
        except Exception:  # noqa: BLE001 - a log line must not fail the request
            return ", ".join(f"{key} {value!r}" for key, value in zip(params, args) if key != "ctx") or "-"

    def init(self):
        """FUSE_INIT is answered: if the kernel granted passthrough, let the filesystem use it."""
        session_fd = granted_session_fd() if self.enable_passthrough else -1
        if session_fd >= 0:
            self.fs.enable_passthrough(KernelBackingFiles(session_fd), branches=self._passthrough_branches)
        scope = "on, branches too" if self._passthrough_branches else "on, commits and tags"
        log.info("passthrough reads of local objects: %s", scope if self.fs.passthrough is not None else "off")
        if self.enable_writeback_cache:
            self.fs.enable_writeback_cache()
        native = binding_reads()
        if native is not None:
            self.fs.enable_native_reads(native)
        log.info("reads of unmodified local objects answered in the binding when cached: %s",
                 "on" if native is not None else "off (stock pyfuse3)")
        self.native_answers = binding_answers()
        if self.native_answers is None:
            scope = "off (stock pyfuse3)"
        elif self.fs.enable_native_answers(self.native_answers):
            scope = "missing names and opens of local objects"
        else:
            scope = "missing names (no passthrough: opens reach the mount)"
        log.info("commit and tag trees, answered in the binding: %s", scope)
        if self.native_answers is not None:
            log.info("read-only opens of small unmodified branch files answered in the binding: %s",
                     "on" if self.fs.native_branch_opens else "off (the binding does not read files)")
        handles_killpriv = getattr(pyfuse3, "handles_killpriv_v2", lambda: False)()
        refused_in_binding = bool(getattr(pyfuse3, "xattr_prefixes_refused", tuple)())
        log.info("writes: writeback cache %s; security.capability %s", "on" if self.enable_writeback_cache else "off",
                 "looked up only before writes the kernel makes into spools, answered by the binding"
                 if handles_killpriv and refused_in_binding
                 else "looked up before each write" + ("" if handles_killpriv else " (stock pyfuse3)"))
        if not hasattr(pyfuse3, "request_spin_ns"):
            polling = "off (stock pyfuse3)" if self.spin_wait_ns else "off"
        else:
            spin_ns = pyfuse3.request_spin_ns()
            polling = f"{spin_ns / 1000:.0f} µs" if spin_ns else "off"
        log.info("polling for the next request before sleeping: %s", polling)
        if not self._idle_reader:
            reader = "off (--no-idle-reader)"
        else:
            reader = "on" if start_idle_reader() else "off (stock pyfuse3, or no clone of /dev/fuse)"
        log.info("a thread reading requests while the event loop sleeps (idle reader): %s", reader)

    async def _run(self, fn, *args):
        return await trio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    # ------------------------------------------------------------------ metadata

    @fuse_errors
    async def lookup(self, parent_inode, name, ctx=None):
        caller = ctx.pid if ctx is not None else 0
        try:
            attrs = self.fs.lookup(parent_inode, name, blocking=False, caller=caller)
        except WouldBlock:
            attrs = await self._run(self.fs.lookup, parent_inode, name, True, caller)
        return entry_attributes(attrs)

    async def forget(self, inode_list):
        try:
            self.fs.forget(inode_list)
        except Exception:  # noqa: BLE001 - forget must not raise
            log.exception("forget failed")

    @fuse_errors
    async def getattr(self, inode, ctx=None):
        try:
            attrs = self.fs.getattr(inode, blocking=False)
        except WouldBlock:
            attrs = await self._run(self.fs.getattr, inode)
        return entry_attributes(attrs)

    @fuse_errors
    async def access(self, inode, mode, ctx):
        """access(2) and chdir(2): the kernel asks only a mount without ``default_permissions``
        (see ``lakefuse.fuse.runner.kernel_options``), so in practice root, whom only the
        execute bits can refuse; a caller with another filesystem uid gets the POSIX rule."""
        groups = () if ctx.uid == 0 else pyfuse3.get_sup_groups(ctx.pid)
        try:
            return self.fs.access(inode, mode, ctx.uid, ctx.gid, groups, blocking=False)
        except WouldBlock:
            return await self._run(self.fs.access, inode, mode, ctx.uid, ctx.gid, groups)

    @fuse_errors
    async def setattr(self, inode, attr, fields, fh, ctx):
        if kernel_write_times(fields) and attr.st_mtime_ns is not None:
            try:  # the writeback cache's times: of writes it sent, or repeated after an unlink or rename
                return entry_attributes(self.fs.write_time(inode, attr.st_mtime_ns))
            except WouldBlock:
                pass

        def call(blocking: bool):
            return self.fs.setattr(
                inode,
                size=attr.st_size if fields.update_size else None,
                mode=attr.st_mode & 0o7777 if fields.update_mode else None,
                mtime_ns=(time.time_ns() if attr.st_mtime_ns is None else attr.st_mtime_ns)
                if fields.update_mtime else None,
                atime_ns=(time.time_ns() if attr.st_atime_ns is None else attr.st_atime_ns)
                if fields.update_atime else None,
                uid=attr.st_uid if fields.update_uid else None,
                gid=attr.st_gid if fields.update_gid else None,
                fh=fh,
                chown=fields.update_uid or fields.update_gid,
                blocking=blocking)
        try:  # chmod, chown or utime of what memory knows: queued for the stager, no thread hop
            return entry_attributes(call(False))
        except WouldBlock:
            return entry_attributes(await self._run(call, True))

    @fuse_errors
    async def statfs(self, ctx):
        data = pyfuse3.StatvfsData()
        for key, value in self.fs.statfs().items():
            setattr(data, key, value)
        return data

    # ------------------------------------------------------------------ directories

    @fuse_errors
    async def opendir(self, inode, ctx):
        return dir_info(self.fs.open_dir(inode, ctx.pid))

    @fuse_errors
    async def readdir(self, fh, start_id, token):
        reply = pyfuse3.readdir_reply

        def add(name: bytes, attrs: Attributes, next_id: int) -> bool:
            return reply(token, name, attrs.wire or entry_attributes(attrs), next_id)

        add_name, caller = None, 0
        if _reply_name is not None:  # lakefuse's pyfuse3: entries without attributes
            add_name, caller = functools.partial(_reply_name, token), _readdir_caller(token)

        try:
            self.fs.readdir(fh, start_id, add, False, add_name, caller)
        except WouldBlock:
            await self._run(self.fs.readdir, fh, start_id, add, True, add_name, caller)

    @fuse_errors
    async def releasedir(self, fh):
        self.fs.releasedir(fh)

    @fuse_errors
    async def fsyncdir(self, fh, datasync):
        await self._run(self.fs.fsyncdir, fh)

    @fuse_errors
    async def mkdir(self, parent_inode, name, mode, ctx):
        try:  # a name memory knows is free, a marker for local storage: no thread hop
            attrs = self.fs.mkdir(parent_inode, name, mode, ctx.uid, ctx.gid, False)
        except WouldBlock:
            attrs = await self._run(self.fs.mkdir, parent_inode, name, mode, ctx.uid, ctx.gid)
        return entry_attributes(attrs)

    @fuse_errors
    async def rmdir(self, parent_inode, name, ctx):
        try:  # an empty directory memory knows (``rm -r``): a deletion queued, no thread hop
            self.fs.rmdir(parent_inode, name, blocking=False)
        except WouldBlock:
            await self._run(self.fs.rmdir, parent_inode, name)

    @fuse_errors
    async def unlink(self, parent_inode, name, ctx):
        try:  # a file known in memory, in a directory with a marker: a deletion queued, no thread hop
            self.fs.unlink(parent_inode, name, blocking=False)
        except WouldBlock:
            await self._run(self.fs.unlink, parent_inode, name)

    @fuse_errors
    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        try:  # a file memory knows, renamed: queued for the stager, no thread hop
            self.fs.rename(parent_inode_old, name_old, parent_inode_new, name_new, flags, False)
        except WouldBlock:
            await self._run(self.fs.rename, parent_inode_old, name_old, parent_inode_new, name_new, flags)

    # ------------------------------------------------------------------ files

    @fuse_errors
    async def open(self, inode, flags, ctx):
        try:  # a read-only open of a file memory knows: no thread hop
            return file_info(self.fs.open(inode, flags, blocking=False))
        except WouldBlock:
            return file_info(await self._run(self.fs.open, inode, flags))

    @fuse_errors
    async def create(self, parent_inode, name, mode, flags, ctx):
        try:  # the name is known in memory (a new name in a directory known whole): no thread hop
            result, attrs = self.fs.create(parent_inode, name, mode, flags, False, ctx.uid, ctx.gid)
        except WouldBlock:
            result, attrs = await self._run(self.fs.create, parent_inode, name, mode, flags, True, ctx.uid, ctx.gid)
        return file_info(result), entry_attributes(attrs)

    @fuse_errors
    async def read(self, fh, off, size):
        try:  # cached local bytes: answered here, no thread hop
            return self.fs.read_nowait(fh, off, size, self._read_buffer)
        except WouldBlock:
            return await self._run(self.fs.read, fh, off, size)

    @fuse_errors
    async def write(self, fh, off, buf):
        try:  # a small write, or an append to a big file queued for its spool's writer: no thread hop
            return self.fs.write_nowait(fh, off, buf)
        except WouldBlock:
            return await self._run(self.fs.write, fh, off, buf)

    @fuse_errors
    async def flush(self, fh):
        try:  # a small new file moved into local storage, its entry queued: no thread hop
            self.fs.flush_nowait(fh)
        except WouldBlock:
            await self._run(self.fs.flush, fh)

    @fuse_errors
    async def fsync(self, fh, datasync):
        await self._run(self.fs.fsync, fh, datasync)

    @fuse_errors
    async def release(self, fh):
        try:  # nothing left to upload: no thread hop
            self.fs.release_nowait(fh)
        except WouldBlock:
            await self._run(self.fs.release, fh)

    # ------------------------------------------------------------------ xattrs

    @fuse_errors
    async def getxattr(self, inode, name, ctx):
        try:
            return self.fs.getxattr(inode, name, blocking=False)
        except WouldBlock:
            return await self._run(self.fs.getxattr, inode, name)

    @fuse_errors
    async def listxattr(self, inode, ctx):
        try:
            return self.fs.listxattr(inode, blocking=False)
        except WouldBlock:
            return await self._run(self.fs.listxattr, inode)

    @fuse_errors
    async def setxattr(self, inode, name, value, ctx):
        await self._run(self.fs.setxattr, inode, name, value)

    @fuse_errors
    async def removexattr(self, inode, name, ctx):
        await self._run(self.fs.removexattr, inode, name)

    # ------------------------------------------------------------------ links and special files

    @fuse_errors
    async def link(self, inode, new_parent_inode, new_name, ctx):
        self.fs.link(inode, new_parent_inode, new_name)  # EPERM

    @fuse_errors
    async def symlink(self, parent_inode, name, target, ctx):
        return entry_attributes(await self._run(self.fs.symlink, parent_inode, name, target, ctx.uid, ctx.gid))

    @fuse_errors
    async def readlink(self, inode, ctx):
        try:  # the link's entry is in memory: no thread hop
            return self.fs.readlink(inode, blocking=False)
        except WouldBlock:
            return await self._run(self.fs.readlink, inode)

    @fuse_errors
    async def mknod(self, parent_inode, name, mode, rdev, ctx):
        return entry_attributes(await self._run(self.fs.mknod, parent_inode, name, mode, rdev, ctx.uid, ctx.gid))
