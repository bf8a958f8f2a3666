"""Local spool files: where the bytes of a file being written on a branch live until they are
uploaded (on fsync, flush/close, or a commit), and from where the writer's own reads are served;
``TailUpload`` streams a spool to storage while it is still being appended to.

A spool is a temporary file in the mount's spool directory, deleted when closed.  ``fill_from``
copies an existing object's bytes in (for a write into the middle of, or an append to, an
existing file), in the kernel when the source is a local file.
"""

from __future__ import annotations

import os
import tempfile
import threading

from lakefuse.errors import StorageError

COPY_CHUNK = 4 * 1024 * 1024


class Spool:
    def __init__(self, directory: str):
        try:
            self.fd, self.path = tempfile.mkstemp(dir=directory, prefix="spool-")
        except OSError as exc:
            raise StorageError(f"cannot create a spool file in {directory}: {exc.strerror}") from None
        self.closed = False
        self._size = 0  # tracked, so asking for it never touches a descriptor being closed

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def write(self, offset: int, data: bytes) -> int:
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], offset + done)
        if offset + done > self._size:
            self._size = offset + done
        return done

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self._size = size

    def size(self) -> int:
        return self._size

    def fsync(self) -> None:
        os.fsync(self.fd)

    def fill_from(self, reader, size: int) -> None:
        """Copy ``size`` bytes of an object (a ``DataReader``) to the start of the spool."""
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
            os.close(self.fd)
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class TailUpload:
    """Uploads a spool while it is being written sequentially: a background thread feeds
    ``start(stream)`` (a streaming upload) with the spool's bytes as they arrive, so hashing
    and copying overlap the writes instead of following the close.  ``finish()`` ends the
    stream at the bytes written so far and returns the upload's result; ``abort()`` makes the
    upload fail (a write that was not an append, a truncate, an unlink), and the caller then
    uploads the spool the ordinary way."""

    def __init__(self, spool: Spool, available: int, start):
        self._spool = spool
        self._cond = threading.Condition()
        self._available = available
        self._position = 0
        self._finished = False
        self._aborted = False
        self.result = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(start,), name="lakefuse-tail-upload", daemon=True)
        self._thread.start()

    # the stream the upload reads ------------------------------------------------------

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        with self._cond:
            while not self._aborted and self._position >= self._available and not self._finished:
                self._cond.wait()
            if self._aborted:
                raise StorageError("streaming upload abandoned: the file changed other than by appending")
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

    def _run(self, start) -> None:
        try:
            self.result = start(self)
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc
