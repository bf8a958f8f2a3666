"""Where Graveler files live and how they are moved: ``<namespace>/_lakefs/<fileID>``.

Owns the storage key of a file, the skip-if-present upload (files are immutable and named by
their content, so an existing name already holds the same records), the temp-file-then-
``put_file`` write, and fetching a file for reading through the disk cache (or straight from the
block adapter when there is no disk cache).  Encoding is ``encoding``'s business; decoding into
lookup structures is ``loaded``'s.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Iterable

from lakefuse.block.base import BlockAdapter
from lakefuse.errors import InvalidArgument, ObjectNotFound

FILES_PREFIX = "_lakefs/"
_FILE_ID_RE = re.compile(r"^[0-9a-f]{64}$")


def check_file_id(file_id: str, what: str = "file") -> str:
    if not isinstance(file_id, str) or not _FILE_ID_RE.match(file_id):
        raise InvalidArgument(f"invalid {what} ID {file_id!r}: expected 64 lowercase hex digits")
    return file_id


def storage_key(file_id: str) -> str:
    """The block-adapter key of a Graveler file."""
    return FILES_PREFIX + file_id


class GravelerFiles:
    """Immutable content-addressed files of one storage namespace."""

    def __init__(self, block: BlockAdapter, disk_cache=None, temp_dir: str | None = None):
        self.block = block
        self.disk_cache = disk_cache
        self.temp_dir = temp_dir

    def exists(self, file_id: str) -> bool:
        return self.block.exists(storage_key(file_id))

    def write(self, file_id: str, items: Iterable[tuple[bytes, bytes]], properties: dict | None = None) -> bool:
        """Write ``items`` as the SSTable ``file_id`` unless it already exists.

        Returns True if the file was uploaded, False if it was already there (skipped without
        even encoding it).  The freshly written file also seeds the disk cache, so reading a
        commit right after writing it needs no download."""
        from lakefuse.graveler.sstable import write_sstable

        key = storage_key(file_id)
        if self.block.exists(key):
            return False
        fd, local = tempfile.mkstemp(prefix="lakefuse-graveler-", suffix=".sst", dir=self.temp_dir)
        os.close(fd)
        try:
            write_sstable(local, items, properties)
            self.block.put_file(key, local)
            if self.disk_cache is not None:
                self.disk_cache.put_file(file_id, local, move=True)
        finally:
            if os.path.exists(local):
                os.unlink(local)
        return True

    def read_items(self, file_id: str, what: str = "file") -> tuple[list[tuple[bytes, bytes]], int]:
        """All ``(key, value)`` pairs of a file and the file's size in bytes."""
        reader, size = self._reader(file_id, what)
        return reader.items(), size

    def reader(self, file_id: str, what: str = "file"):
        """The file as an ``SSTableReader``: its blocks are decoded as they are asked for."""
        return self._reader(file_id, what)[0]

    def _reader(self, file_id: str, what: str):
        from lakefuse.graveler.sstable import SSTableReader

        key = storage_key(file_id)
        try:
            if self.disk_cache is not None:
                with self.disk_cache.open(file_id, lambda tmp_path: self.block.get_to_file(key, tmp_path)) as f:
                    data = f.read()
            else:
                data = self.block.get(key)
        except ObjectNotFound:
            raise ObjectNotFound(f"{what} {file_id} not found in {getattr(self.block, 'uri', 'storage')}") from None
        return SSTableReader.from_bytes(data), len(data)
