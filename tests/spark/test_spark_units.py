"""The pure parts of the Spark jobs, without Spark: partitioning, range splitting, listing
plans, retention, namespace guards."""

from __future__ import annotations

import hashlib
import os
import random

import pytest

from lakefuse.block.namespace import open_namespace
from lakefuse.config import CommittedConfig
from lakefuse.errors import CorruptedData, InvalidArgument
from lakefuse.graveler.commits import new_commit
from lakefuse.graveler.committed import CommittedManager
from lakefuse.graveler.committed.encoding import decode_entry, decode_value, entry_identity
from lakefuse.graveler.committed.files import GravelerFiles
from lakefuse.graveler.model import Entry, MetaRangeID
from lakefuse.graveler.ports import Repository
from lakefuse.spark import sources
from lakefuse.spark.gc import DATA_PREFIX, listing_ranges, namespace_key, retained_commit_ids
from lakefuse.graveler.committed.encoding import decode_entry, decode_value
from lakefuse.spark.importer import RangeBounds, inline_address, partition_bounds, source_record, store_inline
from lakefuse.spark.settings import JobSettings
from lakefuse.spark.locations import check_outside_namespaces, key_prefix, nested_namespaces, overlaps
from lakefuse.spark.ranges import replace_prefix, write_sorted_ranges
from lakefuse.spark.sources import SourceLocation, SourceObject, list_task, plan_listing

SMALL = CommittedConfig(range_min_bytes=2000, range_max_bytes=8000, range_raggedness=16)


def _records(count: int, prefix: str = "k/") -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(count):
        obj = SourceObject(f"{i:05d}", i, 1_700_000_000, f"etag{i}", f"s3://bucket/src/{i:05d}")
        key, (_size, raw) = source_record(prefix, obj)
        out.append((key, raw))
    return sorted(out)


def test_imported_records_carry_lakefs_entry_identity():
    """The importer writes its range records itself: each carries lakeFS's entry identity
    (int64 size, string ETag, empty string map, string content type), as a commit would."""
    obj = SourceObject("a/b.parquet", 1234, 1_700_000_000, "0123abcd-2", "s3://bucket/src/a/b.parquet")
    key, (size, raw) = source_record("imported/", obj)
    identity, data = decode_value(raw)
    entry = decode_entry(data)
    assert key == b"imported/a/b.parquet" and size == 1234 and entry.address_is_full

    def int64(value):
        return b"\x02\x08" + value.to_bytes(8, "big", signed=True)

    def string(text):
        return b"\x01" + int64(len(text.encode())) + text.encode()

    stream = int64(1234) + string("0123abcd-2") + b"\x04" + int64(0) + string(entry.content_type)
    assert entry.content_type and identity == hashlib.sha256(stream).digest() == entry_identity(entry)


def test_partition_bounds_depend_only_on_the_sample():
    keys = sorted(f"key-{i:06d}".encode() for i in range(5000))
    bounds = partition_bounds(keys, count=100_000, records_per_partition=25_000)
    assert len(bounds) == 3 and bounds == sorted(set(bounds))
    assert partition_bounds(list(keys), 100_000, 25_000) == bounds
    assert partition_bounds(keys, 10, 25_000) == []  # one partition
    assert partition_bounds([b"a", b"b"], 10**6, 1) == [b"b"]  # never more partitions than sample keys
    split = RangeBounds(bounds)
    assert [split(key) for key in (b"", bounds[0], bounds[-1], b"\xff")] == [0, 1, 3, 3]


def test_partition_ranges_split_like_a_commit(tmp_path):
    """A partition cuts ranges exactly where ``CommittedManager.write_metarange`` does."""
    records = _records(600)
    block = open_namespace(f"local://{tmp_path}/ns")
    manager = CommittedManager(block, None, None, SMALL, upload_threads=0)
    from lakefuse.graveler.committed.encoding import value_to_record

    metarange = manager.write_metarange(value_to_record(key, raw) for key, raw in records)
    expected = [info.id for info in manager.ranges(metarange)]
    written = list(write_sorted_ranges(GravelerFiles(block), SMALL, iter(records)))
    assert [info.id for info, _uploaded in written] == expected
    assert not any(uploaded for _info, uploaded in written)  # same IDs: files already there
    assert len(expected) > 3
    with pytest.raises(InvalidArgument, match="duplicate"):
        list(write_sorted_ranges(GravelerFiles(block), SMALL, iter([records[0], records[0]])))


