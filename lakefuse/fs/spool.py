"""Local spool files: where the bytes of a file being written on a branch live until they are
stored (on fsync, flush/close, or a commit), and from where the writer's own reads are served;
``SpoolTail`` reads a spool's bytes in a background thread while they are still being appended
(to hash them, or to stream them to storage).

A spool is a file in the mount's spool directory, deleted when closed.  Storing it may move
the file itself into storage (``seal`` first): a sealed spool still serves reads from its
descriptor, refuses writes (its bytes are an object's now: the caller copies them into a new
spool to change them), and on close deletes its path only if that still names the same file.
``fill_from`` copies an existing object's bytes in (for a write into the middle of, or an
append to, an existing file), in the kernel when the source is a local file.
"""

from __future__ import annotations

import os
import secrets
import threading

from lakefuse.errors import StorageError

COPY_CHUNK = 4 * 1024 * 1024
_CREATE_ATTEMPTS = 16
_SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of dirty pages, do not wait


def _libc_sync_file_range():
    """Linux's sync_file_range(2) (not in ``os``), or None where libc has none."""
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


_sync_file_range = _libc_sync_file_range()


class Spool:
    def __init__(self, directory: str):
        # 0o666 less the umask, like the local block adapter's objects: a spool may become one
        for _ in range(_CREATE_ATTEMPTS):
            path = os.path.join(directory, f"spool-{secrets.token_hex(8)}")
            try:
                self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
                break
            except FileExistsError:
                continue
            except OSError as exc:
                raise StorageError(f"cannot create a spool file in {directory}: {exc.strerror}") from None
        else:
            raise StorageError(f"cannot create a spool file in {directory}: every name tried exists")
        self.path = path
        self.closed = False
        self.sealed = False
        self._size = 0  # tracked, so asking for it never touches a descriptor being closed

    def fileno(self) -> int:
        return self.fd

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def write(self, offset: int, data: bytes) -> int:
        self._check_writable()
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], offset + done)
        if offset + done > self._size:
            self._size = offset + done
        return done

    def truncate(self, size: int) -> None:
        self._check_writable()
        os.ftruncate(self.fd, size)
        self._size = size

    def size(self) -> int:
        return self._size

    def fsync(self) -> None:
        os.fsync(self.fd)

    def start_writeback(self, offset: int, length: int) -> None:
        """Have the kernel start writing this range to disk now, without waiting: a later
        fsync (storing the spool) then finds little left to write.  Best effort."""
        if _sync_file_range is not None and not self.closed:
            _sync_file_range(self.fd, offset, length, _SYNC_FILE_RANGE_WRITE)

    def seal(self) -> None:
        """Before the file is moved into storage: no more writes, and ``path`` may go away."""
        self.sealed = True

    def _check_writable(self) -> None:
        if self.sealed:
            raise StorageError("internal error: write to a spool whose file was handed to storage")

    def fill_from(self, reader, size: int) -> None:
        """Copy ``size`` bytes of an object (a ``DataReader``, or another spool) to the start
        of the spool."""
        self._check_writable()
        source_fd = getattr(reader, "fileno", None)
        if source_fd is not None:
            fd = source_fd()
            offset_in = 0
            try:
                while offset_in < size:
                    copied = os.copy_file_range(fd, self.fd, size - offset_in, offset_in, offset_in)
                    if copied == 0:
                        break
                    offset_in += copied
                self._size = max(self._size, offset_in)
                return
            except OSError:
                pass  # fall back to reads
        offset = 0
        while offset < size:
            chunk = reader.read(offset, min(COPY_CHUNK, size - offset))
            if not chunk:
                break
            self.write(offset, chunk)
            offset += len(chunk)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            ours = not self.sealed or _names_file(self.path, os.fstat(self.fd))
        except OSError:
            ours = False
        try:
            os.close(self.fd)
        finally:
            if ours:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass


def _names_file(path: str, st: os.stat_result) -> bool:
    try:
        at_path = os.lstat(path)
    except OSError:
        return False
    return (at_path.st_dev, at_path.st_ino) == (st.st_dev, st.st_ino)


class SpoolTail:
    """Reads a spool while it is being written sequentially: a background thread runs
    ``consume(stream)`` (hashing, or a streaming upload) on the spool's bytes as they arrive,
    so that work overlaps the writes instead of following the close.  ``extend(end)`` tells it
    bytes up to ``end`` are written; ``finish()`` ends the stream at the bytes written so far
    and returns what ``consume`` returned (``consumed`` bytes were read); ``abort()`` makes
    the stream fail (a write that was not an append, a truncate, an unlink), and the caller
    then stores the spool the ordinary way."""

    def __init__(self, spool: Spool, available: int, consume, name: str = "lakefuse-spool-tail"):
        self._spool = spool
        self._cond = threading.Condition()
        self._available = available
        self._position = 0
        self._finished = False
        self._aborted = False
        self.result = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(consume,), name=name, daemon=True)
        self._thread.start()

    @property
    def consumed(self) -> int:
        return self._position

    # the stream ``consume`` reads ---------------------------------------------------------

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        with self._cond:
            while not self._aborted and self._position >= self._available and not self._finished:
                self._cond.wait()
            if self._aborted:
                raise StorageError("spool tail abandoned: the file changed other than by appending")
            remaining = self._available - self._position
            if remaining <= 0:
                return b""
            length = remaining if size is None or size < 0 else min(size, remaining)
            position = self._position
        data = os.pread(self._spool.fd, length, position)
        with self._cond:
            self._position += len(data)
        return data

    # the writer's side ----------------------------------------------------------------

    def extend(self, end: int) -> None:
        with self._cond:
            if end > self._available:
                self._available = end
                self._cond.notify_all()

    def finish(self):
        with self._cond:
            self._finished = True
            self._cond.notify_all()
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self.result

    def abort(self) -> None:
        with self._cond:
            self._aborted = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self, consume) -> None:
        try:
            self.result = consume(self)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc
