"""Writing block-based SSTables: rocksdict's ``SstFileWriter`` plus user table properties.

Owns :func:`write_sstable`.  Data and index blocks are written by RocksDB itself
(``rocksdict.SstFileWriter``) with ``format_version`` 2, CRC32C checksums and bytewise key
order: the same table format pebble's ``RocksDBv2`` produces for lakeFS.

rocksdict exposes no table-properties collector, so user properties (lakeFS puts ``type``,
``min_key``, ``max_key``, ``count``... there) are added afterwards: the properties block is
decoded, the user properties merged in, and the tail of the file (properties block,
metaindex block, footer) rewritten with fresh CRC32C checksums.  Data and index blocks are
not touched, and RocksDB still opens and ingests the result.

RocksDB refuses to write a table with no entries; an empty table is therefore assembled
here in pure Python (empty index block, properties, metaindex, footer), as pebble would
write it.  Do not hand empty tables to RocksDB's IngestExternalFile: it aborts the process
on any table without entries (not only ours).
"""

from __future__ import annotations

import os
import struct
from typing import Iterable, Mapping

from lakefuse.errors import CorruptedData, InvalidArgument
from lakefuse.graveler.sstable import checksum
from lakefuse.graveler.sstable.block import decode_plain_entries
from lakefuse.graveler.sstable.format import (
    BLOCK_TRAILER_SIZE,
    CRC32C_CHECKSUM,
    FOOTER_SIZE,
    NO_COMPRESSION,
    BlockHandle,
    Footer,
    decode_block_handle,
    decode_footer,
    encode_block_handle,
    encode_footer,
    encode_varint,
    read_block,
)
from lakefuse.graveler.sstable.reader import PROPERTIES_BLOCK_NAME

#: Table format written: v2 is what lakeFS (pebble ``TableFormatRocksDBv2``) writes.
FORMAT_VERSION = 2
#: Target uncompressed data block size.  Larger than RocksDB's 4 KiB default: 4x fewer index
#: entries make opening a table (the cold-lookup cost) ~4x cheaper and ``items()`` a little
#: faster, while a point lookup still decodes only one restart interval (16 entries).
DEFAULT_BLOCK_SIZE = 16 * 1024
#: Block compression written by default: Snappy, like lakeFS.  Measured on lakeFS-like
#: records (72-byte keys, 165-byte values, 20k entries): 29% smaller than uncompressed for
#: 5-10% slower ``items()`` (decompression runs at GB/s; the Python entry loop dominates).
DEFAULT_COMPRESSION = "snappy"
RESTART_INTERVAL = 16

_COMPRESSIONS = ("none", "snappy", "lz4", "zstd", "zlib")
_RESERVED_PREFIX = "rocksdb."
_MAX_KEY_REPR = 80


def _short(key: bytes) -> str:
    text = repr(bytes(key))
    return text if len(text) <= _MAX_KEY_REPR else text[: _MAX_KEY_REPR - 3] + "..."


def _as_bytes(value, what: str, index: int) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgument(
        f"sstable {what} at item {index} must be bytes, not {type(value).__name__}"
    )


def _check_properties(properties: Mapping[str, bytes] | None) -> dict[bytes, bytes]:
    checked: dict[bytes, bytes] = {}
    for name, value in (properties or {}).items():
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"sstable property name must be a non-empty str: {name!r}")
        if name.startswith(_RESERVED_PREFIX):
            raise InvalidArgument(f"sstable property name {name!r} uses the reserved 'rocksdb.' prefix")
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise InvalidArgument(
                f"sstable property {name!r} must be bytes, not {type(value).__name__}"
            )
        checked[name.encode("utf-8")] = bytes(value)
    return checked


def _writer_options(compression: str, block_size: int):
    from rocksdict import BlockBasedOptions, ChecksumType, DBCompressionType, Options

    table = BlockBasedOptions()
    table.set_format_version(FORMAT_VERSION)
    table.set_checksum_type(ChecksumType.crc32c())
    table.set_block_size(block_size)
    table.set_block_restart_interval(RESTART_INTERVAL)
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    options.set_compression_type(getattr(DBCompressionType, compression)())
    return options


