"""Constants and small codecs of the RocksDB block-based table format.

Owns what every other module of the package agrees on: the footer (magic numbers, format
versions, where the metaindex and index blocks are), block handles, block trailers
(compression type + checksum), varints, and turning a raw block of the file into its
uncompressed contents.  No table-level logic lives here.

File layout (format versions 0 to 5)::

    [data block 1] ... [data block N] [meta blocks] [index block] [metaindex block] [footer]

Every block is followed by a 5-byte trailer: 1 byte compression type, then a 4-byte
little-endian checksum of the block bytes plus that type byte.
"""

from __future__ import annotations

import bz2
import struct
import zlib
from dataclasses import dataclass
from typing import NamedTuple

import cramjam

from lakefuse.errors import CorruptedData
from lakefuse.graveler.sstable import checksum as _checksum

#: Magic number of block-based tables written with format_version >= 1 (RocksDB, pebble).
BLOCK_BASED_MAGIC = 0x88E241B785F4CFF7
#: Magic number of format_version 0 block-based tables (LevelDB-compatible footer).
LEGACY_BLOCK_BASED_MAGIC = 0xDB4775248B80FB57

LEGACY_FOOTER_SIZE = 48  # two handles padded to 40 bytes + magic
FOOTER_SIZE = 53  # checksum type + two handles padded to 40 bytes + version + magic
HANDLES_AREA_SIZE = 40
BLOCK_TRAILER_SIZE = 5
#: Highest format_version whose footer and blocks this package reads (v6+ changed the footer).
MAX_READABLE_FORMAT_VERSION = 5

# Block trailer compression types.
NO_COMPRESSION = 0
SNAPPY_COMPRESSION = 1
ZLIB_COMPRESSION = 2
BZIP2_COMPRESSION = 3
LZ4_COMPRESSION = 4
LZ4HC_COMPRESSION = 5
XPRESS_COMPRESSION = 6
ZSTD_COMPRESSION = 7

# Footer checksum types.
NO_CHECKSUM = 0
CRC32C_CHECKSUM = 1
XXHASH_CHECKSUM = 2
XXHASH64_CHECKSUM = 3
XXH3_CHECKSUM = 4

#: Largest uncompressed block accepted (guards allocations against corrupted size headers).
MAX_BLOCK_SIZE = 256 * 1024 * 1024
#: Snappy cannot expand data by more than ~22x (a 64-byte copy costs 3 bytes).
MAX_SNAPPY_RATIO = 24

#: Length of the internal-key trailer (seqno << 8 | value type, fixed64) after each user key.
INTERNAL_KEY_TRAILER_SIZE = 8
#: Internal key value types this package interprets.
VALUE_TYPE_DELETION = 0x0
VALUE_TYPE_VALUE = 0x1
VALUE_TYPE_SINGLE_DELETION = 0x7

_UNPACK_U32 = struct.Struct("<I").unpack_from
_ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"
_UNPACK_U64 = struct.Struct("<Q").unpack_from


class BlockHandle(NamedTuple):
    """Where a block is in the file: offset and size, trailer not included.

    A tuple, so hot paths may use plain ``(offset, size)`` tuples interchangeably.
    """

    offset: int
    size: int


@dataclass(frozen=True, slots=True)
class Footer:
    """The decoded fixed-size footer at the end of a table."""

    format_version: int
    checksum_type: int
    metaindex: BlockHandle
    index: BlockHandle


def decode_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode an unsigned LEB128 varint at ``pos``; return (value, position after it)."""
    result = 0
    shift = 0
    try:
        while True:
            byte = buf[pos]
            pos += 1
            if byte < 128:
                return result | (byte << shift), pos
            result |= (byte & 0x7F) << shift
            shift += 7
            if shift > 63:
                raise CorruptedData("varint longer than 10 bytes")
    except IndexError:
        raise CorruptedData("truncated varint") from None


def decode_signed_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a zig-zag signed varint (RocksDB ``PutVarsignedint64``)."""
    raw, pos = decode_varint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def encode_varint(value: int) -> bytes:
    """Encode a non-negative integer as an unsigned LEB128 varint."""
    if value < 0:
        raise ValueError("varint must be non-negative")
    out = bytearray()
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode_block_handle(buf: bytes, pos: int) -> tuple[BlockHandle, int]:
    """Decode a BlockHandle (offset varint64, size varint64) at ``pos``."""
    offset, pos = decode_varint(buf, pos)
    size, pos = decode_varint(buf, pos)
    return BlockHandle(offset, size), pos


def encode_block_handle(handle: BlockHandle) -> bytes:
    return encode_varint(handle.offset) + encode_varint(handle.size)


