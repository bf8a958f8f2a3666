"""Graveler files written by lakeFS itself decode with lakefuse's encodings and manager."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakefuse.graveler.committed import CommittedManager, record_to_entry
from lakefuse.graveler.committed.encoding import (
    entry_identity,
    entry_to_record,
    value_to_range_info,
    value_to_record,
)
from lakefuse.graveler.model import Entry, RangeInfo
from lakefuse.graveler.sstable import SSTableReader

from committed_helpers import CountingMemoryBlock

LAKEFS_FILES = Path(__file__).resolve().parents[2] / "data" / "lakefs_files"


def read(name: str) -> SSTableReader:
    return SSTableReader.open(LAKEFS_FILES / name)


def test_lakefs_range_decodes():
    table = read("range.sst")
    assert table.properties["type"] == b"ranges"
    records = [value_to_record(k, v) for k, v in table.items()]
    assert [r.key for r in records] == [b"a/b/c/no", b"a/b/c/yes"]
    assert all(len(r.identity) == 32 for r in records)
    assert record_to_entry(records[0]) == Entry(
        physical_address="b0c968736d8f42a2b1c6284835f08226",
        size=11,
        mtime=1628163584,
        checksum="664c688b4ea9c56730daacfc3d70aeed",
        content_type="",
        metadata={},
        address_is_full=False,
    )
    assert record_to_entry(records[1]).checksum == "eb4585ad9fe0426781ed7c49252f8225"


def test_lakefs_range_identities_are_reproduced_from_the_entries():
    """Every record of lakeFS's range.sst carries lakeFS's entry identity: entry_identity of the
    decoded entry gives the very bytes, and so does a record lakefuse writes for that entry.
    (ok1.sst carries made-up identities from a lakeFS test generator, so it is not checked.)"""
    table = read("range.sst")
    records = [value_to_record(k, v) for k, v in table.items()]
    assert len(records) == int(table.properties["count"]) == 2
    for record in records:
        entry = record_to_entry(record)
        assert entry_identity(entry) == record.identity
        assert entry_to_record(record.key, entry).identity == record.identity


def test_lakefs_ok1_range_decodes_all_105_records():
    table = read("ok1.sst")
    entries = [record_to_entry(value_to_record(k, v)) for k, v in table.items()]
    assert len(entries) == 105 == int(table.properties["count"])
    assert all(e.physical_address and e.checksum and e.mtime > 1_600_000_000 for e in entries)
    keys = [k for k, _ in table.items()]
    assert keys[0] == b"first" and keys[-1] == b"xyzzy" == table.properties["max_key"]
    # this test file's min_key property is not its first key (lakeFS test data): never trust it
    assert table.properties["min_key"] == b"+@\xb3l\xa8"


def test_lakefs_metarange_decodes():
    table = read("metarange.sst")
    assert table.properties["type"] == b"metaranges"
    [(key, value)] = table.items()
    assert value_to_range_info(key, value) == RangeInfo(
        id="a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e",
        min_key=b"a/b/c/no",
        max_key=b"a/b/c/yes",
        count=2,
        estimated_size=1190,
    )


@pytest.mark.parametrize("verify", [False])
def test_manager_reads_lakefs_written_commit(verify):
    """Placed in a namespace under the names the metarange uses, lakeFS's files are readable.
    (lakeFS derives file names with its own hash, so metarange verification is off here.)"""
    block = CountingMemoryBlock()
    range_id = "a83af763ba098c15369d9d6d723731eb9ce18b8dfac4f88c6f1287e772393d0e"
    metarange_id = "f" * 64
    block.objects["_lakefs/" + range_id] = (LAKEFS_FILES / "range.sst").read_bytes()
    block.objects["_lakefs/" + metarange_id] = (LAKEFS_FILES / "metarange.sst").read_bytes()
    manager = CommittedManager(block, None, None, verify_metaranges=verify)
    assert [r.key for r in manager.iterate(metarange_id)] == [b"a/b/c/no", b"a/b/c/yes"]
    assert record_to_entry(manager.get(metarange_id, b"a/b/c/yes")).size == 4
    assert [name for name, _ in manager.list_dir(metarange_id, b"a/")] == [b"a/b/"]
