"""RamCache: byte bound, LRU order, one loader per key under threads, counters, and the
probation segment that keeps what scans load away from the working set of point reads."""

from __future__ import annotations

import threading
import time

import pytest

from lakefuse.cache import CacheStats, RamCache
from lakefuse.errors import InvalidArgument


def loader_of(value, size, calls=None):
    def load():
        if calls is not None:
            calls.append(value)
        return value, size

    return load


def test_get_or_load_counts_and_loads_once():
    cache = RamCache(1000)
    calls = []
    assert cache.get_or_load("k", loader_of("v", 10, calls)) == "v"
    assert cache.get_or_load("k", loader_of("other", 10, calls)) == "v"
    assert cache.get_or_load("k", loader_of("other", 10, calls)) == "v"
    assert calls == ["v"]
    assert cache.stats() == CacheStats(hits=2, misses=1, evictions=0, corrupted=0, bytes=10, entries=1)


def test_byte_bound_and_evictions():
    cache = RamCache(100, scan_bytes=0)  # main alone: its LRU rules
    for i in range(20):
        cache.put(i, f"value-{i}", 15)
        assert cache.stats().bytes <= 100
    stats = cache.stats()
    assert stats.entries == 6 and stats.bytes == 90 and stats.evictions == 14
    assert [k for k in range(20) if cache.contains(k)] == list(range(14, 20))


def test_lru_order():
    cache = RamCache(30, scan_bytes=0)
    for key in "abc":
        cache.put(key, key.upper(), 10)
    assert cache.get("a") == "A"  # a becomes the most recently used
    cache.put("d", "D", 10)
    assert not cache.contains("b")
    assert all(cache.contains(k) for k in "acd")
    assert cache.get_or_load("c", loader_of("unused", 1)) == "C"
    cache.put("e", "E", 10)  # now a is the oldest
    assert not cache.contains("a") and all(cache.contains(k) for k in "cde")


def test_value_larger_than_the_bound_is_returned_not_kept():
    cache = RamCache(50)
    cache.put("small", 1, 10)
    calls = []
    assert cache.get_or_load("big", loader_of("BIG", 51, calls)) == "BIG"
    assert not cache.contains("big") and cache.contains("small")
    assert cache.get_or_load("big", loader_of("BIG", 51, calls)) == "BIG"
    assert len(calls) == 2
    cache.put("small", 2, 100)  # replacing with an oversized value drops the old one
    assert not cache.contains("small")


def test_replacing_a_key_updates_its_size():
    cache = RamCache(100)
    cache.put("k", "v1", 60)
    cache.put("k", "v2", 30)
    assert cache.get("k") == "v2"
    assert cache.stats().bytes == 30 and cache.stats().entries == 1


def test_different_keys_load_in_parallel():
    cache = RamCache(1 << 20)
    start = threading.Barrier(4)

    def slow(key):
        def load():
            time.sleep(0.2)
            return key, 1

        return load

    def worker(key):
        start.wait(timeout=10)
        cache.get_or_load(key, slow(key))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert time.monotonic() - began < 0.7  # not 4 x 0.2 s one after the other
    assert cache.stats().entries == 4


def test_failing_loader_propagates_and_a_waiter_retries():
    cache = RamCache(1000)
    attempts = []
    entered = threading.Event()

    def flaky():
        attempts.append(1)
        if len(attempts) == 1:
            entered.set()
            time.sleep(0.2)
            raise RuntimeError("backend down")
        return "ok", 2

    errors, values = [], []

    def first():
        try:
            cache.get_or_load("k", flaky)
        except RuntimeError as exc:
            errors.append(exc)

    def second():
        entered.wait(timeout=10)
        values.append(cache.get_or_load("k", flaky))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert len(errors) == 1 and values == ["ok"] and len(attempts) == 2
    assert cache.get_or_load("k", flaky) == "ok" and len(attempts) == 2