def test_replace_prefix_keeps_the_rest_and_reuses_ranges(tmp_path):
    block = open_namespace(f"local://{tmp_path}/ns")
    manager = CommittedManager(block, None, None, SMALL, upload_threads=0)
    files = GravelerFiles(block)
    from lakefuse.graveler.committed.encoding import value_to_record

    head_records = _records(200, "a/") + _records(200, "m/") + _records(200, "z/")
    head = manager.write_metarange(value_to_record(k, v) for k, v in sorted(head_records))
    imported = [info for info, _ in write_sorted_ranges(files, SMALL, iter(_records(50, "m/x")))]
    result = replace_prefix(manager, files, head, b"m/", imported)
    keys = [record.key for record in manager.iterate(result)]
    assert keys == sorted([k for k, _ in head_records if not k.startswith(b"m/")] + [k for k, _ in _records(50, "m/x")])
    reused = {info.id for info in manager.ranges(head)} & {info.id for info in manager.ranges(result)}
    assert len(reused) >= 2  # ranges wholly outside m/ are kept by ID
    assert replace_prefix(manager, files, result, b"m/", imported) == result  # idempotent
    everything = replace_prefix(manager, files, head, b"", imported)
    assert [r.key for r in manager.iterate(everything)] == [k for k, _ in _records(50, "m/x")]
    empty = replace_prefix(manager, files, MetaRangeID(manager.empty_metarange()), b"m/", imported)
    assert [info.id for info in manager.ranges(empty)] == [info.id for info in imported]


def test_local_plan_covers_every_file_once(tmp_path, monkeypatch):
    root = tmp_path / "src"
    expected = set()
    for path in ["top", "a/1", "a/2", "a/b/c/d/deep", *(f"flat/{i:03d}" for i in range(57)), *(f"x{i}/y/f" for i in range(5))]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(path.encode())
        expected.add(path)
    os.symlink(root / "top", root / "link")
    os.mkfifo(root / "a" / "fifo")
    (root / "a" / ".lakefuse-tmp-x").write_bytes(b"reserved")
    source = SourceLocation(f"local://{root}")
    tasks = plan_listing(source, min_tasks=100, files_per_task=10, max_depth=2)
    assert sum(1 for task in tasks if task.kind == "files" and task.path == "flat/") == 6
    skipped = []
    listed = [obj for task in tasks for obj in list_task(source, task, skipped.append)]
    assert sorted(obj.key for obj in listed) == sorted(expected | {"link", "a/fifo"})
    assert sum(skipped) == 1  # the reserved name
    by_key = {obj.key: obj for obj in listed}
    top = by_key["top"]
    assert top.address == f"local://{root}/top" and top.size == 3 and top.metadata == () and top.data is None
    assert top.checksum.startswith("fs-") and top.checksum == sources.local_checksum(os.stat(root / "top"))
    # a link and a FIFO are entries of their own: the link's target is the object the import stores
    link, fifo = by_key["link"], by_key["a/fifo"]
    assert link.data == os.fsencode(root / "top") and link.address == ""
    assert dict(link.metadata)["lakefuse-type"] == "symlink" and dict(link.metadata)["lakefuse-target"] == str(root / "top")
    assert fifo.data == b"" and dict(fifo.metadata)["lakefuse-type"] == "fifo"
    assert dict(fifo.metadata)["lakefuse-mode"] == format(os.stat(root / "a" / "fifo").st_mode & 0o7777, "o")


