"""CommittedManager: writing metaranges, content addresses, point lookups, iteration, listing."""

from __future__ import annotations

import pytest

from lakefuse.cache import RamCache
from lakefuse.config import CommittedConfig
from lakefuse.errors import CorruptedData, InvalidArgument, NotFound
from lakefuse.graveler.committed import CommittedManager, file_id, prefix_successor, value_record_id
from lakefuse.graveler.committed.encoding import EMPTY_FILE_ID
from lakefuse.graveler.model import ValueRecord

from committed_helpers import SMALL_RANGES, CountingMemoryBlock, make_record, object_keys


@pytest.fixture
def keys():
    return object_keys(3000)


@pytest.fixture
def written(manager, keys):
    return manager.write_metarange(make_record(k) for k in keys)


def test_write_splits_into_ranges_covering_every_key(manager, block, keys, written):
    ranges = manager.ranges(written)
    assert len(ranges) > 20
    assert sum(r.count for r in ranges) == len(keys)
    assert ranges[0].min_key == keys[0] and ranges[-1].max_key == keys[-1]
    for left, right in zip(ranges, ranges[1:]):
        assert left.max_key < right.min_key
    for r in ranges:
        assert r.estimated_size < SMALL_RANGES.range_max_bytes + 400
    assert block.file_ids() == {written} | {r.id for r in ranges}
    assert manager.last_written[-1] == written and len(manager.last_written) == len(ranges) + 1


def test_files_carry_lakefs_table_properties(block, written, manager):
    from lakefuse.graveler.sstable import SSTableReader

    ranges = manager.ranges(written)
    props = SSTableReader.from_bytes(block.objects["_lakefs/" + ranges[3].id]).properties
    assert props["type"] == b"ranges"
    assert (props["min_key"], props["max_key"]) == (ranges[3].min_key, ranges[3].max_key)
    assert int(props["count"]) == ranges[3].count
    assert int(props["estimated_size_bytes"]) == ranges[3].estimated_size
    meta = SSTableReader.from_bytes(block.objects["_lakefs/" + written]).properties
    assert meta["type"] == b"metaranges" and int(meta["count"]) == len(ranges)
    assert (meta["min_key"], meta["max_key"]) == (ranges[0].max_key, ranges[-1].max_key)


def test_file_names_are_content_addresses(manager, block, keys, written):
    ranges = manager.ranges(written)
    records = [make_record(k) for k in keys]
    position = 0
    for r in ranges:
        in_range = records[position : position + r.count]
        position += r.count
        assert r.id == file_id(value_record_id(rec.key, rec.identity) for rec in in_range)
    assert written == file_id(value_record_id(r.max_key, r.id.encode()) for r in ranges)


def test_same_records_same_ids_and_no_upload(manager, block, keys, written):
    puts_before = block.calls["put"]
    again = manager.write_metarange(make_record(k) for k in keys)
    assert again == written
    assert block.calls["put"] == puts_before
    assert manager.last_written == []
    other = CommittedManager(CountingMemoryBlock(), None, None, SMALL_RANGES)
    assert other.write_metarange(make_record(k) for k in keys) == written
    other.close()


def test_config_changes_boundaries_not_content(block, keys):
    keys = keys[:1000]  # ~190 KiB of records: under the default 256 KiB minimum
    big = CommittedManager(block, None, None, CommittedConfig())
    metarange = big.write_metarange(make_record(k) for k in keys)
    assert len(big.ranges(metarange)) == 1
    assert [r.key for r in big.iterate(metarange)] == keys
    big.close()


def test_get(manager, keys, written):
    for key in keys[::97] + [keys[0], keys[-1]]:
        record = manager.get(written, key)
        assert record == make_record(key)
    ranges = manager.ranges(written)
    misses = [b"", b"a", b"tables/", keys[0][:-1], keys[-1] + b"\x00", b"zzz", keys[10] + b"x"]
    misses += [r.max_key + b"\x00" for r in ranges]  # gaps between ranges
    for key in misses:
        assert manager.get(written, key) is None


def test_iterate_from_any_key(manager, keys, written):
    assert [r.key for r in manager.iterate(written)] == keys
    for start in (keys[1234], keys[1234] + b"\x00", b"tables/t00/date=2024-01-05", b""):
        expected = [k for k in keys if k >= start]
        assert [r.key for r in manager.iterate(written, start)] == expected
    assert list(manager.iterate(written, b"zzz")) == []
    for r in manager.ranges(written)[3:5]:
        assert next(manager.iterate(written, r.max_key + b"\x00")).key > r.max_key