def build_block(entries: Iterable[tuple[bytes, bytes]]) -> bytes:
    """Encode a block with restart interval 1 (no prefix compression): meta blocks."""
    body = bytearray()
    restarts = []
    for key, value in entries:
        restarts.append(len(body))
        body += encode_varint(0) + encode_varint(len(key)) + encode_varint(len(value))
        body += key
        body += value
    if not restarts:
        restarts.append(0)
    body += struct.pack(f"<{len(restarts)}I", *restarts)
    body += struct.pack("<I", len(restarts))
    return bytes(body)


def with_trailer(block: bytes) -> bytes:
    """Append the trailer of an uncompressed block: type byte + masked CRC32C."""
    typed = block + bytes([NO_COMPRESSION])
    return typed + struct.pack("<I", checksum.block_checksum(typed))


def _table_tail(
    start: int,
    properties: dict[bytes, bytes],
    metaindex: list[tuple[bytes, bytes]],
    index: BlockHandle,
) -> bytes:
    """Properties block + metaindex block (pointing at it) + footer, placed at ``start``."""
    props_block = build_block(sorted(properties.items()))
    props_handle = BlockHandle(start, len(props_block))
    meta = [
        (name, encode_block_handle(props_handle) if name == PROPERTIES_BLOCK_NAME else value)
        for name, value in metaindex
    ]
    if all(name != PROPERTIES_BLOCK_NAME for name, _ in meta):
        meta = sorted(meta + [(PROPERTIES_BLOCK_NAME, encode_block_handle(props_handle))])
    meta_block = build_block(meta)
    meta_offset = start + len(props_block) + BLOCK_TRAILER_SIZE
    footer = Footer(FORMAT_VERSION, CRC32C_CHECKSUM, BlockHandle(meta_offset, len(meta_block)), index)
    return with_trailer(props_block) + with_trailer(meta_block) + encode_footer(footer)


def _add_user_properties(path: str, user: dict[bytes, bytes]) -> None:
    """Rewrite the tail of the table at ``path`` so its properties include ``user``."""
    with open(path, "r+b") as f:
        data = f.read()
        footer = decode_footer(data)
        buf, start, end = read_block(data, footer.metaindex, footer, True)
        metaindex = decode_plain_entries(buf, start, end)
        props_handle = None
        properties: dict[bytes, bytes] = {}
        for name, value in metaindex:
            if name == PROPERTIES_BLOCK_NAME:
                props_handle, _ = decode_block_handle(value, 0)
                pbuf, pstart, pend = read_block(data, props_handle, footer, True)
                properties = dict(decode_plain_entries(pbuf, pstart, pend))
        if props_handle is None:
            raise CorruptedData(f"{path}: rocksdb wrote a table without a properties block")
        properties.update(user)
        footer_start = len(data) - FOOTER_SIZE
        tail_is_props_meta = (
            props_handle.offset + props_handle.size + BLOCK_TRAILER_SIZE == footer.metaindex.offset
            and footer.metaindex.offset + footer.metaindex.size + BLOCK_TRAILER_SIZE == footer_start
            and footer.index.offset < props_handle.offset
        )
        # Overwrite the old properties/metaindex/footer when they are the tail (the case
        # with the bundled RocksDB); otherwise leave every block in place and append.
        start = props_handle.offset if tail_is_props_meta else footer_start
        f.seek(start)
        f.write(_table_tail(start, properties, metaindex, footer.index))
        f.truncate()


