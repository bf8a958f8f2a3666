"""Object readers: local files read in place, remote objects through the block cache with
read-ahead (counted fetches), on both block stores."""

from __future__ import annotations

import os
import threading
import time

import pytest

from lakefuse.fs.readers import BlockCache, DiskBlockStore, LocalFileReader, RamBlockStore

BLOCK = 64 * 1024


class CountingSource:
    def __init__(self, data: bytes, delay: float = 0.0):
        self.data = data
        self.delay = delay
        self.ranges: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, offset: int, length: int) -> bytes:
        with self.lock:
            self.ranges.append((offset, length))
        if self.delay:
            time.sleep(self.delay)
        return self.data[offset:offset + length]


@pytest.fixture(params=["ram", "disk"])
def store(request, tmp_path):
    if request.param == "ram":
        yield RamBlockStore(64 * BLOCK)
        return
    from lakefuse.cache import DiskCache

    cache = DiskCache(tmp_path / "blocks", 64 * BLOCK, name="blocks")
    yield DiskBlockStore(cache)
    cache.close()


def wait_idle(cache: BlockCache) -> None:
    deadline = time.monotonic() + 5
    while cache._inflight and time.monotonic() < deadline:
        time.sleep(0.01)


def test_local_file_reader_reads_ranges_in_place(tmp_path):
    path = tmp_path / "obj"
    path.write_bytes(bytes(range(256)) * 10)
    reader = LocalFileReader(str(path))
    assert reader.read(10, 5) == bytes(range(10, 15))
    assert reader.read(2550, 100) == bytes(range(246, 256))
    assert reader.read(5000, 10) == b""
    reader.close()


def test_local_file_reader_answers_cached_bytes_from_its_mapping_without_waiting(tmp_path):
    path = tmp_path / "obj"
    data = os.urandom(3 * LocalFileReader.MAP_MIN_BYTES + 100)
    path.write_bytes(data)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache
    reader = LocalFileReader(str(path))
    buffer = bytearray(2 * 1024 * 1024)
    assert reader.read_nowait(1000, 1024 * 1024, buffer) is None  # would wait for the disk
    assert reader.read(0, len(data)) == data  # a thread's read brings the pages in
    view = reader.read_nowait(1000, 1024 * 1024, buffer)
    assert bytes(view) == data[1000:1000 + 1024 * 1024]
    assert bytes(reader.read_nowait(len(data) - 100, 100, buffer)) == data[-100:]
    reader.close()  # while a reply still holds a view: it stays readable
    assert bytes(view[:10]) == data[1000:1010]
    view.release()


def test_local_file_reader_copies_small_files(tmp_path):
    path = tmp_path / "small"
    path.write_bytes(b"0123456789")
    reader = LocalFileReader(str(path))
    buffer = bytearray(64)
    assert bytes(reader.read_nowait(2, 5, buffer)) == b"23456"
    reader.close()


def test_sequential_reads_prefetch_a_growing_window(store):
    data = os.urandom(20 * BLOCK)
    source = CountingSource(data)
    cache = BlockCache(store, block_size=BLOCK, max_window_blocks=8)
    reader = cache.open("obj-1", len(data), source)
    out = b""
    for offset in range(0, len(data), 16 * 1024):
        out += reader.read(offset, 16 * 1024)
    assert out == data
    wait_idle(cache)
    fetched = sorted(source.ranges)
    assert fetched == sorted(set(fetched))  # no block fetched twice
    assert len(fetched) == 20 and all(length == BLOCK for _, length in fetched)
    cache.close()


def test_random_reads_fetch_only_the_blocks_they_touch(store):
    data = os.urandom(40 * BLOCK)
    source = CountingSource(data)
    cache = BlockCache(store, block_size=BLOCK)
    reader = cache.open("obj-2", len(data), source)
    for block in (30, 3, 17):
        offset = block * BLOCK + 100
        assert reader.read(offset, 1000) == data[offset:offset + 1000]
    wait_idle(cache)
    assert sorted(source.ranges) == [(3 * BLOCK, BLOCK), (17 * BLOCK, BLOCK), (30 * BLOCK, BLOCK)]
    # a read spanning two blocks
    assert reader.read(5 * BLOCK - 10, 20) == data[5 * BLOCK - 10:5 * BLOCK + 10]
    # cached blocks are not fetched again, and another reader of the same object shares them
    source.ranges.clear()
    again = cache.open("obj-2", len(data), source)
    assert again.read(30 * BLOCK, 10) == data[30 * BLOCK:30 * BLOCK + 10]
    assert source.ranges == []
    cache.close()


def test_short_last_block_and_reads_past_the_end(store):
    data = os.urandom(2 * BLOCK + 123)
    cache = BlockCache(store, block_size=BLOCK)
    reader = cache.open("obj-3", len(data), CountingSource(data))
    assert reader.read(2 * BLOCK, BLOCK) == data[2 * BLOCK:]
    assert reader.read(len(data), 10) == b""
    cache.close()


def test_concurrent_readers_share_in_flight_fetches(store):
    data = os.urandom(4 * BLOCK)
    source = CountingSource(data, delay=0.05)
    cache = BlockCache(store, block_size=BLOCK)
    reader = cache.open("obj-4", len(data), source)
    results = []
    threads = [threading.Thread(target=lambda: results.append(reader.read(0, 4 * BLOCK))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results == [data] * 4
    wait_idle(cache)
    assert len(source.ranges) <= 4 + 4  # at worst once by a reader and once by the prefetcher
    cache.close()


def test_identity_change_means_new_blocks(store):
    cache = BlockCache(store, block_size=BLOCK)
    old = cache.open("addr#v1", 10, CountingSource(b"0123456789"))
    new = cache.open("addr#v2", 10, CountingSource(b"abcdefghij"))
    assert old.read(0, 10) == b"0123456789"
    assert new.read(0, 10) == b"abcdefghij"
    cache.close()
