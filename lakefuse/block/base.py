"""The object storage interface every adapter (local directory, S3) implements.

Keys are ``/``-separated strings relative to the adapter's root (the storage namespace).
Adapters raise only ``lakefuse.errors`` exceptions: ``ObjectNotFound`` for a missing key,
``StorageError`` for everything the backend does wrong.  The shared contract test suite in
``tests/block/contract.py`` is the specification of the behaviour.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import BinaryIO, Iterator


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
    def put_file(self, key: str, path: str) -> ObjectStat:
        """Store the contents of a local file, streaming (multipart on S3): never whole in RAM."""

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

    def full_uri(self, key: str) -> str:
        """The URI of one object (for entries that point outside the namespace's key space)."""
        return self.uri.rstrip("/") + "/" + key