def _empty_table_properties() -> dict[bytes, bytes]:
    zero = encode_varint(0)
    names = {
        "rocksdb.block.based.table.index.type": struct.pack("<I", 0),
        "rocksdb.block.based.table.prefix.filtering": b"0",
        "rocksdb.block.based.table.whole.key.filtering": b"1",
        "rocksdb.column.family.id": encode_varint(0x7FFFFFFF),
        "rocksdb.comparator": b"leveldb.BytewiseComparator",
        "rocksdb.compression": b"NoCompression",
        "rocksdb.creation.time": zero,
        "rocksdb.data.size": zero,
        "rocksdb.deleted.keys": zero,
        "rocksdb.external_sst_file.global_seqno": struct.pack("<Q", 0),
        "rocksdb.external_sst_file.version": struct.pack("<I", 2),
        "rocksdb.filter.size": zero,
        "rocksdb.fixed.key.length": zero,
        "rocksdb.format.version": encode_varint(FORMAT_VERSION),
        "rocksdb.index.key.is.user.key": zero,
        "rocksdb.index.size": encode_varint(8),
        "rocksdb.index.value.is.delta.encoded": zero,
        "rocksdb.merge.operands": zero,
        "rocksdb.merge.operator": b"nullptr",
        "rocksdb.num.data.blocks": zero,
        "rocksdb.num.entries": zero,
        "rocksdb.num.range-deletions": zero,
        "rocksdb.oldest.key.time": zero,
        "rocksdb.prefix.extractor.name": b"nullptr",
        "rocksdb.property.collectors": b"[]",
        "rocksdb.raw.key.size": zero,
        "rocksdb.raw.value.size": zero,
    }
    return {name.encode(): value for name, value in names.items()}


def _write_empty_table(path: str, user: dict[bytes, bytes]) -> None:
    index_block = build_block([])
    head = with_trailer(index_block)
    properties = _empty_table_properties()
    properties.update(user)
    tail = _table_tail(len(head), properties, [], BlockHandle(0, len(index_block)))
    with open(path, "wb") as f:
        f.write(head + tail)


def write_sstable(
    path: str | os.PathLike,
    items: Iterable[tuple[bytes, bytes]],
    properties: Mapping[str, bytes] | None = None,
    *,
    compression: str = DEFAULT_COMPRESSION,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> int:
    """Write ``items`` (keys strictly increasing bytewise, non-empty) as a table at ``path``.

    ``properties`` become user table properties (names must not start with ``rocksdb.``).
    Returns the size of the file.  Raises InvalidArgument naming the offending key for an
    empty, duplicate or out-of-order key; the partial file is removed.
    """
    if compression not in _COMPRESSIONS:
        raise InvalidArgument(f"sstable compression must be one of {_COMPRESSIONS}: {compression!r}")
    if block_size < 256:
        raise InvalidArgument(f"sstable block size {block_size} is too small (minimum 256)")
    path = os.fspath(path)
    user = _check_properties(properties)
    from rocksdict import SstFileWriter

    writer = None  # opened on the first item: RocksDB cannot write empty tables
    try:
        previous = None
        for index, item in enumerate(items):
            try:
                key, value = item
            except (TypeError, ValueError):
                raise InvalidArgument(f"sstable item {index} is not a (key, value) pair") from None
            key = _as_bytes(key, "key", index)
            value = _as_bytes(value, "value", index)
            if not key:
                raise InvalidArgument(f"empty sstable key b'' at item {index}", key=key)
            if previous is not None and key <= previous:
                problem = "duplicate" if key == previous else "out-of-order"
                raise InvalidArgument(
                    f"{problem} sstable key {_short(key)} at item {index} "
                    f"(previous key {_short(previous)}); keys must be strictly increasing",
                    key=key,
                )
            if writer is None:
                writer = SstFileWriter(_writer_options(compression, block_size))
                writer.open(path)
            writer[key] = value
            previous = key
        if writer is not None:
            writer.finish()
    except BaseException:
        if writer is not None:
            _remove_quietly(path)
        raise
    if writer is None:
        _write_empty_table(path, user)
    elif user:
        _add_user_properties(path, user)
    return os.path.getsize(path)


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
