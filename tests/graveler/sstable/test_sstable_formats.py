"""The reader on tables written by RocksDB with layouts write_sstable does not use:
other format versions, compressions, index types, data-block hash indexes, tombstones."""

from __future__ import annotations

import itertools

import pytest

from lakefuse.graveler.sstable import SSTableReader
from sstable_helpers import random_items, rocksdb_table

ITEMS = random_items(1200, seed=11)
PROBES = [k for k, _ in ITEMS[::37]] + [k + b"\x00" for k, _ in ITEMS[::41]] + [b"\x00", b"\xff" * 41]


def check_reader(reader: SSTableReader, items) -> None:
    assert reader.items() == items
    assert len(reader) == len(items)
    present = dict(items)
    keys = [k for k, _ in items]
    for probe in PROBES:
        assert reader.get(probe) == present.get(probe)
        start = next((i for i, k in enumerate(keys) if k >= probe), len(keys))
        assert list(itertools.islice(reader.iter_from(probe), 3)) == items[start : start + 3]


@pytest.mark.parametrize("format_version", [0, 1, 2, 3, 4, 5])
@pytest.mark.parametrize("compression", ["none", "snappy"])
def test_format_versions(tmp_path, format_version, compression):
    path = rocksdb_table(tmp_path / "t.sst", ITEMS, format_version=format_version,
                         compression=compression)
    reader = SSTableReader.open(path)
    assert reader.format_version == format_version
    check_reader(reader, ITEMS)


@pytest.mark.parametrize("compression", ["lz4", "lz4hc", "zstd", "zlib", "bz2"])
@pytest.mark.parametrize("format_version", [1, 2, 5])
def test_compressions(tmp_path, compression, format_version):
    path = rocksdb_table(tmp_path / "t.sst", ITEMS, compression=compression,
                         format_version=format_version)
    check_reader(SSTableReader.open(path), ITEMS)


@pytest.mark.parametrize("format_version", [2, 5])
@pytest.mark.parametrize("index_restart_interval", [1, 4])
@pytest.mark.parametrize("index", ["binary_search", "two_level_index_search"])
def test_index_layouts(tmp_path, format_version, index_restart_interval, index):
    """v5 delta-encodes index values between restarts; two-level = partitioned index."""
    path = rocksdb_table(tmp_path / "t.sst", ITEMS, format_version=format_version, index=index,
                         index_restart_interval=index_restart_interval)
    check_reader(SSTableReader.open(path), ITEMS)


def test_data_block_hash_index(tmp_path):
    path = rocksdb_table(tmp_path / "t.sst", ITEMS, data_block_hash=True)
    check_reader(SSTableReader.open(path), ITEMS)


def test_xxh3_checksums_are_read_without_verification(tmp_path):
    path = rocksdb_table(tmp_path / "t.sst", ITEMS, format_version=5, checksum="xxh3")
    check_reader(SSTableReader.open(path), ITEMS)


def test_deletion_tombstones_are_hidden(tmp_path):
    live = ITEMS[::2]
    deleted = [k for k, _ in ITEMS[1::2]]
    path = rocksdb_table(tmp_path / "t.sst", live, deletions=deleted)
    reader = SSTableReader.open(path)
    check_reader(reader, live)
    for key in deleted[:50]:
        assert reader.get(key) is None


def test_table_of_only_tombstones_is_empty(tmp_path):
    path = rocksdb_table(tmp_path / "t.sst", [], deletions=[b"a", b"b"])
    reader = SSTableReader.open(path)
    assert reader.items() == []
    assert len(reader) == 0
    assert reader.get(b"a") is None
