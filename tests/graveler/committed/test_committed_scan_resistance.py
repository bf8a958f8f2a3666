"""CommittedManager over a local block adapter with a real RamCache: scans (iterations,
listings, diffs) keep their ranges in the cache's probation segment, point reads keep theirs in
main, so a full walk neither grows the cache beyond probation nor flushes the working set."""

from __future__ import annotations

import pytest

from lakefuse.block.local import LocalBlockAdapter
from lakefuse.cache import RamCache
from lakefuse.graveler.committed import CommittedManager
from lakefuse.graveler.committed.encoding import EMPTY_FILE_ID
from lakefuse.graveler.committed.manager import TOUCH_EVERY

from committed_helpers import SMALL_RANGES, make_record, object_keys

SCAN_BYTES = 100_000
RAM_BYTES = 1_000_000


@pytest.fixture
def local_block(tmp_path):
    return LocalBlockAdapter(tmp_path / "namespace")


@pytest.fixture
def keys():
    return object_keys(6000)


@pytest.fixture
def metarange(local_block, keys):
    writer = CommittedManager(local_block, None, None, SMALL_RANGES, upload_threads=0)
    metarange = writer.write_metarange(make_record(k) for k in keys)
    writer.close()
    # the ranges decoded are many times what probation holds
    everything = RamCache(1 << 30)
    reader = CommittedManager(local_block, None, everything, SMALL_RANGES)
    assert sum(1 for _ in reader.iterate(metarange)) == len(keys)
    assert everything.stats().bytes > 10 * SCAN_BYTES
    return metarange


@pytest.fixture
def ram():
    return RamCache(RAM_BYTES, "scan-test", scan_bytes=SCAN_BYTES)


@pytest.fixture
def manager(local_block, ram):
    manager = CommittedManager(local_block, None, ram, SMALL_RANGES)
    yield manager
    manager.close()


def range_cached(ram, manager, metarange, index) -> bool:
    return ram.contains("range:" + manager.ranges(metarange)[index].id)


def full_scans(manager, metarange, keys, check):
    """Iterate, list and diff the whole metarange, calling ``check()`` along the way."""
    for i, record in enumerate(manager.iterate(metarange)):
        assert record.key == keys[i]
        check()
    listed = []
    for key, _record in manager.list_dir(metarange, b"", delimiter=b""):
        listed.append(key)
        check()
    assert listed == keys
    diffed = []
    for key, left, right in manager.diff(EMPTY_FILE_ID, metarange):
        assert left is None and right.key == key
        diffed.append(key)
        check()
    assert diffed == keys


def test_full_scans_stay_within_probation_and_keep_point_reads(manager, ram, metarange, keys):
    ranges = manager.ranges(metarange)
    point_keys = [ranges[i].min_key for i in (1, len(ranges) // 2, len(ranges) - 2)]
    for key in point_keys:
        assert manager.get(metarange, key).key == key
    point_bytes = ram.stats().bytes  # the metarange and three ranges, in main
    assert 0 < point_bytes < RAM_BYTES - SCAN_BYTES

    def check():
        assert ram.stats().bytes <= point_bytes + SCAN_BYTES

    full_scans(manager, metarange, keys, check)
    stats = ram.stats()
    assert stats.evictions > 0 and stats.bytes <= point_bytes + SCAN_BYTES
    assert all(range_cached(ram, manager, metarange, i) for i in (1, len(ranges) // 2, len(ranges) - 2))
    assert not range_cached(ram, manager, metarange, 0)  # a scan's range went with later ones
    misses = ram.stats().misses
    for key in point_keys:  # the working set is still warm: no loader call
        assert manager.get(metarange, key).key == key
    assert ram.stats().misses == misses


def test_a_point_read_promotes_what_a_scan_loaded_and_a_scan_never_does(manager, ram, metarange, keys):
    ranges = manager.ranges(metarange)
    scanned_key = ranges[1].min_key
    point_key = ranges[2].min_key
    assert next(manager.iterate(metarange, point_key)).key == point_key  # loaded by a scan
    for _ in range(2 * TOUCH_EVERY):  # repeated point reads reach it by weak reference and touch it
        assert manager.get(metarange, point_key).key == point_key
    for _ in range(2 * TOUCH_EVERY):  # repeated scans of another range touch it as a scan
        assert next(manager.iterate(metarange, scanned_key)).key == scanned_key
    for _ in range(2):
        assert sum(1 for _ in manager.iterate(metarange)) == len(keys)
    assert range_cached(ram, manager, metarange, 2)  # promoted to main: survived the walks
    assert not range_cached(ram, manager, metarange, 1)  # stayed in probation: flushed
    assert ram.stats().bytes <= RAM_BYTES
