"""Block checksums of block-based tables: masked CRC32C.

Owns computing and verifying the 4-byte checksum stored in every block trailer.  The fast
path is the ``google-crc32c`` package (C, hardware CRC instructions, ~15 GB/s).  Without it
a table-driven pure-Python CRC32C is used only to *write* checksums (the writer needs it for
one small properties block); per-block *verification* on read is then skipped, because pure
Python CRC (~10 MB/s) would cost more than decoding the blocks.  xxHash checksum types are
never verified (no fast implementation in the dependencies); neither is "no checksum".
"""

from __future__ import annotations

import struct

from lakefuse.errors import CorruptedData

_MASK_DELTA = 0xA282EAD8
_UNPACK_U32 = struct.Struct("<I").unpack_from

try:  # pragma: no branch - which one exists depends on the environment
    import google_crc32c as _google_crc32c

    _FAST_CRC32C = getattr(_google_crc32c, "implementation", "c") == "c"
    _crc32c_value = _google_crc32c.value
except ImportError:  # pragma: no cover - exercised only without the package
    _google_crc32c = None
    _FAST_CRC32C = False
    _crc32c_value = None


def _make_table() -> list[int]:
    poly = 0x82F63B78  # CRC32C (Castagnoli), reflected
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE: list[int] | None = None


def _crc32c_pure(data: bytes) -> int:
    global _TABLE
    if _TABLE is None:
        _TABLE = _make_table()
    table = _TABLE
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def crc32c(data: bytes) -> int:
    """Plain CRC32C of ``data``."""
    if _crc32c_value is not None:
        return _crc32c_value(bytes(data))
    return _crc32c_pure(data)


def mask(crc: int) -> int:
    """RocksDB/LevelDB masking of a stored CRC (rotate right 15 bits, add a constant)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def block_checksum(contents_and_type: bytes) -> int:
    """The masked CRC32C stored in a block trailer for ``block bytes + type byte``."""
    return mask(crc32c(contents_and_type))


def can_verify_fast() -> bool:
    """Whether reads verify CRC32C block checksums (only with the C implementation)."""
    return _FAST_CRC32C


def verify_block(data: bytes, start: int, end: int, checksum_type: int) -> None:
    """Check the trailer checksum of the block ``data[start:end]`` (trailer at ``end``).

    Only CRC32C (type 1) is checked, and only with a fast implementation; other types pass.
    """
    if checksum_type != 1 or not _FAST_CRC32C:
        return
    (stored,) = _UNPACK_U32(data, end + 1)
    actual = mask(_crc32c_value(data[start : end + 1]))
    if actual != stored:
        raise CorruptedData(
            f"sstable: block checksum mismatch at offset {start} "
            f"(stored 0x{stored:08x}, computed 0x{actual:08x})"
        )
