"""SSTables: the RocksDB block-based table format that Graveler ranges and metaranges use.

Owns writing tables (through rocksdict's ``SstFileWriter``) and reading them back in pure
Python, including tables written by lakeFS (Go, pebble).  Public API:

* :func:`write_sstable` - sorted ``(key, value)`` pairs + user properties -> file
* :class:`SSTableReader` - ``open`` / ``from_bytes``, ``items``, ``iter_from``, ``get``,
  ``properties``, ``len``
"""

from lakefuse.graveler.sstable.reader import SSTableReader, decode_uint_property
from lakefuse.graveler.sstable.writer import write_sstable

__all__ = ["SSTableReader", "write_sstable", "decode_uint_property"]
