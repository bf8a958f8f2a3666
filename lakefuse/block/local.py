"""The ``local`` block adapter: objects are files under one directory (the default storage).

Owns the mapping of keys to files (``root/<key>``), crash-safe writes (temporary file in the
same directory, fsync, rename, fsync of the directory), moves of finished local files into
place (``put_file(move=True)``: fsync, rename, fsync of the directory; a copy when the file is
on another filesystem, is not a regular file or has other hard links), key-ordered listing of
the directory tree, and the translation of ``OSError`` into ``lakefuse.errors``.  Files written
at a new key's own path before anything named the key (``local_path``) become objects where
they lie (``adopt_file``: nothing moved or copied).  A put with
``durable=False`` skips the fsyncs (the object is still written whole and renamed into place,
so no process ever sees it half-written); ``sync()`` is one syncfs(2) of the storage's
filesystem, which makes those durable.

Temporary files are named ``.lakefuse-tmp-*`` (``base.RESERVED_SEGMENT_PREFIX``); keys may not
use that prefix, and listings never show such files.  A directory can't be an object and a file
can't hold objects, so this adapter can't store both ``a`` and ``a/b`` (``StorageError``).
Directories emptied by ``delete`` are removed (never the root).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat as stat_mode
from typing import BinaryIO, Callable, Iterator

from lakefuse.block.base import (
    RESERVED_SEGMENT_PREFIX,
    BlockAdapter,
    ObjectStat,
    TransferSettings,
    check_key,
    check_prefix,
)
from lakefuse.errors import InvalidArgument, NameTooLong, ObjectNotFound, StorageError

COPY_BUFFER_BYTES = 1024 * 1024
_MAX_PUT_ATTEMPTS = 16  # a concurrent delete may prune the parent directory under a put
_KNOWN_DIRS_MAX = 4096  # directories remembered as existing (``_make_dirs``)
_NOT_AN_OBJECT_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EISDIR)
_NO_FAST_COPY_ERRNOS = (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM, errno.EBADF)


class LocalBlockAdapter(BlockAdapter):
    """Object storage in a local directory; thread-safe (its only state besides the root is
    the set of directories known to exist, a hint: a put that finds one gone makes it again)."""

    def __init__(self, root: str | os.PathLike, transfer: TransferSettings | None = None):
        self.root = os.path.normpath(os.path.abspath(os.fspath(root)))
        self.uri = "local://" + self.root
        # the local adapter streams through a fixed buffer; transfer settings matter to S3 only
        self.transfer = transfer or TransferSettings()
        #: directories this adapter saw or made (a stat saved per put; a concurrent delete that
        #: prunes one is found by the put's FileNotFoundError, which drops it from here)
        self._known_dirs: set[str] = set()

    def __repr__(self) -> str:
        return f"LocalBlockAdapter({self.uri!r})"

    # ---------------------------------------------------------------- writes

    def put(self, key: str, data: bytes) -> ObjectStat:
        view = memoryview(data)
        return self._atomic_write(key, lambda fd: _write_all(fd, view))

    def put_file(self, key: str, path: str, move: bool = False, durable: bool = True,
                 source_fd: int | None = None) -> ObjectStat:
        check_key(key)
        src_fd = _open_source(path) if source_fd is None else source_fd
        try:
            if move:
                stat = self._rename_into_place(key, path, src_fd, durable)
                if stat is not None:
                    return stat
            if source_fd is not None:
                os.lseek(src_fd, 0, os.SEEK_SET)  # _copy_fd copies from the current position
            stat = self._atomic_write(key, lambda fd: _copy_fd(src_fd, fd), durable)
        finally:
            if source_fd is None:
                os.close(src_fd)
        if move:
            _unlink_quietly(path)
        return stat

    def _rename_into_place(self, key: str, path: str, src_fd: int, durable: bool) -> ObjectStat | None:
        """Make the file at ``path`` (open as ``src_fd``) the object by renaming it (durably,
        if ``durable``); None if it must be copied instead (another filesystem, not a plain file
        at ``path``, other hard links to it, or no file there any more)."""
        try:
            st = os.fstat(src_fd)
            at_path = os.lstat(path)
        except FileNotFoundError:
            return None  # deleted meanwhile: its bytes are copied from the descriptor
        except OSError as exc:
            raise _storage_error("put", key, exc) from None
        if st.st_nlink != 1 or (at_path.st_dev, at_path.st_ino) != (st.st_dev, st.st_ino):
            return None
        target = self._path(key)
        parent = os.path.dirname(target)
        try:
            if durable:
                os.fsync(src_fd)
        except OSError as exc:
            raise _storage_error("put", key, exc) from None
        for _ in range(_MAX_PUT_ATTEMPTS):
            try:
                self._make_dirs(key, parent)
                os.rename(path, target)
                break
            except FileNotFoundError:
                if not os.path.exists(path):
                    raise StorageError(f"local storage put {key!r}: {path} disappeared while being moved") from None
                self._known_dirs.discard(parent)
                continue  # a concurrent delete pruned a directory on our path: create it again
            except IsADirectoryError:
                raise StorageError(f"local storage cannot put {key!r}: it is a directory holding other objects") from None
            except OSError as exc:
                if exc.errno == errno.EXDEV:
                    return None
                raise _storage_error("put", key, exc) from None
        else:
            raise StorageError(f"local storage: cannot create the directory of {key!r} (removed concurrently {_MAX_PUT_ATTEMPTS} times)")
        try:
            if durable:
                _fsync_dir(parent)
        except OSError as exc:
            raise _storage_error("put", key, exc) from None
        return ObjectStat(key=key, size=st.st_size, mtime=st.st_mtime)

    def local_path(self, key: str) -> str:
        """The file that is (or would be) the object ``key``."""
        return self._path(key)

    def adopt_file(self, key: str, fd: int, durable: bool = True) -> ObjectStat:
        """The file at ``key``'s own path (``local_path``), written there while nothing named
        ``key`` and open as ``fd``, is the object as it is: nothing is moved or copied (fsynced
        with its directory if ``durable``).  ``ObjectNotFound`` if the file was deleted
        meanwhile; its bytes are still there to copy through ``fd``."""
        check_key(key)
        try:
            st = os.fstat(fd)
            if st.st_nlink == 0:
                raise ObjectNotFound(f"local storage: the file written for {key!r} was deleted")
            if durable:
                os.fsync(fd)
                _fsync_dir(os.path.dirname(self._path(key)))
        except OSError as exc:
            raise _storage_error("put", key, exc) from None
        return ObjectStat(key=key, size=st.st_size, mtime=st.st_mtime)

    def put_stream(self, key: str, stream: BinaryIO) -> ObjectStat:
        def fill(fd: int) -> None:
            while True:
                chunk = stream.read(COPY_BUFFER_BYTES)
                if chunk is None:
                    raise InvalidArgument("put_stream needs a blocking stream (read() returned None)")
                if not chunk:
                    return
                _write_all(fd, memoryview(chunk))

        return self._atomic_write(key, fill)

    def _atomic_write(self, key: str, fill: Callable[[int], None], durable: bool = True) -> ObjectStat:
        path = self._path(key)
        parent = os.path.dirname(path)
        fd, tmp = self._create_temp(key, parent)
        try:
            try:
                fill(fd)
                if durable:
                    os.fsync(fd)
                st = os.fstat(fd)
            finally:
                os.close(fd)
            try:
                os.replace(tmp, path)
            except IsADirectoryError:
                raise StorageError(f"local storage cannot put {key!r}: it is a directory holding other objects") from None
            if durable:
                _fsync_dir(parent)
        except BaseException as exc:
            _unlink_quietly(tmp)
            if isinstance(exc, OSError):
                raise _storage_error("put", key, exc) from None
            raise
        return ObjectStat(key=key, size=st.st_size, mtime=st.st_mtime)

    def sync(self) -> None:
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise StorageError(f"local storage sync of {self.root}: {exc.strerror or exc}") from None
        try:
            if _syncfs is None or _syncfs(fd) != 0:
                os.sync()  # no syncfs(2) here (or it failed): every filesystem, but surely this one
        finally:
            os.close(fd)

    def _create_temp(self, key: str, parent: str) -> tuple[int, str]:
        for _ in range(_MAX_PUT_ATTEMPTS):
            try:
                self._make_dirs(key, parent)
                tmp = os.path.join(parent, RESERVED_SEGMENT_PREFIX + secrets.token_hex(8))
                return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
            except FileNotFoundError:
                self._known_dirs.discard(parent)
                continue  # a concurrent delete pruned a directory on our path: create it again
            except OSError as exc:
                raise _storage_error("put", key, exc) from None
        raise StorageError(f"local storage: cannot create the directory of {key!r} (removed concurrently {_MAX_PUT_ATTEMPTS} times)")

    def _make_dirs(self, key: str, directory: str) -> None:
        """Create ``directory`` and missing parents, fsyncing each parent of a new directory."""
        if directory in self._known_dirs:
            return
        if os.path.isdir(directory):
            if len(self._known_dirs) >= _KNOWN_DIRS_MAX:
                self._known_dirs.clear()
            self._known_dirs.add(directory)
            return
        missing = []
        while True:
            try:
                is_dir = stat_mode.S_ISDIR(os.stat(directory).st_mode)  # one call: no race between checks
            except (FileNotFoundError, NotADirectoryError):
                missing.append(directory)
                parent = os.path.dirname(directory)
                if parent == directory:
                    break
                directory = parent
                continue
            if not is_dir:
                raise StorageError(f"local storage cannot put {key!r}: {directory!r} is a file, not a directory")
            break
        for new_dir in reversed(missing):
            try:
                os.mkdir(new_dir)
            except FileExistsError:
                # made concurrently, or a file; os.stat raises FileNotFoundError (-> the caller
                # retries) if a concurrent delete pruned it again since
                if not stat_mode.S_ISDIR(os.stat(new_dir).st_mode):
                    raise StorageError(f"local storage cannot put {key!r}: {new_dir!r} is a file, not a directory") from None
                continue
            _fsync_dir(os.path.dirname(new_dir))

    # ----------------------------------------------------------------- reads

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb", buffering=0) as f:
                return f.read()
        except OSError as exc:
            raise _read_error("get", key, exc, self.uri) from None

    def get_range(self, key: str, offset: int, length: int) -> bytes:
        _check_range(offset, length)
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise _read_error("get_range", key, exc, self.uri) from None
        try:
            data = os.pread(fd, length, offset)
            if len(data) == length or not data:
                return data
            parts = [data]  # short read before EOF (huge lengths): keep reading
            got = len(data)
            while got < length:
                more = os.pread(fd, length - got, offset + got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            return b"".join(parts)
        except OSError as exc:
            raise _read_error("get_range", key, exc, self.uri) from None
        finally:
            os.close(fd)

    def get_to_file(self, key: str, path: str) -> ObjectStat:
        src = self._path(key)
        try:
            src_fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise _read_error("get_to_file", key, exc, self.uri) from None
        try:
            try:
                st = os.fstat(src_fd)
            except OSError as exc:
                raise _read_error("get_to_file", key, exc, self.uri) from None
            if not stat_mode.S_ISREG(st.st_mode):
                raise ObjectNotFound(f"object not found: {self.full_uri(key)}")
            write_file_atomically(path, lambda fd: _copy_fd(src_fd, fd))
        finally:
            os.close(src_fd)
        return ObjectStat(key=key, size=st.st_size, mtime=st.st_mtime)

    def stat(self, key: str) -> ObjectStat:
        path = self._path(key)
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _read_error("stat", key, exc, self.uri) from None
        if not stat_mode.S_ISREG(st.st_mode):
            raise ObjectNotFound(f"object not found: {self.full_uri(key)}")
        return ObjectStat(key=key, size=st.st_size, mtime=st.st_mtime)

    def exists(self, key: str) -> bool:
        path = self._path(key)
        try:
            return stat_mode.S_ISREG(os.stat(path).st_mode)
        except OSError as exc:
            if exc.errno in _NOT_AN_OBJECT_ERRNOS:
                return False
            raise _storage_error("stat", key, exc) from None

    # --------------------------------------------------------------- delete

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except OSError as exc:
            if exc.errno in _NOT_AN_OBJECT_ERRNOS:
                return
            raise _storage_error("delete", key, exc) from None
        directory = os.path.dirname(path)
        while directory != self.root and directory.startswith(self.root + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                break  # not empty (or gone): stop pruning
            directory = os.path.dirname(directory)

    # -------------------------------------------------------------- listing

    def list(self, prefix: str = "", start_after: str = "", page_size: int = 1000) -> Iterator[ObjectStat]:
        """Walk the tree in key order.  A directory ``d`` sorts as ``d/`` among its siblings,
        which makes a depth-first walk of sorted directories yield keys in string order.
        Subtrees wholly at or before ``start_after`` are skipped without being read.
        ``page_size`` is accepted for the interface; one directory is read at a time."""
        check_prefix(prefix)
        if page_size < 1:
            raise InvalidArgument(f"page_size must be at least 1, got {page_size}")
        directory, _, name_prefix = prefix.rpartition("/")
        return self._walk(directory, name_prefix, start_after or "")

    def _walk(self, rel_dir: str, name_prefix: str, start_after: str) -> Iterator[ObjectStat]:
        abs_dir = os.path.join(self.root, rel_dir) if rel_dir else self.root
        key_base = rel_dir + "/" if rel_dir else ""
        try:
            with os.scandir(abs_dir) as it:
                children = []
                for entry in it:
                    name = entry.name
                    if not name.startswith(name_prefix) or name.startswith(RESERVED_SEGMENT_PREFIX):
                        continue
                    if entry.is_dir():
                        children.append((key_base + name + "/", True, entry))
                    elif entry.is_file():
                        children.append((key_base + name, False, entry))
        except OSError as exc:
            if exc.errno in _NOT_AN_OBJECT_ERRNOS:
                return
            raise _storage_error("list", rel_dir or "/", exc) from None
        children.sort(key=lambda child: child[0])
        for sort_key, is_dir, entry in children:
            if is_dir:
                if start_after > sort_key and not start_after.startswith(sort_key):
                    continue  # the whole subtree sorts before start_after
                yield from self._walk(sort_key[:-1], "", start_after)
            elif sort_key > start_after:
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue  # deleted while we walked
                except OSError as exc:
                    raise _storage_error("list", sort_key, exc) from None
                yield ObjectStat(key=sort_key, size=st.st_size, mtime=st.st_mtime)

    # -------------------------------------------------------------- helpers

    def _path(self, key: str) -> str:
        check_key(key)
        return self.root + "/" + key


def write_file_atomically(path: str, fill: Callable[[int], None]) -> None:
    """Write a local file through a temporary sibling renamed into place (no fsync: callers
    that download into a cache verify checksums instead of paying for durability)."""
    directory, name = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.part")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror}") from None
    try:
        try:
            fill(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        _unlink_quietly(tmp)
        if isinstance(exc, OSError):
            raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from None
        raise


def _open_source(path: str) -> int:
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise InvalidArgument(f"cannot read local file {path}: {exc.strerror}") from None
    if stat_mode.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise InvalidArgument(f"cannot read local file {path}: it is a directory")
    return fd


def _check_range(offset: int, length: int) -> None:
    if offset < 0 or length < 0:
        raise InvalidArgument(f"invalid byte range: offset {offset}, length {length} (must not be negative)")


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _copy_fd(src_fd: int, dst_fd: int) -> None:
    """Copy from the current position of ``src_fd`` to EOF, in the kernel when possible."""
    try:
        while os.copy_file_range(src_fd, dst_fd, 1 << 30):
            pass
        return
    except OSError as exc:
        if exc.errno not in _NO_FAST_COPY_ERRNOS:
            raise
    try:
        while os.sendfile(dst_fd, src_fd, None, 1 << 30):
            pass
        return
    except OSError as exc:
        if exc.errno not in _NO_FAST_COPY_ERRNOS:
            raise
    while True:
        chunk = os.read(src_fd, COPY_BUFFER_BYTES)
        if not chunk:
            return
        _write_all(dst_fd, memoryview(chunk))


def _libc_syncfs():
    """Linux's syncfs(2) (not in ``os``), or None where libc has none."""
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int,)
    function.restype = ctypes.c_int
    return function


_syncfs = _libc_syncfs()


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _read_error(op: str, key: str, exc: OSError, uri: str) -> Exception:
    if exc.errno in _NOT_AN_OBJECT_ERRNOS:
        return ObjectNotFound(f"object not found: {uri}/{key}")
    return _storage_error(op, key, exc)


def _storage_error(op: str, key: str, exc: OSError) -> Exception:
    if exc.errno == errno.ENAMETOOLONG:
        return NameTooLong(f"local storage {op} {key!r}: name too long for the filesystem")
    reason = exc.strerror or str(exc)
    return StorageError(f"local storage {op} {key!r}: {reason}")
