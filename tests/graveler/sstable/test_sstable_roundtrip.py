"""write_sstable -> SSTableReader round trips: contents, properties, sizes, compressions."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefuse.graveler.sstable import SSTableReader, decode_uint_property, write_sstable
from sstable_helpers import path_items, random_items

sorted_items = st.dictionaries(
    st.binary(min_size=1, max_size=40), st.binary(max_size=300), max_size=200
).map(lambda d: sorted(d.items()))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=sorted_items)
def test_random_sorted_items_round_trip(tmp_path, items):
    path = tmp_path / "t.sst"
    write_sstable(str(path), items, block_size=256)
    reader = SSTableReader.open(str(path))
    assert reader.items() == items
    assert list(reader.iter_from()) == items
    assert len(reader) == len(items)
    for key, value in items:
        assert reader.get(key) == value


def test_empty_values(table):
    items = [(b"a", b""), (b"b", b""), (b"c", b"x"), (b"d", b"")]
    reader = table(items)
    assert reader.items() == items
    assert reader.get(b"a") == b""  # present-but-empty is not "missing"
    assert reader.get(b"bb") is None


def test_binary_keys_including_prefixes_and_trailer_like_bytes(table):
    # Keys that are prefixes of each other, where the internal-key trailer (01 00 .. 00)
    # shares bytes with the next key: the prefix compression must span into the trailer.
    keys = [b"\x00", b"\x00\x00", b"\x00\x01", b"a", b"a\x01", b"a\x01\x00", b"a\x01\x00\x00\x00",
            b"a\x01\x00\x00\x00\x00\x00\x00\x00", b"a\x01\x00\x00\x00\x00\x00\x00\x00\x01", b"a\x02",
            b"\x7f", b"\x80", b"\xff", b"\xff" * 200]
    items = [(k, k[::-1] * 3) for k in keys]
    reader = table(items, block_size=256)
    assert reader.items() == items
    for key, value in items:
        assert reader.get(key) == value


def test_large_table_spans_many_blocks(table):
    items = path_items(20_000)
    reader = table(items)
    assert reader.items() == items
    assert len(reader) == 20_000
    # 16 KiB blocks of ~200-byte entries: the table really spans many data blocks
    assert decode_uint_property(reader.properties["rocksdb.num.data.blocks"]) > 100
    for key, value in items[::997]:
        assert reader.get(key) == value


def test_large_values_and_keys_take_the_slow_varint_path(table):
    items = [(b"k%03d" % i + b"x" * (i * 50), bytes([i]) * (i * 1000)) for i in range(1, 60)]
    reader = table(items)
    assert reader.items() == items
    assert reader.get(items[30][0]) == items[30][1]


def test_properties_round_trip_with_rocksdb_ones(table):
    props = {"type": b"ranges", "min_key": b"a", "max_key": b"c", "count": b"3",
             "estimated_size_bytes": b"123", "binary": bytes(range(256))}
    reader = table([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], props)
    got = reader.properties
    for name, value in props.items():
        assert got[name] == value
    assert decode_uint_property(got["rocksdb.num.entries"]) == 3
    assert got["rocksdb.comparator"] == b"leveldb.BytewiseComparator"
    assert decode_uint_property(got["rocksdb.format.version"]) == 2
    assert reader.format_version == 2
    assert len(reader) == 3
    got["type"] = b"changed"  # a copy: the reader is not mutated
    assert reader.properties["type"] == b"ranges"


def test_without_properties_only_rocksdb_ones(table):
    reader = table([(b"a", b"1")])
    assert all(name.startswith("rocksdb.") for name in reader.properties)


def test_empty_table(table):
    reader = table([], {"type": b"metaranges"})
    assert reader.items() == []
    assert len(reader) == 0
    assert reader  # a reader is true even of an empty table
    assert list(reader.iter_from()) == []
    assert list(reader.iter_from(b"x")) == []
    assert reader.get(b"x") is None
    assert reader.properties["type"] == b"metaranges"
    assert decode_uint_property(reader.properties["rocksdb.num.entries"]) == 0


def test_accepts_any_iterable_and_bytes_like(table):
    def generate():
        yield bytearray(b"a"), memoryview(b"1")
        yield b"b", bytearray(b"2")

    reader = table(generate())
    assert reader.items() == [(b"a", b"1"), (b"b", b"2")]
    assert all(type(k) is bytes and type(v) is bytes for k, v in reader.items())


@pytest.mark.parametrize("compression", ["none", "snappy", "lz4", "zstd", "zlib"])
def test_every_written_compression_reads_back(table, compression):
    items = random_items(800, seed=3)
    reader = table(items, {"type": b"ranges"}, compression=compression, block_size=1024)
    assert reader.properties["type"] == b"ranges"
    assert reader.items() == items


def test_default_compression_is_snappy_with_format_version_2(table):
    reader = table(path_items(500))
    assert reader.properties["rocksdb.compression"] == b"Snappy"
    assert reader.format_version == 2


def test_from_bytes_equals_open(table, tmp_path):
    items = random_items(300)
    path = tmp_path / "x.sst"
    write_sstable(path, items, {"k": b"v"})
    data = path.read_bytes()
    for source in (data, bytearray(data), memoryview(data)):
        reader = SSTableReader.from_bytes(source)
        assert reader.items() == items
        assert reader.properties == SSTableReader.open(path).properties


def test_rocksdb_ingests_what_we_write(tmp_path):
    """The properties rewrite keeps the table valid for RocksDB itself."""
    from rocksdict import IngestExternalFileOptions, Options, Rdict

    items = random_items(3000, seed=9)
    path = tmp_path / "ingest.sst"
    write_sstable(str(path), items, {"type": b"ranges", "min_key": items[0][0], "zz": b"last"})
    db = Rdict(str(tmp_path / "db"), Options(raw_mode=True))
    try:
        db.ingest_external_file([str(path)], IngestExternalFileOptions())
        assert list(db.items()) == items
        assert "# entries=3000" in db.property_value("rocksdb.aggregated-table-properties")
    finally:
        db.close()
