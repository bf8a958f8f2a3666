"""What ``LakeFilesystem`` answers the adapter with: plain records, no FUSE types.

Owns ``Attributes`` (stat(2) of a node, with the kernel's timeouts for it), ``OpenResult``
(a new handle and how the kernel should treat its pages, or a directory's listing), ``Invalidations`` (kernel caches
the change feed found stale) and ``WouldBlock`` (a ``blocking=False`` call that would have to
ask the backend: the adapter retries it on a worker thread).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

BLOCK_SIZE = 1024 * 1024  # st_blksize: tells cp & co. to move 1 MiB at a time


class WouldBlock(Exception):
    """Raised by ``blocking=False`` calls that would have to ask the backend."""


@dataclass(slots=True)
class Attributes:
    ino: int
    mode: int
    size: int
    mtime_ns: int
    uid: int
    gid: int
    entry_timeout: float
    attr_timeout: float
    nlink: int = 1
    blksize: int = BLOCK_SIZE
    #: access and status change times (None: the mtime) and a device's number
    atime_ns: int | None = None
    ctime_ns: int | None = None
    rdev: int = 0
    #: the adapter's translation of these attributes (opaque here): Attributes of an unchanged
    #: node are reused, so the adapter may keep its reply object in them and skip rebuilding it
    wire: object = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def blocks(self) -> int:
        return (self.size + 511) // 512


@dataclass(slots=True)
class Invalidations:
    """What the kernel may have cached that is no longer true (from ``poll_changes``): the
    names ``(parent inode, name)`` and the attributes of inodes."""

    entries: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    inodes: list[int] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.entries or self.inodes)


@dataclass(slots=True)
class OpenResult:
    fh: int
    keep_cache: bool = False
    direct_io: bool = False
    backing_id: int = 0  # FUSE passthrough: the kernel reads this registered local file itself
    #: no FLUSH at close(2) of this handle (FOPEN_NOFLUSH): a read-only one has nothing to flush
    noflush: bool = False
    #: a directory: the kernel keeps the listing it is served (FUSE's readdir cache);
    #: ``keep_cache`` then says whether the listing it kept from an earlier opendir still holds
    cache_readdir: bool = False
