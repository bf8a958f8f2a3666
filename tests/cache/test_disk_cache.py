"""DiskCache in one process: hits and misses, LRU eviction and the byte bound, verification and
repair of damaged entries, persisted counters, bad input."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from lakefuse.cache import CacheStats, DiskCache, check_cache_name, read_disk_cache_stats
from lakefuse.errors import InvalidArgument, NotFound, StorageError


class Source:
    """A fake object store: fetch functions that count their calls."""

    def __init__(self):
        self.contents: dict[str, bytes] = {}
        self.calls: dict[str, int] = {}

    def add(self, name: str, data: bytes) -> str:
        self.contents[name] = data
        return name

    def fetch(self, name: str):
        def fetch(tmp_path: str) -> None:
            self.calls[name] = self.calls.get(name, 0) + 1
            Path(tmp_path).write_bytes(self.contents[name])

        return fetch


@pytest.fixture
def source() -> Source:
    return Source()


def make_cache(tmp_path: Path, max_bytes: int = 10_000, **kwargs) -> DiskCache:
    return DiskCache(tmp_path / "cache", max_bytes, **kwargs)


def read(cache: DiskCache, source: Source, name: str) -> bytes:
    return Path(cache.get(name, source.fetch(name))).read_bytes()


def files_on_disk(directory: Path) -> dict[str, int]:
    """name -> size of the cached files (the shard directories only)."""
    return {
        p.name: p.stat().st_size
        for shard in directory.iterdir()
        if shard.is_dir() and len(shard.name) <= 2
        for p in shard.iterdir()
    }


def test_miss_then_hits_fetch_once_and_count(tmp_path, source):
    cache = make_cache(tmp_path)
    name = source.add("ab" * 32, b"hello world")
    assert read(cache, source, name) == b"hello world"
    assert read(cache, source, name) == b"hello world"
    assert read(cache, source, name) == b"hello world"
    assert source.calls == {name: 1}
    assert cache.stats() == CacheStats(hits=2, misses=1, evictions=0, corrupted=0, bytes=11, entries=1)
    assert cache.stats().as_dict() == {"hits": 2, "misses": 1, "evictions": 0, "corrupted": 0, "bytes": 11, "entries": 1}
    assert cache.contains(name) and not cache.contains("cd" * 32)


def test_layout_is_sharded_and_returns_absolute_paths(tmp_path, source):
    cache = make_cache(tmp_path)
    name = source.add("0f" + "e" * 62, b"x")
    path = cache.get(name, source.fetch(name))
    assert Path(path) == tmp_path / "cache" / "0f" / name
    short = source.add("a", b"y")
    assert Path(cache.get(short, source.fetch(short))) == tmp_path / "cache" / "a" / "a"


def test_lru_eviction_order(tmp_path, source):
    cache = make_cache(tmp_path, max_bytes=300, touch_interval=0)
    for name in "abcd":
        source.add(name * 8, name.encode() * 100)
    for name in ("aaaaaaaa", "bbbbbbbb", "cccccccc"):
        read(cache, source, name)
    assert read(cache, source, "aaaaaaaa") == b"a" * 100  # a is now the most recently used
    read(cache, source, "dddddddd")  # over the bound: the LRU entry, b, goes
    assert set(files_on_disk(tmp_path / "cache")) == {"aaaaaaaa", "cccccccc", "dddddddd"}
    assert cache.stats().evictions == 1
    read(cache, source, "bbbbbbbb")  # and now c is the oldest
    assert set(files_on_disk(tmp_path / "cache")) == {"aaaaaaaa", "dddddddd", "bbbbbbbb"}
    assert cache.stats().evictions == 2 and cache.stats().bytes == 300


def test_recency_is_shared_between_instances(tmp_path, source):
    first = make_cache(tmp_path, max_bytes=200, touch_interval=0)
    second = make_cache(tmp_path, max_bytes=200, touch_interval=0)
    for name in ("a1", "b1", "c1"):
        source.add(name, b"." * 100)
    read(first, source, "a1")
    read(first, source, "b1")
    assert read(second, source, "a1") == b"." * 100  # hit through the other instance
    read(first, source, "c1")
    assert set(files_on_disk(tmp_path / "cache")) == {"a1", "c1"}
    assert source.calls == {"a1": 1, "b1": 1, "c1": 1}


def test_byte_bound_holds_after_every_insert(tmp_path, source):
    cache = make_cache(tmp_path, max_bytes=5_000)
    for i in range(60):
        name = source.add(f"{i:04x}", bytes([i]) * (100 + 37 * i % 900))
        read(cache, source, name)
        on_disk = files_on_disk(tmp_path / "cache")
        assert sum(on_disk.values()) <= 5_000
        assert cache.stats().bytes == sum(on_disk.values())
        assert cache.stats().entries == len(on_disk)
        assert name in on_disk


def test_never_evicts_the_file_just_added(tmp_path, source):
    cache = make_cache(tmp_path, max_bytes=100)
    source.add("small1", b"s" * 60)
    source.add("huge", b"h" * 250)
    read(cache, source, "small1")
    assert read(cache, source, "huge") == b"h" * 250
    assert files_on_disk(tmp_path / "cache") == {"huge": 250}
    assert cache.stats().bytes == 250 and cache.stats().evictions == 1
    source.add("small2", b"t" * 10)
    read(cache, source, "small2")  # the next insert brings the total back under the bound
    assert files_on_disk(tmp_path / "cache") == {"small2": 10}


def test_hits_touch_mtime_at_most_once_per_interval(tmp_path, source):
    cache = make_cache(tmp_path, touch_interval=60)
    name = source.add("aa", b"data")
    path = cache.get(name, source.fetch(name))
    stamped = os.stat(path).st_mtime_ns
    for _ in range(5):
        cache.get(name, source.fetch(name))
    assert os.stat(path).st_mtime_ns == stamped  # fresh: hits do not touch it
    old = time.time_ns() - 3600 * 10**9
    os.utime(path, ns=(old, old))
    cache.get(name, source.fetch(name))
    assert os.stat(path).st_mtime_ns > time.time_ns() - 60 * 10**9  # stale: one hit refreshes it


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "delete", "grow"])
def test_damaged_file_is_detected_by_a_new_process_view_and_refetched(tmp_path, source, damage):
    name = source.add("c0ffee", bytes(range(256)) * 20)
    path = Path(make_cache(tmp_path).get(name, source.fetch(name)))
    if damage == "flip_byte":
        data = bytearray(path.read_bytes())
        data[1234] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        os.truncate(path, 100)
    elif damage == "grow":
        with open(path, "ab") as f:
            f.write(b"!")
    else:
        path.unlink()
    fresh = make_cache(tmp_path)  # a new instance = what another process sees
    assert read(fresh, source, name) == bytes(range(256)) * 20
    assert source.calls[name] == 2
    assert fresh.stats().corrupted == 1 and fresh.stats().misses == 1
    assert read(fresh, source, name) == bytes(range(256)) * 20
    assert fresh.stats().hits == 1 and fresh.stats().entries == 1
    assert read_disk_cache_stats(tmp_path / "cache")["corrupted"] == 1


def test_verified_file_deleted_or_truncated_under_the_same_instance(tmp_path, source):
    cache = make_cache(tmp_path)
    name = source.add("beef", b"z" * 500)
    path = Path(cache.get(name, source.fetch(name)))
    os.truncate(path, 10)
    assert read(cache, source, name) == b"z" * 500
    Path(cache.get(name, source.fetch(name))).unlink()
    assert read(cache, source, name) == b"z" * 500
    assert cache.stats().corrupted == 2 and source.calls[name] == 3


def test_first_use_verifies_once_per_process(tmp_path, source, monkeypatch):
    from lakefuse.cache import disk

    name = source.add("f00d", b"q" * 3000)
    make_cache(tmp_path).get(name, source.fetch(name))
    hashed = []
    real = disk.sha256_of_file
    monkeypatch.setattr(disk, "sha256_of_file", lambda f: hashed.append(1) or real(f))
    fresh = make_cache(tmp_path)
    for _ in range(10):
        assert read(fresh, source, name) == b"q" * 3000
    assert len(hashed) == 1 and source.calls[name] == 1


def test_counters_are_persisted_and_merged_across_instances(tmp_path, source):
    directory = tmp_path / "cache"
    assert read_disk_cache_stats(directory) == {
        "hits": 0, "misses": 0, "evictions": 0, "corrupted": 0, "bytes": 0, "entries": 0,
        "name": None, "max_bytes": None, "updated_at": None,
    }
    for name in ("n1", "n2", "n3"):
        source.add(name, b"v" * 100)
    first = DiskCache(directory, 250, name="ranges")
    read(first, source, "n1")
    read(first, source, "n1")
    read(first, source, "n2")
    first.close()
    second = DiskCache(directory, 250, name="ranges")
    read(second, source, "n1")
    read(second, source, "n3")  # evicts n2 (n1 was used more recently)... or n1: either way one
    second.close()
    persisted = read_disk_cache_stats(directory)
    assert {k: persisted[k] for k in ("hits", "misses", "evictions", "corrupted", "bytes", "entries")} == {
        "hits": 2, "misses": 3, "evictions": 1, "corrupted": 0, "bytes": 200, "entries": 2,
    }
    assert persisted["name"] == "ranges" and persisted["max_bytes"] == 250
    assert abs(persisted["updated_at"] - time.time()) < 60


def test_hits_are_persisted_without_close_after_the_stats_interval(tmp_path, source):
    cache = make_cache(tmp_path, stats_interval=0)
    name = source.add("aa", b"1")
    read(cache, source, name)
    read(cache, source, name)
    read(cache, source, name)
    assert read_disk_cache_stats(tmp_path / "cache")["hits"] >= 1


def test_stats_of_a_damaged_index_read_as_zeros(tmp_path, source):
    cache = make_cache(tmp_path)
    read(cache, source, source.add("aa", b"1"))
    cache.close()
    assert read_disk_cache_stats(tmp_path / "cache")["misses"] == 1
    (tmp_path / "cache" / "index.sqlite3").write_bytes(b"garbage" * 1000)
    assert read_disk_cache_stats(tmp_path / "cache")["misses"] == 0
    assert read_disk_cache_stats(tmp_path / "no-such-dir")["entries"] == 0
    assert not (tmp_path / "no-such-dir").exists()


@pytest.mark.parametrize(
    "bad", ["", ".", "..", "..x", ".hidden", "a/b", "/abs", "a\\b", "a\0b", "x" * 256, "caf\u00e9", "a b", 7, None, b"ab"]
)
def test_unsafe_names_are_rejected(tmp_path, source, bad):
    cache = make_cache(tmp_path)
    with pytest.raises(InvalidArgument):
        cache.get(bad, source.fetch("unused"))
    with pytest.raises(InvalidArgument):
        cache.put_file(bad, __file__)
    with pytest.raises(InvalidArgument):
        cache.contains(bad)
    with pytest.raises(InvalidArgument):
        cache.invalidate(bad)
    assert source.calls == {}


def test_valid_names(tmp_path):
    for good in ("a" * 64, "0123abcdef", "range-0001.sst", "A_b-c.d", "x" * 255, "-x"):
        assert check_cache_name(good) == good


@pytest.mark.parametrize("bad", [-1, 1.5, "10", True, None])
def test_bad_max_bytes_is_rejected(tmp_path, bad):
    with pytest.raises(InvalidArgument):
        DiskCache(tmp_path / "cache", bad)


def test_fetch_errors_propagate_and_cache_nothing(tmp_path):
    cache = make_cache(tmp_path)

    def failing(tmp_path_: str) -> None:
        Path(tmp_path_).write_bytes(b"partial")
        raise NotFound("no such object")

    with pytest.raises(NotFound):
        cache.get("aa", failing)
    with pytest.raises(StorageError):
        cache.get("aa", lambda tmp: None)  # fetch that writes nothing
    assert not cache.contains("aa")
    assert list((tmp_path / "cache" / "tmp").iterdir()) == []
    assert cache.stats().entries == 0 and cache.stats().misses == 2


def test_put_file_copies_or_moves_and_replaces(tmp_path, source):
    cache = make_cache(tmp_path)
    src = tmp_path / "src.bin"
    src.write_bytes(b"first")
    path = cache.put_file("cafe", src)
    assert Path(path).read_bytes() == b"first" and src.exists()
    src.write_bytes(b"second!")
    assert Path(cache.put_file("cafe", str(src), move=True)).read_bytes() == b"second!"
    assert not src.exists()
    assert cache.get("cafe", source.fetch("cafe")) == path and source.calls == {}
    assert cache.stats() == CacheStats(hits=1, misses=0, evictions=0, corrupted=0, bytes=7, entries=1)
    with pytest.raises(NotFound):
        cache.put_file("cafe", tmp_path / "missing")


def test_invalidate_and_clear(tmp_path, source):
    cache = make_cache(tmp_path)
    for name in ("a1", "b1", "c1"):
        read(cache, source, source.add(name, b"x" * 10))
    cache.invalidate("a1")
    cache.invalidate("never-cached")
    assert not cache.contains("a1") and cache.contains("b1")
    assert read(cache, source, "a1") == b"x" * 10 and source.calls["a1"] == 2
    cache.clear()
    assert cache.stats().bytes == 0 and cache.stats().entries == 0
    assert files_on_disk(tmp_path / "cache") == {}
    assert read(cache, source, "b1") == b"x" * 10 and source.calls["b1"] == 2
    assert read_disk_cache_stats(tmp_path / "cache")["entries"] == 1


def test_open_returns_a_handle_that_survives_eviction(tmp_path, source):
    cache = make_cache(tmp_path, max_bytes=100)
    source.add("one", b"1" * 100)
    source.add("two", b"2" * 100)
    with cache.open("one", source.fetch("one")) as f:
        read(cache, source, "two")  # evicts "one" while it is open
        assert not cache.contains("one")
        assert f.read() == b"1" * 100


def test_index_deleted_or_damaged_is_rebuilt(tmp_path, source):
    directory = tmp_path / "cache"
    cache = DiskCache(directory, 10_000)
    read(cache, source, source.add("aa11", b"a" * 50))
    read(cache, source, source.add("bb22", b"b" * 50))
    cache.close()
    (directory / "index.sqlite3").write_bytes(b"this is not a database" * 100)
    fresh = DiskCache(directory, 10_000)
    # the checksums are gone, so the files cannot be trusted: dropped and fetched again
    assert files_on_disk(directory) == {}
    assert read(fresh, source, "aa11") == b"a" * 50 and source.calls["aa11"] == 2
    fresh.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{directory / 'index.sqlite3'}{suffix}").unlink(missing_ok=True)
    again = DiskCache(directory, 10_000)
    assert again.stats().entries == 0 and files_on_disk(directory) == {}
    assert read(again, source, "aa11") == b"a" * 50


def test_index_replaced_while_an_instance_is_open(tmp_path, source):
    directory = tmp_path / "cache"
    first = DiskCache(directory, 10_000)
    second = DiskCache(directory, 10_000)
    read(first, source, source.add("aa11", b"a" * 50))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{directory / 'index.sqlite3'}{suffix}").unlink(missing_ok=True)
    assert read(second, source, "aa11") == b"a" * 50  # reopens a fresh index, refetches
    assert read(first, source, source.add("bb22", b"b" * 50)) == b"b" * 50
    assert first.stats().entries == 2 == second.stats().entries


def test_repair_removes_orphans_and_forgets_missing_files(tmp_path, source):
    directory = tmp_path / "cache"
    cache = DiskCache(directory, 10_000)
    read(cache, source, source.add("aa11", b"a" * 50))
    read(cache, source, source.add("bb22", b"b" * 70))
    (directory / "zz").mkdir()
    (directory / "zz" / "zz-orphan").write_bytes(b"o" * 1000)
    (directory / "bb" / "bb22").unlink()
    cache.repair()
    assert files_on_disk(directory) == {"aa11": 50}
    assert cache.stats().bytes == 50 and cache.stats().entries == 1


def test_eviction_scan_cleans_orphans_too(tmp_path, source):
    directory = tmp_path / "cache"
    cache = DiskCache(directory, 120)
    (directory / "zz").mkdir(parents=True)
    (directory / "zz" / "zz-orphan").write_bytes(b"o" * 1000)
    for name in ("aa11", "bb22", "cc33"):
        read(cache, source, source.add(name, b"x" * 50))
    assert files_on_disk(directory) == {"bb22": 50, "cc33": 50}


def test_stale_temporary_files_are_cleaned_at_open(tmp_path):
    directory = tmp_path / "cache"
    DiskCache(directory, 100).close()
    stale = directory / "tmp" / "12345.dead.tmp"
    fresh = directory / "tmp" / "12345.live.tmp"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    DiskCache(directory, 100)
    assert not stale.exists() and fresh.exists()


def test_concurrent_threads_fetch_a_missing_name_once(tmp_path):
    cache = make_cache(tmp_path)
    calls = []
    start = threading.Barrier(8)

    def slow_fetch(tmp: str) -> None:
        calls.append(1)
        time.sleep(0.1)
        Path(tmp).write_bytes(b"payload")

    results, errors = [], []

    def worker() -> None:
        try:
            start.wait(timeout=10)
            results.append(Path(cache.get("abcd", slow_fetch)).read_bytes())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not errors and results == [b"payload"] * 8
    assert len(calls) == 1
    assert cache.stats().misses == 1 and cache.stats().hits == 7


def test_threads_hammering_one_instance(tmp_path):
    cache = make_cache(tmp_path, max_bytes=3_000, touch_interval=0)
    names = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(12)]

    def content(name: str) -> bytes:
        return name.encode() * (1 + int(name[:2], 16) % 8)

    errors = []

    def worker(seed: int) -> None:
        import random

        rng = random.Random(seed)
        for _ in range(150):
            name = rng.choice(names)
            try:
                with cache.open(name, lambda tmp, n=name: Path(tmp).write_bytes(content(n))) as f:
                    if f.read() != content(name):
                        errors.append(f"bad content {name}")
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert sum(files_on_disk(tmp_path / "cache").values()) <= 3_000
    assert cache.stats().bytes == sum(files_on_disk(tmp_path / "cache").values())


def test_index_is_wal_sqlite(tmp_path, source):
    cache = make_cache(tmp_path)
    read(cache, source, source.add("aa", b"1"))
    with sqlite3.connect(tmp_path / "cache" / "index.sqlite3") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        size, digest = conn.execute("SELECT size, sha256 FROM entries WHERE name = 'aa'").fetchone()
    assert size == 1 and bytes(digest) == hashlib.sha256(b"1").digest()


def test_closed_cache_refuses_work(tmp_path, source):
    cache = make_cache(tmp_path)
    cache.close()
    cache.close()
    with pytest.raises(InvalidArgument):
        read(cache, source, source.add("aa", b"1"))
