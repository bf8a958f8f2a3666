"""The object storage interface every adapter (local directory, S3) implements.

Keys are ``/``-separated strings relative to the adapter's root (the storage namespace).
Adapters raise only ``lakefuse.errors`` exceptions: ``ObjectNotFound`` for a missing key,
``StorageError`` for everything the backend does wrong.  The shared contract test suite in
``tests/block/contract.py`` is the specification of the behaviour.

Valid keys (``check_key``): non-empty, relative, ``/``-separated, no empty / ``.`` / ``..``
segments, no NUL, and no segment starting with ``RESERVED_SEGMENT_PREFIX`` (the local adapter's
temporary files).  Every adapter rejects other keys with ``InvalidArgument``, so a key valid on
one backend is valid on all of them.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from lakefuse.errors import InvalidArgument

#: key segments starting with this are reserved for adapters' temporary files
RESERVED_SEGMENT_PREFIX = ".lakefuse-tmp-"

MiB = 1024 * 1024


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid object key, else raise ``InvalidArgument``."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"invalid object key {key!r}: must be a non-empty string")
    if "\0" in key:
        raise InvalidArgument(f"invalid object key {key!r}: contains NUL")
    if key.startswith("/"):
        raise InvalidArgument(f"invalid object key {key!r}: must be relative (no leading '/')")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidArgument(f"invalid object key {key!r}: empty, '.' or '..' path segment")
        if segment.startswith(RESERVED_SEGMENT_PREFIX):
            raise InvalidArgument(f"invalid object key {key!r}: segments starting with {RESERVED_SEGMENT_PREFIX!r} are reserved")
    return key


def check_prefix(prefix: str) -> str:
    """Return a listing prefix if valid: empty, or the start of a valid key.  Segments before the
    last ``/`` must be valid key segments; the last one may be partial (``"dir/fi"``)."""
    if not isinstance(prefix, str):
        raise InvalidArgument(f"invalid listing prefix {prefix!r}: must be a string")
    if "\0" in prefix:
        raise InvalidArgument(f"invalid listing prefix {prefix!r}: contains NUL")
    if prefix.startswith("/"):
        raise InvalidArgument(f"invalid listing prefix {prefix!r}: must be relative (no leading '/')")
    complete = prefix.rpartition("/")[0]
    if complete:
        try:
            check_key(complete)
        except InvalidArgument:
            raise InvalidArgument(f"invalid listing prefix {prefix!r}: empty, '.', '..' or reserved path segment") from None
    return prefix


@dataclass(frozen=True, slots=True)
class TransferSettings:
    """How big objects move to S3: objects larger than ``multipart_threshold`` go as a multipart
    upload in parts of ``part_size`` bytes, at most ``max_concurrency`` parts in flight, so
    memory stays near ``part_size * max_concurrency`` whatever the object size.  (The local
    adapter always streams through a small buffer and ignores these.)"""

    part_size: int = 16 * MiB
    multipart_threshold: int = 16 * MiB
    max_concurrency: int = 4

    def __post_init__(self):
        if self.part_size < 5 * MiB:
            raise InvalidArgument(f"part_size must be at least 5 MiB (S3 minimum), got {self.part_size}")
        if self.multipart_threshold < 1:
            raise InvalidArgument(f"multipart_threshold must be positive, got {self.multipart_threshold}")
        if self.max_concurrency < 1:
            raise InvalidArgument(f"max_concurrency must be at least 1, got {self.max_concurrency}")


@dataclass(frozen=True, slots=True)
class ObjectStat:
    key: str
    size: int
    mtime: float  # seconds since the epoch
    etag: str = ""  # backend checksum if it has one (S3 ETag without quotes); may be empty


class BlockAdapter(abc.ABC):
    """Object storage rooted at one storage namespace."""

    #: the namespace URI this adapter is rooted at, e.g. ``local:///data/repo`` or ``s3://b/p``
    uri: str

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> ObjectStat:
        """Store ``data`` under ``key`` atomically (readers see the old or the new object)."""

    @abc.abstractmethod
    def put_file(self, key: str, path: str, move: bool = False, durable: bool = True,
                 source_fd: int | None = None) -> ObjectStat:
        """Store the contents of a local file, streaming (multipart on S3): never whole in RAM.
        With ``move`` the file is consumed: the local adapter renames it into place when it is
        on the same filesystem (no copy; the caller must not change the file's bytes through
        a descriptor it keeps), other adapters copy it, then delete it.  Once this returns the
        object is readable by every process and ``path`` is gone; if it raises, ``path`` may or
        may not remain.  With ``durable`` (the default) the object also survives a crash of
        the machine once this returns; without, that waits for the next ``sync()`` (the local
        adapter then skips its fsyncs; storage that is durable on every put ignores it).
        ``source_fd``: a descriptor of ``path`` the caller holds open (and closes), which the
        local adapter uses instead of opening the file again; others may ignore it."""

    @abc.abstractmethod
    def put_stream(self, key: str, stream: BinaryIO) -> ObjectStat:
        """Store what a readable binary stream yields until EOF, streaming."""

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """The whole object."""

    @abc.abstractmethod
    def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes from ``offset`` (short or empty at the end of the object)."""

    @abc.abstractmethod
    def get_to_file(self, key: str, path: str) -> ObjectStat:
        """Download the object to a local file, streaming."""

    @abc.abstractmethod
    def stat(self, key: str) -> ObjectStat:
        ...

    def exists(self, key: str) -> bool:
        from lakefuse.errors import ObjectNotFound

        try:
            self.stat(key)
            return True
        except ObjectNotFound:
            return False

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete; deleting a missing key is not an error."""

    @abc.abstractmethod
    def list(self, prefix: str = "", start_after: str = "", page_size: int = 1000) -> Iterator[ObjectStat]:
        """All objects whose key starts with ``prefix``, in key order, fetched page by page."""

    def sync(self) -> None:
        """Make every object put so far durable (those put with ``durable=False`` included).
        Storage that is durable on every put has nothing to do."""

    def close(self) -> None:
        """Release connections and other resources; the adapter must not be used afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def full_uri(self, key: str) -> str:
        """The URI of one object (for entries that point outside the namespace's key space)."""
        return self.uri.rstrip("/") + "/" + key