def test_inline_objects_are_stored_by_content(tmp_path):
    settings = JobSettings()
    namespace = f"local://{tmp_path}/ns"
    link = SourceObject("l", 3, 1_700_000_000, "", "", (("lakefuse-target", "a/b"), ("lakefuse-type", "symlink")), b"a/b")
    stored = store_inline(namespace, settings, link)
    address, checksum = inline_address(b"a/b")
    assert stored.address == address and address.startswith("data/posix-") and stored.checksum == checksum
    assert (tmp_path / "ns" / address).read_bytes() == b"a/b" and stored.data is None
    assert store_inline(namespace, settings, link) == stored  # same content, same object
    key, (size, raw) = source_record("p/", stored)
    entry = decode_entry(decode_value(raw)[1])
    assert key == b"p/l" and size == 3 and not entry.address_is_full and entry.physical_address == address
    assert entry.metadata == {"lakefuse-target": "a/b", "lakefuse-type": "symlink"}
    plain = SourceObject("f", 1, 1, "etag", "s3://bucket/f")
    assert store_inline(namespace, settings, plain) is plain
    assert decode_entry(decode_value(source_record("", plain)[1][1])[1]).address_is_full


def test_listing_ranges_cover_every_key_once():
    now = 1_800_000_000
    tasks = listing_ranges(created=now - 1000 * 86400, now=now, count=7)
    assert len(tasks) == 9 and tasks[0][0] == "" and tasks[-1][1] == ""
    rng = random.Random(5)
    keys = [f"{DATA_PREFIX}{rng.randrange(0, 1 << 48):012x}{rng.randrange(1 << 80):020x}" for _ in range(2000)]
    keys += [f"{DATA_PREFIX}{(now - 3 * 86400) * 1000:012x}", f"{DATA_PREFIX}x", f"{DATA_PREFIX}0"]
    for key in keys:
        owners = [i for i, (after, until) in enumerate(tasks) if key > after and (not until or key <= until)]
        assert len(owners) == 1, key


def _commit(parents, date, name):
    return new_commit(MetaRangeID("m" + name), parents, name, "tester", date)


def test_retention_keeps_heads_tags_and_recent_history():
    root = _commit([], 100, "root")
    old = _commit([root], 200, "old")
    tagged_old = _commit([root], 210, "tagged")
    recent = _commit([old], 1000, "recent")
    side = _commit([root], 1100, "side")
    merge = _commit([recent, side], 1200, "merge")
    orphan = _commit([root], 1300, "orphan")  # young, but no branch reaches it
    commits = {c.id: c for c in (root, old, tagged_old, recent, side, merge, orphan)}
    kept = retained_commit_ids(commits, heads={merge.id}, tagged={tagged_old.id}, cutoff=900)
    assert kept == {merge.id, recent.id, side.id, tagged_old.id}
    assert retained_commit_ids(commits, {merge.id}, set(), cutoff=0) == {merge.id, recent.id, side.id, old.id, root.id}
    with pytest.raises(CorruptedData):
        retained_commit_ids({merge.id: merge}, {merge.id}, set(), cutoff=0)


def test_namespace_guards(tmp_path):
    repos = [Repository("one", f"local://{tmp_path}/ns/one", "main", 0), Repository("s3repo", "s3://bucket/lake", "main", 0)]
    assert overlaps(f"local://{tmp_path}/ns", f"local://{tmp_path}/ns/one")
    assert not overlaps(f"local://{tmp_path}/ns/one2", f"local://{tmp_path}/ns/one")
    assert overlaps("s3://bucket", "s3://bucket/lake") and not overlaps("s3://bucket/lake2", "s3://bucket/lake")
    (tmp_path / "ns" / "one").mkdir(parents=True)
    os.symlink(tmp_path / "ns" / "one", tmp_path / "alias")
    with pytest.raises(InvalidArgument, match="repository 'one'"):
        check_outside_namespaces(f"local://{tmp_path}/alias/data", repos, "import source")
    check_outside_namespaces(f"local://{tmp_path}/elsewhere", repos, "import source")
    assert nested_namespaces(f"local://{tmp_path}/ns", repos, "me") == ["one/"]
    assert key_prefix("") == "" and key_prefix("raw") == "raw/" and key_prefix("a/b/") == "a/b/"
    for bad in ("/abs", "a//b", "a/../b"):
        with pytest.raises(InvalidArgument):
            key_prefix(bad)
    entry = Entry("data/x", 1, 0, "c")
    assert namespace_key("local:///ns", entry) == "data/x"
    assert namespace_key("local:///ns", Entry("local:///ns/data/y", 1, 0, "c", address_is_full=True)) == "data/y"
    assert namespace_key("local:///ns", Entry("local:///ns2/data/y", 1, 0, "c", address_is_full=True)) is None
