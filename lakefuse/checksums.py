"""Object checksums: how lakefuse computes the checksum of the bytes it stores, and how the
checksum of any entry is checked when its bytes are read back.

Owns the format.  An entry's checksum is an opaque string to everything else (lakeFS calls it
"a checksum string which uniquely identifies the contents"); the forms this module knows:

- ``blake3:<64 hex>``: BLAKE3-256, what lakefuse writes.  BLAKE3 is a cryptographic hash like
  SHA-256 but several times faster on the same core (about 10 GB/s against 2 GB/s on an AVX-512
  machine with SHA extensions), which matters because every byte written through the mount
  or the CLI is hashed on the way in: at SHA-256 speed, hashing was what bounded ``cp`` of a
  big file into a branch.  The prefix keeps it apart from a SHA-256 hex digest of the same
  length.
- 64 hex digits: SHA-256 (entries written by lakefuse before BLAKE3).
- 32 hex digits: MD5 (older entries, and single-part S3 ETags of imported objects).

Anything else (a multipart ETag, another tool's format) cannot be recomputed: reads then check
the size only.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re

import blake3

BLAKE3_PREFIX = "blake3:"
_BLAKE3_RE = re.compile(r"^blake3:[0-9a-f]{64}$")
_HEX_RE = re.compile(r"^[0-9a-f]+$")
#: files at least this big are hashed memory-mapped (``ContentHasher.update_file``)
_MAP_MIN_BYTES = 1024 * 1024
#: hex digest length -> hashlib name, for checksums written without a prefix
_HEX_DIGESTS = {64: "sha256", 32: "md5"}


class ContentHasher:
    """The hasher of object contents (hashlib-like): ``update`` with the bytes in order,
    ``hexdigest()`` is the checksum to store.  ``update`` releases the GIL, so hashing in a
    thread runs beside the rest of the process."""

    __slots__ = ("_hash",)
    name = "blake3"

    def __init__(self, data: bytes = b""):
        self._hash = blake3.blake3(data)

    def update(self, data) -> None:
        self._hash.update(data)

    def update_file(self, fd: int, size: int) -> None:
        """``update`` with the first ``size`` bytes of the open file ``fd``, memory-mapped
        (no copy out of the page cache: a third faster than reading it in chunks).  Only for a
        file nothing truncates meanwhile (a spool): a mapped page cut off is SIGBUS."""
        if size <= 0:
            return
        if size < _MAP_MIN_BYTES:
            self._hash.update(os.pread(fd, size, 0))
            return
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapped:
            self._hash.update(mapped)

    def hexdigest(self) -> str:
        return BLAKE3_PREFIX + self._hash.hexdigest()

    def copy(self) -> "ContentHasher":
        twin = ContentHasher.__new__(ContentHasher)
        twin._hash = self._hash.copy()
        return twin


def content_hasher() -> ContentHasher:
    """A new hasher whose ``hexdigest()`` of an object's bytes is the checksum lakefuse stores."""
    return ContentHasher()


def is_content_checksum(checksum: str) -> bool:
    """Whether ``checksum`` has the form ``content_hasher()`` produces."""
    return isinstance(checksum, str) and _BLAKE3_RE.match(checksum) is not None


def verifier_hasher(checksum: str):
    """A new hasher whose ``hexdigest()`` equals ``checksum`` for the right bytes, or None if
    this checksum's algorithm is unknown (it cannot be recomputed)."""
    if _BLAKE3_RE.match(checksum):
        return ContentHasher()
    if _HEX_RE.match(checksum):
        name = _HEX_DIGESTS.get(len(checksum))
        if name is not None:
            return hashlib.new(name, usedforsecurity=False)
    return None