def test_empty_metarange(manager, block):
    empty = manager.empty_metarange()
    assert empty == EMPTY_FILE_ID
    assert manager.write_metarange([]) == empty
    assert manager.ranges(empty) == ()
    assert manager.get(empty, b"a") is None
    assert list(manager.iterate(empty)) == []
    assert list(manager.list_dir(empty, b"")) == []
    assert block.calls["get"] == 0  # known by its ID, never read
    assert block.file_ids() == {empty}  # but stored, for tools reading _lakefs/
    from lakefuse.graveler.sstable import SSTableReader

    stored = SSTableReader.from_bytes(block.objects["_lakefs/" + empty])
    assert stored.items() == [] and stored.properties["type"] == b"metaranges"


@pytest.mark.parametrize(
    "records, message",
    [
        ([b"a", b"b\xff"], r"b'b\\xff'"),
        ([b"a", b""], "empty key"),
        ([b"b", b"a"], "not sorted"),
        ([b"a", b"a"], "duplicate"),
    ],
)
def test_bad_input_is_invalid_argument(manager, records, message):
    with pytest.raises(InvalidArgument, match=message):
        manager.write_metarange(ValueRecord(k, b"id", b"data") for k in records)


def test_bad_record_fields_are_invalid_argument(manager):
    with pytest.raises(InvalidArgument):
        manager.write_metarange([ValueRecord(b"a", "id", b"data")])  # type: ignore[arg-type]


def test_unknown_and_malformed_metarange_ids(manager):
    with pytest.raises(InvalidArgument):
        manager.get("not-an-id", b"a")
    with pytest.raises(NotFound):
        manager.get("0" * 64, b"a")


def test_tampered_metarange_is_corrupted(manager, block, written):
    fake = "1" * 64
    block.objects["_lakefs/" + fake] = block.objects["_lakefs/" + written]
    with pytest.raises(CorruptedData):
        manager.ranges(fake)


def test_range_not_matching_metarange_is_corrupted(block, written, manager):
    ranges = manager.ranges(written)
    block.objects["_lakefs/" + ranges[1].id] = block.objects["_lakefs/" + ranges[2].id]
    fresh = CommittedManager(block, None, None, SMALL_RANGES)
    with pytest.raises(CorruptedData, match=ranges[1].id):
        fresh.get(written, ranges[1].min_key)
    fresh.close()


# -- list_dir ------------------------------------------------------------------------------


def reference_listing(keys, prefix, delimiter=b"/", after=b""):
    out = []
    for key in keys:
        if not key.startswith(prefix):
            continue
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        name = key if cut < 0 else key[: cut + len(delimiter)]
        if out and out[-1][0] == name:
            continue
        out.append((name, cut < 0))
    return [(name, is_object) for name, is_object in out if name > after and not (after.startswith(name) and not is_object)]


def listing(manager, metarange, prefix, delimiter=b"/", after=b""):
    return [(name, record is not None) for name, record in manager.list_dir(metarange, prefix, delimiter, after)]


def test_list_dir_small_tree(manager):
    keys = [b"a/b/c", b"a/b/d", b"a/x", b"a/y/z", b"a0", b"b", b"b/c/d/e"]
    metarange = manager.write_metarange(make_record(k) for k in keys)
    assert listing(manager, metarange, b"") == [(b"a/", False), (b"a0", True), (b"b", True), (b"b/", False)]
    assert listing(manager, metarange, b"a/") == [(b"a/b/", False), (b"a/x", True), (b"a/y/", False)]
    assert listing(manager, metarange, b"a/b/") == [(b"a/b/c", True), (b"a/b/d", True)]
    assert listing(manager, metarange, b"a/", after=b"a/b/") == [(b"a/x", True), (b"a/y/", False)]
    assert listing(manager, metarange, b"a/", after=b"a/b/c") == [(b"a/x", True), (b"a/y/", False)]
    assert listing(manager, metarange, b"a/", after=b"a/x") == [(b"a/y/", False)]
    assert listing(manager, metarange, b"a/", after=b"a/y/") == []
    assert listing(manager, metarange, b"a/", after=b"zzz") == []
    assert listing(manager, metarange, b"c/") == []
    assert listing(manager, metarange, b"a/", delimiter=b"") == [(k, True) for k in keys[:4]]
    records = dict(manager.list_dir(metarange, b"a/"))
    assert records[b"a/x"] == make_record(b"a/x") and records[b"a/b/"] is None