def decode_footer(data: bytes) -> Footer:
    """Decode the footer of a whole table held in ``data``; CorruptedData if it is not one."""
    size = len(data)
    if size < LEGACY_FOOTER_SIZE:
        raise CorruptedData(f"sstable: file of {size} bytes is too short to hold a footer")
    (magic,) = _UNPACK_U64(data, size - 8)
    if magic == LEGACY_BLOCK_BASED_MAGIC:
        start = size - LEGACY_FOOTER_SIZE
        version = 0
        checksum_type = CRC32C_CHECKSUM
        handles_at = start
    elif magic == BLOCK_BASED_MAGIC:
        if size < FOOTER_SIZE:
            raise CorruptedData(f"sstable: file of {size} bytes is too short to hold a footer")
        start = size - FOOTER_SIZE
        (version,) = _UNPACK_U32(data, size - 12)
        if version > MAX_READABLE_FORMAT_VERSION:
            raise CorruptedData(
                f"sstable: format_version {version} is not supported "
                f"(this reader handles 0..{MAX_READABLE_FORMAT_VERSION})"
            )
        checksum_type = data[start]
        handles_at = start + 1
    else:
        raise CorruptedData(f"sstable: bad magic number 0x{magic:016x} (not a block-based table)")
    metaindex, pos = decode_block_handle(data, handles_at)
    index, pos = decode_block_handle(data, pos)
    if pos > handles_at + HANDLES_AREA_SIZE:
        raise CorruptedData("sstable: footer block handles overflow their area")
    for name, handle in (("metaindex", metaindex), ("index", index)):
        if handle.offset + handle.size + BLOCK_TRAILER_SIZE > start:
            raise CorruptedData(
                f"sstable: {name} block [{handle.offset}, +{handle.size}] lies past the footer "
                f"at {start} (truncated file?)"
            )
    return Footer(version, checksum_type, metaindex, index)


def encode_footer(footer: Footer) -> bytes:
    """Encode a format_version >= 1 footer (53 bytes)."""
    if footer.format_version == 0:
        raise ValueError("writing the legacy footer is not supported")
    handles = encode_block_handle(footer.metaindex) + encode_block_handle(footer.index)
    return (
        bytes([footer.checksum_type])
        + handles.ljust(HANDLES_AREA_SIZE, b"\x00")
        + struct.pack("<IQ", footer.format_version, BLOCK_BASED_MAGIC)
    )


def _decompress(kind: int, raw: bytes, format_version: int) -> bytes:
    """Return the uncompressed contents of a block stored with compression ``kind``.

    With format_version >= 2, every codec but Snappy prefixes its output with the
    uncompressed size as a varint32 ("compression format version 2").
    """
    if kind == SNAPPY_COMPRESSION:
        # Snappy's own header is the uncompressed length; bound it before allocating.
        claimed, _ = decode_varint(raw, 0)
        if claimed > MAX_SNAPPY_RATIO * len(raw) + 64:
            raise CorruptedData(f"sstable: snappy block claims {claimed} bytes from {len(raw)}")
        return bytes(cramjam.snappy.decompress_raw(raw))
    if kind not in (ZLIB_COMPRESSION, BZIP2_COMPRESSION, LZ4_COMPRESSION, LZ4HC_COMPRESSION,
                    ZSTD_COMPRESSION):
        raise CorruptedData(f"sstable: unknown or unsupported block compression type {kind}")
    expected = None
    if format_version >= 2 or (kind == ZSTD_COMPRESSION and raw[:4] != _ZSTD_FRAME_MAGIC):
        # (RocksDB size-prefixes ZSTD blocks whatever the format_version)
        expected, pos = decode_varint(raw, 0)
        raw = raw[pos:]
        if expected > MAX_BLOCK_SIZE:
            raise CorruptedData(f"sstable: compressed block claims {expected} bytes")
    bound = MAX_BLOCK_SIZE if expected is None else expected + 1
    if kind == ZLIB_COMPRESSION:  # raw deflate (RocksDB's default window_bits is -14)
        out = zlib.decompressobj(-15).decompress(raw, bound)
    elif kind == BZIP2_COMPRESSION:
        out = bz2.BZ2Decompressor().decompress(raw, bound)
    elif kind == ZSTD_COMPRESSION:
        out = bytes(cramjam.zstd.decompress(raw, output_len=expected))
    else:
        if expected is None:  # legacy LZ4 blocks carry a fixed32 size header
            if len(raw) < 8:
                raise CorruptedData("sstable: truncated LZ4 block header")
            (expected,) = _UNPACK_U32(raw, 0)
            raw = raw[8:]
            if expected > MAX_BLOCK_SIZE:
                raise CorruptedData(f"sstable: compressed block claims {expected} bytes")
        out = bytes(cramjam.lz4.decompress_block(raw, output_len=expected))
    if expected is not None and len(out) != expected:
        raise CorruptedData(
            f"sstable: block decompressed to {len(out)} bytes, header says {expected}"
        )
    return out


def read_block(
    data: bytes, handle: tuple[int, int], footer: Footer, verify: bool
) -> tuple[bytes, int, int]:
    """Locate (and if needed decompress) one block of the table held in ``data``.

    Returns ``(buffer, start, end)``: the block's uncompressed contents are
    ``buffer[start:end]``.  Uncompressed blocks are not copied (``buffer`` is ``data``).
    Raises CorruptedData on a block past the end of the file, a checksum mismatch (when
    ``verify``), or an unknown compression type.
    """
    offset, size = handle
    end = offset + size
    if offset < 0 or size < 0 or end + BLOCK_TRAILER_SIZE > len(data):
        raise CorruptedData(f"sstable: block at {offset} (+{size}) runs past the end of the file")
    kind = data[end]
    if verify:
        _checksum.verify_block(data, offset, end, footer.checksum_type)
    if kind == NO_COMPRESSION:
        return data, offset, end
    try:
        out = _decompress(kind, data[offset:end], footer.format_version)
    except CorruptedData:
        raise
    except Exception as exc:  # codec errors come in many classes
        raise CorruptedData(
            f"sstable: block at {offset} does not decompress (type {kind}): {exc}"
        ) from None
    return out, 0, len(out)
