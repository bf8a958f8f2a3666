"""Helpers of the SSTable format tests: tables written directly with rocksdict (any format
version / compression / index layout) and item generators."""

from __future__ import annotations

import random
from pathlib import Path


def rocksdb_table(path: Path, items, *, format_version=2, compression="none", block_size=1024,
                  index="binary_search", index_restart_interval=1, data_block_hash=False,
                  checksum="crc32c", deletions=()) -> Path:
    """Write a table with rocksdict directly (bypassing write_sstable).

    ``deletions`` are keys written as deletion tombstones, merged in key order with items.
    """
    from rocksdict import (BlockBasedIndexType, BlockBasedOptions, ChecksumType,
                           DataBlockIndexType, DBCompressionType, Options, SstFileWriter)

    table_options = BlockBasedOptions()
    table_options.set_format_version(format_version)
    table_options.set_checksum_type(getattr(ChecksumType, checksum)())
    table_options.set_block_size(block_size)
    table_options.set_index_type(getattr(BlockBasedIndexType, index)())
    table_options.set_index_block_restart_interval(index_restart_interval)
    if index == "two_level_index_search":
        table_options.set_metadata_block_size(256)
    if data_block_hash:
        table_options.set_data_block_index_type(DataBlockIndexType.binary_and_hash())
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table_options)
    options.set_compression_type(getattr(DBCompressionType, compression)())
    writer = SstFileWriter(options)
    writer.open(str(path))
    merged = sorted([(k, v, False) for k, v in items] + [(k, None, True) for k in deletions])
    for key, value, deleted in merged:
        if deleted:
            del writer[key]
        else:
            writer[key] = value
    writer.finish()
    return path


def random_items(n: int, seed: int = 1, max_key: int = 40, max_value: int = 300):
    """``n`` sorted items with random binary keys (1..max_key bytes) and values."""
    rnd = random.Random(seed)
    keys: set[bytes] = set()
    while len(keys) < n:
        keys.add(rnd.randbytes(rnd.randrange(1, max_key + 1)))
    return [(k, rnd.randbytes(rnd.randrange(0, max_value + 1))) for k in sorted(keys)]


def path_items(n: int, seed: int = 1):
    """``n`` sorted items shaped like Graveler ranges: path keys, ~150-byte values."""
    rnd = random.Random(seed)
    keys = sorted({f"data/year={2000 + i % 25}/part-{i:06d}-{rnd.getrandbits(32):08x}.parquet".encode()
                   for i in range(n)})
    return [(k, rnd.randbytes(rnd.randrange(100, 200))) for k in keys]
