"""Reading block-based (RocksDB / pebble) SSTables in pure Python.

Owns :class:`SSTableReader`: footer -> metaindex -> properties and index blocks -> data
blocks.  The whole file is held in memory as ``bytes`` (Graveler tables are a few MiB, and
the cache layer above hands us whole files anyway), so uncompressed blocks are decoded in
place without copies.

Supported: format_version 0..5 (RocksDB ``BlockBasedTable``; pebble's ``RocksDBv2`` is
version 2), uncompressed / Snappy / LZ4 / LZ4HC / zlib / bzip2 / zstd blocks, binary-search
and partitioned (two-level) indexes, delta-encoded index values (v4+), user-key index keys
(v3+), data-block hash indexes (all checked against tables RocksDB writes).  CRC32C block
checksums are verified when the C CRC32C implementation is present (see ``checksum``).
Reported as CorruptedData because they would be misread: format_version >= 6 footers, the
"binary search with first key" index, tables holding range deletions.

Keys returned are *user* keys (the 8-byte internal-key trailer is stripped).  Tables whose
properties announce point tombstones or merge operands (or that have no properties) go
through a careful path that honours tombstones and keeps only the newest version of a key;
all others (everything lakefuse and lakeFS write) take the fast path, which assumes one
version per key.  Only a table dumped from a live RocksDB with snapshots could break that.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from typing import Iterator

from lakefuse.errors import CorruptedData
from lakefuse.graveler.sstable import checksum
from lakefuse.graveler.sstable.block import (
    append_data_items,
    decode_data_entries,
    decode_index_entries,
    decode_plain_entries,
    first_at_or_after,
    live_items,
    restart_layout,
    seek_segment,
)
from lakefuse.graveler.sstable.format import (
    decode_block_handle,
    decode_footer,
    decode_varint,
    read_block,
)

PROPERTIES_BLOCK_NAME = b"rocksdb.properties"
PROP_NUM_ENTRIES = "rocksdb.num.entries"
PROP_DELETED_KEYS = "rocksdb.deleted.keys"
PROP_MERGE_OPERANDS = "rocksdb.merge.operands"
PROP_RANGE_DELETIONS = "rocksdb.num.range-deletions"
PROP_INDEX_KEY_IS_USER_KEY = "rocksdb.index.key.is.user.key"
PROP_INDEX_VALUE_IS_DELTA_ENCODED = "rocksdb.index.value.is.delta.encoded"
PROP_INDEX_TYPE = "rocksdb.block.based.table.index.type"

INDEX_TYPE_BINARY_SEARCH = 0
INDEX_TYPE_HASH_SEARCH = 1
INDEX_TYPE_TWO_LEVEL = 2
INDEX_TYPE_BINARY_SEARCH_WITH_FIRST_KEY = 3


#: What malformed input makes the decoding code raise besides CorruptedData.
_MALFORMED = (IndexError, struct.error, ValueError, OverflowError)


def _corrupted(exc: Exception) -> CorruptedData:
    return CorruptedData(f"sstable: malformed table ({type(exc).__name__}: {exc})")


def decode_uint_property(raw: bytes) -> int:
    """Decode a numeric ``rocksdb.*`` table property (stored as a varint64)."""
    value, end = decode_varint(raw, 0)
    if end != len(raw):
        raise CorruptedData(f"sstable: numeric property of {len(raw)} bytes is not one varint")
    return value


class SSTableReader:
    """A parsed block-based table held in memory; cheap to query, safe to share read-only."""

    __slots__ = (
        "_data",
        "_footer",
        "_properties",
        "_index_keys",
        "_index_handles",
        "_verify",
        "_simple",
    )

    def __init__(self, data: bytes, *, verify_checksums: bool = True):
        try:
            self._parse(data, verify_checksums)
        except _MALFORMED as exc:
            raise _corrupted(exc) from None

    def _parse(self, data: bytes, verify_checksums: bool) -> None:
        self._data = data
        self._verify = verify_checksums and checksum.can_verify_fast()
        self._footer = footer = decode_footer(data)
        metaindex = self._plain_block(footer.metaindex)
        self._properties: dict[str, bytes] = {}
        for name, value in metaindex:
            if name == PROPERTIES_BLOCK_NAME:
                handle, _ = decode_block_handle(value, 0)
                self._properties = {
                    key.decode("utf-8", "surrogateescape"): prop
                    for key, prop in self._plain_block(handle)
                }
        if self._uint_property(PROP_RANGE_DELETIONS, 0):
            raise CorruptedData("sstable: tables holding range deletions are not supported")
        self._simple = all(
            self._uint_property(name, 1) == 0
            for name in (PROP_DELETED_KEYS, PROP_MERGE_OPERANDS)
        )
        self._index_keys, self._index_handles = self._load_index()

    # ----------------------------------------------------------------- construction
    @classmethod
    def open(cls, path: str | os.PathLike, *, verify_checksums: bool = True) -> "SSTableReader":
        """Read the table file at ``path`` into memory and parse it."""
        with open(path, "rb") as f:
            data = f.read()
        try:
            return cls(data, verify_checksums=verify_checksums)
        except CorruptedData as exc:
            raise CorruptedData(f"{os.fspath(path)}: {exc.message}", path=os.fspath(path)) from None

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, verify_checksums: bool = True) -> "SSTableReader":
        """Parse a table held in memory (``data`` is copied only if it is not ``bytes``)."""
        return cls(data if type(data) is bytes else bytes(data), verify_checksums=verify_checksums)

    # ----------------------------------------------------------------- metadata
    @property
    def properties(self) -> dict[str, bytes]:
        """User and ``rocksdb.*`` table properties, raw bytes as stored.

        Numeric ``rocksdb.*`` properties are varints: see :func:`decode_uint_property`.
        """
        return dict(self._properties)

    @property
    def format_version(self) -> int:
        return self._footer.format_version

    def __len__(self) -> int:
        """Number of entries: ``rocksdb.num.entries``, or a count of the live items when the
        table holds tombstones/merge operands or has no such property."""
        entries = self._uint_property(PROP_NUM_ENTRIES, None)
        if entries is None or not self._simple:
            return len(self.items())
        return entries

    def __bool__(self) -> bool:
        """A reader is always true, even of an empty table (``len`` says whether it is)."""
        return True

    def __repr__(self) -> str:
        return (
            f"<SSTableReader v{self._footer.format_version} {len(self._data)} bytes, "
            f"{len(self._index_handles)} data blocks>"
        )

    # ----------------------------------------------------------------- queries
    def items(self) -> list[tuple[bytes, bytes]]:
        """Every ``(user_key, value)`` of the table, in key order."""
        try:
            return self._items()
        except _MALFORMED as exc:
            raise _corrupted(exc) from None

    def _items(self) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        data = self._data
        footer = self._footer
        verify = self._verify
        if self._simple:
            append = out.append
            for handle in self._index_handles:
                buf, start, end = read_block(data, handle, footer, verify)
                entries_end, _ = restart_layout(buf, start, end)
                append_data_items(buf, start, entries_end, append)
            return out
        previous = None
        for handle in self._index_handles:
            block, previous = self._careful_block(handle, previous)
            out.extend(block)
        return out

    def iter_from(self, key: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Iterate ``(user_key, value)`` from the first key >= ``key``, in key order.

        Data blocks are decoded one at a time, as the iteration reaches them.
        """
        try:
            yield from self._iter_from(key)
        except _MALFORMED as exc:
            raise _corrupted(exc) from None

    def _iter_from(self, key: bytes) -> Iterator[tuple[bytes, bytes]]:
        first = bisect_left(self._index_keys, key) if key else 0
        handles = self._index_handles
        data = self._data
        footer = self._footer
        verify = self._verify
        previous = None
        for i in range(first, len(handles)):
            if self._simple:
                buf, start, end = read_block(data, handles[i], footer, verify)
                block: list[tuple[bytes, bytes]] = []
                if i == first and key:
                    segment, _seg_end, entries_end, _found = seek_segment(buf, start, end, key)
                    append_data_items(buf, segment, entries_end, block.append)
                    block = block[first_at_or_after(block, key):]
                else:
                    entries_end, _ = restart_layout(buf, start, end)
                    append_data_items(buf, start, entries_end, block.append)
            else:
                block, previous = self._careful_block(handles[i], previous)
                if i == first and key:
                    block = block[first_at_or_after(block, key):]
            yield from block

    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key``, or None."""
        try:
            return self._get(key)
        except _MALFORMED as exc:
            raise _corrupted(exc) from None

    def _get(self, key: bytes) -> bytes | None:
        i = bisect_left(self._index_keys, key)
        if i == len(self._index_handles):
            return None
        if not self._simple:
            block, _ = self._careful_block(self._index_handles[i], None)
            j = first_at_or_after(block, key)
            return block[j][1] if j < len(block) and block[j][0] == key else None
        buf, start, end = read_block(self._data, self._index_handles[i], self._footer, self._verify)
        segment, segment_end, _entries_end, found = seek_segment(buf, start, end, key)
        if not found:
            return None
        block: list[tuple[bytes, bytes]] = []
        append_data_items(buf, segment, segment_end, block.append)
        j = first_at_or_after(block, key)
        if j < len(block) and block[j][0] == key:
            return block[j][1]
        return None

    # ----------------------------------------------------------------- internals
    def _uint_property(self, name: str, default):
        raw = self._properties.get(name)
        return default if raw is None else decode_uint_property(raw)

    def _plain_block(self, handle: tuple[int, int]) -> list[tuple[bytes, bytes]]:
        buf, start, end = read_block(self._data, handle, self._footer, self._verify)
        return decode_plain_entries(buf, start, end)

    def _careful_block(self, handle: tuple[int, int], previous: bytes | None):
        buf, start, end = read_block(self._data, handle, self._footer, self._verify)
        entries_end, _ = restart_layout(buf, start, end)
        return live_items(decode_data_entries(buf, start, entries_end), previous)

    def _load_index(self) -> tuple[list[bytes], list[tuple[int, int]]]:
        footer = self._footer
        index_type = INDEX_TYPE_BINARY_SEARCH
        raw_type = self._properties.get(PROP_INDEX_TYPE)
        if raw_type is not None and len(raw_type) == 4:
            index_type = int.from_bytes(raw_type, "little")
        if index_type == INDEX_TYPE_BINARY_SEARCH_WITH_FIRST_KEY:
            raise CorruptedData("sstable: index type 'binary search with first key' is not supported")
        keys_internal = footer.format_version < 3 or not self._uint_property(
            PROP_INDEX_KEY_IS_USER_KEY, 0
        )
        delta = footer.format_version >= 4 and bool(
            self._uint_property(PROP_INDEX_VALUE_IS_DELTA_ENCODED, 0)
        )
        buf, start, end = read_block(self._data, footer.index, footer, self._verify)
        if index_type != INDEX_TYPE_TWO_LEVEL:
            return decode_index_entries(
                buf, start, end, keys_are_internal=keys_internal, values_delta_encoded=delta
            )
        # Partitioned index: the top level maps separators to index partitions.
        _top_keys, partitions = decode_index_entries(
            buf, start, end, keys_are_internal=keys_internal, values_delta_encoded=delta
        )
        keys: list[bytes] = []
        handles: list[tuple[int, int]] = []
        for partition in partitions:
            pbuf, pstart, pend = read_block(self._data, partition, footer, self._verify)
            part_keys, part_handles = decode_index_entries(
                pbuf, pstart, pend, keys_are_internal=keys_internal, values_delta_encoded=delta
            )
            keys.extend(part_keys)
            handles.extend(part_handles)
        return keys, handles
