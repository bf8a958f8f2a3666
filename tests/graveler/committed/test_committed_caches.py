"""CommittedManager with the real caches: disk cache seeding and reuse, RAM cache eviction,
upload failures, concurrent readers."""

from __future__ import annotations

import random
import threading

import pytest

from lakefuse.cache import DiskCache, RamCache
from lakefuse.errors import StorageError
from lakefuse.graveler.committed import CommittedManager
from lakefuse.graveler.committed.files import GravelerFiles
from lakefuse.graveler.committed.writer import write_range

from committed_helpers import SMALL_RANGES, CountingMemoryBlock, make_record, object_keys


@pytest.fixture
def disk(tmp_path):
    cache = DiskCache(tmp_path / "disk-cache", 64 * 1024**2, "committed-test")
    yield cache
    cache.close()


def test_written_files_seed_the_disk_cache(block, disk):
    keys = object_keys(1500)
    writer = CommittedManager(block, disk, RamCache(64 * 1024**2), SMALL_RANGES)
    metarange = writer.write_metarange(make_record(k) for k in keys)
    writer.close()
    reader = CommittedManager(block, disk, RamCache(64 * 1024**2), SMALL_RANGES)
    gets = block.calls["get"]
    assert [r.key for r in reader.iterate(metarange)] == keys
    assert block.calls["get"] == gets  # everything came from the disk cache
    reader.close()


def test_cold_reader_fetches_through_the_disk_cache_once(block, tmp_path):
    keys = object_keys(800)
    metarange = CommittedManager(block, None, None, SMALL_RANGES).write_metarange(make_record(k) for k in keys)
    files = len(block.file_ids())
    cache = DiskCache(tmp_path / "cold", 64 * 1024**2)
    first = CommittedManager(block, cache, RamCache(64 * 1024**2), SMALL_RANGES)
    gets = block.calls["get"]
    assert sum(1 for _ in first.iterate(metarange)) == len(keys)
    assert block.calls["get"] - gets == files  # each file fetched once
    second = CommittedManager(block, cache, RamCache(64 * 1024**2), SMALL_RANGES)
    assert sum(1 for _ in second.iterate(metarange)) == len(keys)
    assert block.calls["get"] - gets == files
    cache.close()


def test_small_ram_cache_evicts_and_lookups_stay_right(block):
    keys = object_keys(3000)
    ram = RamCache(200_000, "tiny")  # a few ranges at most
    manager = CommittedManager(block, None, ram, SMALL_RANGES)
    metarange = manager.write_metarange(make_record(k) for k in keys)
    rng = random.Random(5)
    for key in rng.choices(keys, k=4000):
        assert manager.get(metarange, key).key == key
    stats = ram.stats()
    assert stats.evictions > 0 and stats.bytes <= 200_000
    assert [r.key for r in manager.iterate(metarange, keys[100])] == keys[100:]
    manager.close()


def test_concurrent_readers(block):
    keys = object_keys(3000)
    manager = CommittedManager(block, None, RamCache(300_000), SMALL_RANGES)
    metarange = manager.write_metarange(make_record(k) for k in keys)
    errors = []

    def reader(seed):
        rng = random.Random(seed)
        try:
            for key in rng.choices(keys, k=1500):
                assert manager.get(metarange, key) == make_record(key)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    manager.close()


class FailingPuts(CountingMemoryBlock):
    def __init__(self, fail_after: int):
        super().__init__()
        self.fail_after = fail_after

    def put_file(self, key, path):
        if self.calls["put"] >= self.fail_after:
            raise StorageError(f"injected failure writing {key}")
        return super().put_file(key, path)


def test_upload_failure_propagates_and_writes_no_metarange():
    block = FailingPuts(fail_after=5)
    manager = CommittedManager(block, None, None, SMALL_RANGES)
    with pytest.raises(StorageError, match="injected"):
        manager.write_metarange(make_record(k) for k in object_keys(2000))
    ranges_written = block.file_ids()
    assert len(ranges_written) == 5  # earlier ranges stay (harmless, content-addressed)
    manager.close()


def test_write_range_single_file(block):
    files = GravelerFiles(block)
    records = [make_record(k) for k in object_keys(300)]
    info = write_range(files, records)
    assert info.count == 300 and info.min_key == records[0].key and info.max_key == records[-1].key
    assert block.file_ids() == {info.id}
    assert write_range(files, records) == info and block.calls["put"] == 1
