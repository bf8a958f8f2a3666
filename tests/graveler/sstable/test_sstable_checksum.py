"""Block checksums: CRC32C values and RocksDB's masking, fast and pure-Python paths agree."""

from __future__ import annotations

import os

from lakefuse.graveler.sstable import checksum


def test_crc32c_known_vector():
    assert checksum.crc32c(b"123456789") == 0xE3069283
    assert checksum.crc32c(b"") == 0


def test_pure_python_crc32c_matches():
    for data in (b"", b"a", b"123456789", os.urandom(1000)):
        assert checksum._crc32c_pure(data) == checksum.crc32c(data)


def test_mask_is_rocksdb_masking():
    crc = 0xE3069283
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    assert checksum.mask(crc) == (rotated + 0xA282EAD8) & 0xFFFFFFFF
    assert checksum.mask(0) == 0xA282EAD8
