"""Reading SSTables written by lakeFS itself (Go, pebble, format v2, Snappy blocks).

The three files are a copy of ``shared/compat`` in ``tests/data/lakefs_files``; they come
from lakeFS's ``clients/spark/src/test/resources/sstable/``.
"""

from __future__ import annotations

import pytest

from lakefuse.graveler.sstable import SSTableReader, decode_uint_property
from lakefuse.graveler.sstable.format import decode_footer, decode_signed_varint


def split_value_record(value: bytes) -> tuple[bytes, bytes]:
    """lakeFS value encoding: signed-varint length + identity, signed-varint length + data."""
    length, pos = decode_signed_varint(value, 0)
    identity = value[pos : pos + length]
    pos += length
    length, pos = decode_signed_varint(value, pos)
    data = value[pos : pos + length]
    assert pos + length == len(value)
    return identity, data


def open_compat(compat_dir, name) -> SSTableReader:
    return SSTableReader.open(str(compat_dir / name))


@pytest.mark.parametrize("name", ["range.sst", "metarange.sst", "ok1.sst"])
def test_footer_is_rocksdb_v2_with_crc32c(compat_dir, name):
    footer = decode_footer((compat_dir / name).read_bytes())
    assert footer.format_version == 2
    assert footer.checksum_type == 1


@pytest.mark.parametrize("name", ["range.sst", "metarange.sst", "ok1.sst"])
def test_count_properties_and_order(compat_dir, name):
    reader = open_compat(compat_dir, name)
    items = reader.items()
    props = reader.properties
    assert props["rocksdb.compression"] == b"Snappy"
    assert int(props["count"]) == len(items) == len(reader)
    assert decode_uint_property(props["rocksdb.num.entries"]) == len(items)
    keys = [k for k, _ in items]
    assert keys == sorted(set(keys))
    assert props["max_key"] == keys[-1]
    for key, value in items:
        assert reader.get(key) == value
        identity, data = split_value_record(value)
        assert identity and data
    assert list(reader.iter_from(keys[len(keys) // 2])) == items[len(keys) // 2 :]


def test_range(compat_dir):
    reader = open_compat(compat_dir, "range.sst")
    props = reader.properties
    assert props["type"] == b"ranges"
    assert props["min_key"] == b"a/b/c/no" and props["max_key"] == b"a/b/c/yes"
    assert [k for k, _ in reader.items()] == [b"a/b/c/no", b"a/b/c/yes"]
    identity, entry = split_value_record(reader.get(b"a/b/c/no"))
    assert len(identity) == 32  # sha256 of the entry
    assert entry.startswith(b"\n b0c968736d8f42a2b1c6284835f08226")  # protobuf field 1: address
    assert reader.get(b"a/b/c/maybe") is None
    assert list(reader.iter_from(b"a/b/c/p")) == reader.items()[1:]


def test_metarange(compat_dir):
    reader = open_compat(compat_dir, "metarange.sst")
    props = reader.properties
    assert props["type"] == b"metaranges"
    items = reader.items()
    assert [k for k, _ in items] == [b"a/b/c/yes"]  # keyed by the range's max key
    range_id, range_data = split_value_record(items[0][1])
    assert len(range_id) == 64 and all(c in b"0123456789abcdef" for c in range_id)
    # protobuf RangeData: min_key (1), max_key (2), estimated_size (3), count (4)
    assert range_data.startswith(b"\n\x08a/b/c/no\x12\ta/b/c/yes")
    assert range_data.endswith(b" \x02")  # count = 2, as in range.sst


def test_ok1_spans_several_blocks(compat_dir):
    reader = open_compat(compat_dir, "ok1.sst")
    props = reader.properties
    assert props["type"] == b"ranges"
    assert decode_uint_property(props["rocksdb.num.data.blocks"]) == 4
    keys = [k for k, _ in reader.items()]
    assert len(keys) == 105
    assert keys[:3] == [b"first", b"run1/a", b"run2/a"]
    assert keys[-1] == b"xyzzy"
    # lakeFS's fixture carries a min_key property that is not its first key
    assert props["min_key"] == b"+@\xb3l\xa8"
    # seeks land in every block
    for key in keys[::9]:
        assert next(reader.iter_from(key))[0] == key