def test_get_put_invalidate_clear_counters():
    cache = RamCache(100, name="ranges")
    assert cache.name == "ranges"
    assert cache.get("missing") is None and cache.get("missing", 7) == 7
    cache.put("a", [1, 2], 8)
    assert cache.get("a") == [1, 2]
    cache.invalidate("a")
    cache.invalidate("never")
    assert not cache.contains("a")
    cache.put("b", "B", 1)
    cache.clear()
    assert cache.stats() == CacheStats(hits=1, misses=2, evictions=0, corrupted=0, bytes=0, entries=0)
    assert cache.stats().as_dict()["misses"] == 2


@pytest.mark.parametrize("bad", [-1, 1.5, "10", None, True])
def test_bad_sizes_are_rejected(bad):
    with pytest.raises(InvalidArgument):
        RamCache(bad)
    cache = RamCache(100)
    with pytest.raises(InvalidArgument):
        cache.put("k", "v", bad)
    with pytest.raises(InvalidArgument):
        cache.get_or_load("k", lambda: ("v", bad))
    assert not cache.contains("k")


def test_bad_loader_result_and_unhashable_keys():
    cache = RamCache(100)
    with pytest.raises(InvalidArgument):
        cache.get_or_load("k", lambda: "just a value")
    with pytest.raises(InvalidArgument):
        cache.get_or_load(["unhashable"], loader_of("v", 1))
    with pytest.raises(InvalidArgument):
        cache.put({}, "v", 1)
    assert cache.get_or_load("k", loader_of("v", 1)) == "v"  # the failed load left no lock behind


def test_zero_sized_cache_keeps_nothing():
    cache = RamCache(0)
    calls = []
    assert cache.get_or_load("k", loader_of("v", 0, calls)) == "v"
    assert cache.get_or_load("k", loader_of("v", 1, calls)) == "v"
    assert cache.stats().bytes == 0 and len(calls) == 1  # a 0-byte value does fit


# -- probation segment (what scans load) ---------------------------------------------------


def test_scans_may_fill_the_room_point_reads_leave_by_default_and_go_first():
    cache = RamCache(100)
    assert cache.scan_bytes == 100
    for key in "abcde":
        cache.get_or_load(key, loader_of(key.upper(), 10))
    for i in range(8):  # a walk: 80 bytes, of which 50 fit
        cache.get_or_load(("scan", i), loader_of(i, 10), scan=True)
    assert [i for i in range(8) if cache.contains(("scan", i))] == [3, 4, 5, 6, 7]
    assert cache.stats().bytes == 100
    cache.get_or_load("f", loader_of("F", 10))  # a point read makes room from the walk's entries
    assert not cache.contains(("scan", 3)) and all(cache.contains(k) for k in "abcdef")
    for bad in (-1, 1.5, True, 101):
        with pytest.raises(InvalidArgument):
            RamCache(100, scan_bytes=bad)
    assert RamCache(100, scan_bytes=0).scan_bytes == 0


def test_scan_loads_stay_in_probation_and_never_evict_main():
    cache = RamCache(100, scan_bytes=30)  # walks keep 30 bytes at most
    for key in "abcdefg":
        cache.get_or_load(key, loader_of(key.upper(), 10))  # point reads fill main
    assert cache.stats().bytes == 70
    calls = []
    for i in range(50):  # a scan passing 500 bytes
        assert cache.get_or_load(("scan", i), loader_of(i, 10, calls), scan=True) == i
        assert cache.stats().bytes <= 100
    assert len(calls) == 50
    assert all(cache.contains(k) for k in "abcdefg")  # the working set survived
    assert [i for i in range(50) if cache.contains(("scan", i))] == [47, 48, 49]
    stats = cache.stats()
    assert stats.bytes == 100 and stats.entries == 10 and stats.evictions == 47


def test_scan_hits_either_segment_without_moving_entries():
    cache = RamCache(100, scan_bytes=30)
    cache.put("main", "M", 10)
    cache.put("probation", "P", 10, scan=True)
    assert cache.get_or_load("main", loader_of("unused", 1), scan=True) == "M"
    assert cache.get_or_load("probation", loader_of("unused", 1), scan=True) == "P"
    assert cache.get("probation", scan=True) == "P"
    cache.put("main", "M2", 10, scan=True)  # a scan's put does not demote a main entry
    for i in range(3):  # fill probation: "probation" was not promoted, so it goes
        cache.put(i, i, 10, scan=True)
    assert not cache.contains("probation")
    assert cache.get("main") == "M2"


