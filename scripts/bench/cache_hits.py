"""Benchmark: hit latency of the caches (lakefuse.cache).

Measures ``DiskCache.get`` on a file this process has already verified (the FUSE read hot
path) and ``RamCache.get_or_load`` on a hit, each as ops/s, median of 5 runs.  For scale it
also times a first use by a new process view (hash of a 4 KiB file) and a miss that inserts and
evicts (fetch of 4 KiB, hash, index transaction, rename, one eviction).

    python scripts/bench/cache_hits.py [--ops 200000] [--dir DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from lakefuse.cache import DiskCache, RamCache


def _ops_per_second(operation, ops: int, runs: int = 5) -> float:
    rates = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(ops):
            operation()
        rates.append(ops / (time.perf_counter() - start))
    return statistics.median(rates)


def bench_disk_hits(directory: str, ops: int, files: int = 64) -> tuple[float, float]:
    """(ops/s cycling over ``files`` verified files, ops/s on one file)."""
    cache = DiskCache(directory, max_bytes=64 * 1024 * 1024, name="bench")
    payload = b"x" * 4096

    def fetch(tmp_path: str) -> None:
        with open(tmp_path, "wb") as f:
            f.write(payload)

    names = [f"{i:064x}" for i in range(files)]
    for name in names:
        cache.get(name, fetch)  # miss: fetched, hashed, verified for this process
    get = cache.get
    cycle = iter(names * (ops // files + 1) * 6)
    many = _ops_per_second(lambda: get(next(cycle), fetch), ops)
    one = _ops_per_second(lambda: get(names[0], fetch), ops)
    misses = cache.stats().misses
    cache.close()
    assert misses == files, "the benchmark must measure hits only"
    return many, one


def bench_disk_cold(directory: str, ops: int) -> tuple[float, float]:
    """(ops/s of first uses in a fresh instance, ops/s of misses that insert and evict)."""
    payload = b"y" * 4096

    def fetch(tmp_path: str) -> None:
        with open(tmp_path, "wb") as f:
            f.write(payload)

    names = [f"{i:064x}" for i in range(ops)]
    writer = DiskCache(directory, max_bytes=len(payload) * ops, name="bench-cold")
    for name in names:
        writer.get(name, fetch)
    writer.close()
    reader = DiskCache(directory, max_bytes=len(payload) * ops, name="bench-cold")
    start = time.perf_counter()
    for name in names:
        reader.get(name, fetch)
    first_use = ops / (time.perf_counter() - start)
    reader.close()
    small = DiskCache(directory, max_bytes=len(payload) * 16, name="bench-cold")
    start = time.perf_counter()
    for i in range(ops):
        small.get(f"{i + ops:064x}", fetch)
    misses = ops / (time.perf_counter() - start)
    small.close()
    return first_use, misses


def bench_ram_hits(ops: int, keys: int = 1024) -> float:
    cache = RamCache(max_bytes=64 * 1024 * 1024, name="bench")
    for key in range(keys):
        cache.put(key, b"v", 1)
    get_or_load = cache.get_or_load

    def loader():
        raise AssertionError("a hit must not call the loader")

    counter = iter(range(1 << 62))
    return _ops_per_second(lambda: get_or_load(next(counter) % keys, loader), ops)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=200_000, help="operations per run")
    parser.add_argument("--dir", help="cache directory (default: a fresh temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        many, one = bench_disk_hits(directory, args.ops)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        first_use, misses = bench_disk_cold(directory, max(200, args.ops // 100))
    ram = bench_ram_hits(args.ops)
    print(f"DiskCache.get hit (64 verified files)   : {many:12,.0f} ops/s  ({1e6 / many:.2f} us/op)")
    print(f"DiskCache.get hit (same file)           : {one:12,.0f} ops/s  ({1e6 / one:.2f} us/op)")
    print(f"RamCache.get_or_load hit                : {ram:12,.0f} ops/s  ({1e6 / ram:.2f} us/op)")
    print(f"DiskCache.get first use (verify 4 KiB)  : {first_use:12,.0f} ops/s  ({1e6 / first_use:.2f} us/op)")
    print(f"DiskCache.get miss (insert+evict 4 KiB) : {misses:12,.0f} ops/s  ({1e6 / misses:.2f} us/op)")


if __name__ == "__main__":
    main()