def test_list_dir_matches_reference_across_many_ranges(manager, keys, written):
    cases = [
        (b"", b"/", b""),
        (b"tables/", b"/", b""),
        (b"tables/t00/", b"/", b""),
        (b"tables/t00/", b"/", b"tables/t00/date=2024-01-03/"),
        (b"tables/t00/", b"/", b"tables/t00/date=2024-01-03/part-00007.parquet"),
        (b"tables/t00/date=2024-01-04/", b"/", b""),
        (b"tables/t00/date=2024-01-04/", b"/", b"tables/t00/date=2024-01-04/part-00100.parquet"),
        (b"tables/t00/date=2024-01-0", b"/", b""),
        (b"tables/t00/", b"=", b""),
        (b"tables/t00/date=2024-01-04/part-0001", b"", b""),
    ]
    for prefix, delimiter, after in cases:
        assert listing(manager, written, prefix, delimiter, after) == reference_listing(keys, prefix, delimiter, after), (
            prefix, delimiter, after,
        )


def test_list_dir_skips_subtrees_unread(block, keys, written):
    fresh = CommittedManager(block, None, None, SMALL_RANGES)
    gets = block.calls["get"]
    assert listing(fresh, written, b"tables/t00/") == [
        (b"tables/t00/date=2024-01-%02d/" % d, False) for d in range(1, 7)
    ]
    # the metarange and one range per date directory at most: not all the ranges under t00/
    ranges_under = [r for r in fresh.ranges(written) if r.min_key.startswith(b"tables/t00/")]
    assert block.calls["get"] - gets <= 1 + 6 < len(ranges_under)
    fresh.close()


def test_list_dir_finds_the_next_directory_without_decoding_its_range(block):
    """The root of a tree of many directories: each jump past a directory needs one key of
    the range after it (the next directory's first), read from one block of its file."""
    keys = sorted([b"d%02d/" % d for d in range(0, 40, 3)]  # some directories have markers
                  + [b"d%02d/f%03d" % (d, i) for d in range(40) for i in range(60)] + [b"top"])
    writer = CommittedManager(block, None, None, SMALL_RANGES)
    metarange = writer.write_metarange(make_record(k) for k in keys)
    writer.close()
    ram = RamCache(1 << 30)
    fresh = CommittedManager(block, None, ram, SMALL_RANGES)
    listed = list(fresh.list_dir(metarange, b"", markers=True))
    assert listed == [(b"d%02d/" % d, make_record(b"d%02d/" % d) if d % 3 == 0 else None) for d in range(40)] + [
        (b"top", make_record(b"top"))]
    ranges = fresh.ranges(metarange)
    assert len(ranges) > 40
    # only the first range and the one holding "top" (an object right under the root)
    assert ram.stats().entries <= 1 + 2
    assert listing(fresh, metarange, b"", after=b"d07/") == reference_listing(keys, b"", after=b"d07/")
    fresh.close()


def test_iterate_after_a_seek_reads_blocks_until_it_goes_on(block):
    """A seek into a range not in memory reads its first records from the file's blocks; the
    range is decoded whole (and cached) only once the iteration goes on past SEEK_RECORDS."""
    keys = object_keys(3000)
    writer = CommittedManager(block, None, None, SMALL_RANGES)
    metarange = writer.write_metarange(make_record(k) for k in keys)
    writer.close()
    ram = RamCache(1 << 30)
    fresh = CommittedManager(block, None, ram, SMALL_RANGES)
    ranges = fresh.ranges(metarange)
    start = ranges[3].min_key + b"\x00"  # just inside the fourth range
    first = keys.index(ranges[3].min_key) + 1
    few = [record.key for _, record in zip(range(20), fresh.iterate(metarange, start))]
    assert few == keys[first:first + 20]
    assert ram.stats().entries == 1  # the metarange alone
    for seek in (start, ranges[3].max_key, ranges[-1].max_key):  # on past the seek, to the end
        position = keys.index(seek) if seek in keys else first
        assert [record.key for record in fresh.iterate(metarange, seek)] == keys[position:]
    assert ram.stats().entries > 1
    fresh.close()


def test_prefix_successor():
    assert prefix_successor(b"a/") == b"a0"
    assert prefix_successor(b"a\xff") == b"b"
    assert prefix_successor(b"\xff\xff") is None