def test_point_read_promotes_a_probation_entry():
    cache = RamCache(100, scan_bytes=30)
    calls = []
    cache.get_or_load("hot", loader_of("H", 10, calls), scan=True)
    assert cache.get_or_load("hot", loader_of("H", 10, calls)) == "H"  # promoted to main
    for i in range(10):  # a scan flushing probation
        cache.get_or_load(i, loader_of(i, 10), scan=True)
    assert cache.contains("hot") and calls == ["H"]
    cache.put("warm", "W", 10, scan=True)
    assert cache.get("warm") == "W"  # get is a point read too
    for i in range(10, 20):
        cache.get_or_load(i, loader_of(i, 10), scan=True)
    assert cache.contains("warm")
    stats = cache.stats()
    assert stats.entries == 5 and stats.bytes == 50  # hot, warm and 3 scan entries


def test_point_reads_may_take_the_whole_budget_and_then_scans_keep_nothing():
    cache = RamCache(100, scan_bytes=30)
    for i in range(20):
        cache.get_or_load(i, loader_of(i, 10))
    for i in range(20, 40):
        cache.get_or_load(i, loader_of(i, 10), scan=True)
    stats = cache.stats()
    assert stats.bytes == 100 and stats.entries == 10
    assert [i for i in range(40) if cache.contains(i)] == list(range(10, 20))


def test_values_too_large_for_their_segment():
    cache = RamCache(100, scan_bytes=30)
    calls = []
    assert cache.get_or_load("k", loader_of("v", 31, calls), scan=True) == "v"  # > probation
    assert not cache.contains("k")
    assert cache.get_or_load("k", loader_of("v", 31, calls)) == "v"  # fits main
    assert cache.contains("k") and len(calls) == 2


def test_invalidate_contains_clear_cover_both_segments():
    cache = RamCache(100, scan_bytes=30)
    cache.put("m", "M", 10)
    cache.put("p", "P", 10, scan=True)
    assert cache.contains("m") and cache.contains("p")
    stats = cache.stats()
    assert stats.entries == 2 and stats.bytes == 20
    cache.invalidate("p")
    assert not cache.contains("p") and cache.contains("m")
    cache.put("p", "P", 10, scan=True)
    cache.invalidate("m")
    assert not cache.contains("m")
    cache.put("m", "M", 10)
    cache.clear()
    assert not cache.contains("m") and not cache.contains("p")
    assert cache.stats().bytes == 0 and cache.stats().entries == 0 and cache.stats().evictions == 0


def test_put_moves_a_key_between_segments_without_duplicating_it():
    cache = RamCache(100, scan_bytes=30)
    cache.put("k", "scan", 10, scan=True)
    cache.put("k", "point", 20)
    assert cache.stats().entries == 1 and cache.stats().bytes == 20
    for i in range(5):  # "k" is in main now: a scan flushing probation leaves it
        cache.put(i, i, 10, scan=True)
    assert cache.get("k") == "point"


@pytest.mark.parametrize("loaders", ["points", "scans", "scans and one point"])
def test_concurrent_loads_of_one_key_call_the_loader_once(loaders):
    cache = RamCache(10_000, scan_bytes=1000)
    calls = []
    start = threading.Barrier(10)

    def slow_loader():
        calls.append(1)
        time.sleep(0.1)
        return object(), 100

    results = []

    def worker(scan):
        start.wait(timeout=10)
        results.append(cache.get_or_load("key", slow_loader, scan=scan))

    scans = [loaders != "points"] * 10
    if loaders == "scans and one point":
        scans[-1] = False  # may lead (loads into main) or wait (then promotes): main either way
    threads = [threading.Thread(target=worker, args=(scan,)) for scan in scans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert len(calls) == 1
    assert len(results) == 10 and len({id(r) for r in results}) == 1
    assert cache.stats().misses == 1 and cache.stats().hits == 9
    for i in range(20):  # flush probation
        cache.put(i, i, 100, scan=True)
    assert cache.contains("key") == (loaders != "scans")
