#!/usr/bin/env python3
"""Benchmark: random point lookups in a committed metarange (lakefuse.graveler.committed).

Builds a metarange of ``--keys`` realistic object keys (several tables, date partitions,
part files) on a local storage namespace in a temporary directory, then measures:

1. warm lookups/s in one process (everything decoded in the RAM cache): median of
   ``--runs`` runs of ``--seconds`` each over a pre-generated random key list, and its ratio
   to the 500,000/s target;
2. cold lookups/s: a fresh RAM cache, files already in the disk cache;
3. fully cold lookups/s: an empty disk cache, files read from local storage;
   both over ``--cold-lookups`` random keys (one lookup each).

Plain script, not a test:  python scripts/bench/committed_lookups.py --keys 200000
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

TARGET = 500_000


def realistic_keys(count: int, tables: int = 10, parts_per_date: int = 400) -> list[bytes]:
    """Sorted keys like ``tables/events/date=2024-01-01/part-00042.parquet``."""
    names = ["clicks", "events", "impressions", "orders", "payments", "sessions", "shipments", "users", "views", "visits"]
    per_table = -(-count // tables)
    keys = []
    for t in range(tables):
        name = names[t % len(names)] + ("" if t < len(names) else str(t))
        for i in range(per_table):
            if len(keys) == count:
                break
            day = i // parts_per_date
            date = f"{2020 + day // 360:04d}-{day // 30 % 12 + 1:02d}-{day % 30 + 1:02d}"
            keys.append(f"tables/{name}/date={date}/part-{i % parts_per_date:05d}.parquet".encode())
    keys.sort()
    return keys


def make_records(keys):
    from lakefuse.graveler.committed import entry_to_record
    from lakefuse.graveler.model import Entry

    for n, key in enumerate(keys):
        checksum = "%032x" % (hash(key) & (2**128 - 1))
        yield entry_to_record(
            key,
            Entry(
                physical_address="data/g%08x/%s" % (n // 4096, checksum),
                size=1_000_000 + n % 100_000,
                mtime=1_700_000_000 + n,
                checksum=checksum,
                content_type="application/octet-stream",
            ),
        )


def build(workdir: str, keys: list[bytes], ram_bytes: int):
    from lakefuse.block.local import LocalBlockAdapter
    from lakefuse.cache import DiskCache, RamCache
    from lakefuse.config import CommittedConfig
    from lakefuse.graveler.committed import CommittedManager

    block = LocalBlockAdapter(os.path.join(workdir, "namespace"))
    disk = DiskCache(os.path.join(workdir, "cache"), 8 * 1024**3, "bench")
    manager = CommittedManager(block, disk, RamCache(ram_bytes, "bench"), CommittedConfig())
    started = time.perf_counter()
    metarange = manager.write_metarange(make_records(keys))
    elapsed = time.perf_counter() - started
    return block, disk, manager, metarange, elapsed


def lookups_per_second(get, metarange, sample: list[bytes], seconds: float) -> float:
    """Look up keys of ``sample`` in order, 10,000 at a time, until ``seconds`` have passed."""
    chunks = [sample[i : i + 10_000] for i in range(0, len(sample), 10_000)]
    done = 0
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for chunk in chunks:
            for key in chunk:
                get(metarange, key)
            done += len(chunk)
            now = time.perf_counter()
            if now >= deadline:
                return done / (now - started)


def timed_lookups(get, metarange, sample: list[bytes]) -> float:
    started = time.perf_counter()
    for key in sample:
        if get(metarange, key) is None:
            raise SystemExit(f"lookup of {key!r} found nothing")
    return len(sample) / (time.perf_counter() - started)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys in the metarange (default 1,000,000)")
    parser.add_argument("--runs", type=int, default=5, help="warm runs (median reported)")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one warm run")
    parser.add_argument("--cold-lookups", type=int, default=20_000, help="random lookups of the cold measurements")
    parser.add_argument("--ram-bytes", type=int, default=4 * 1024**3, help="RAM cache bound")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)

    from lakefuse.cache import DiskCache, RamCache
    from lakefuse.graveler.committed import CommittedManager

    workdir = tempfile.mkdtemp(prefix="lakefuse-bench-lookups-")
    try:
        rng = random.Random(args.seed)
        keys = realistic_keys(args.keys)
        print(f"keys: {len(keys):,}  e.g. {keys[len(keys) // 2].decode()}")
        block, disk, manager, metarange, write_s = build(workdir, keys, args.ram_bytes)
        ranges = manager.ranges(metarange)
        stored = sum(st.size for st in block.list("_lakefs/"))
        print(f"built metarange {metarange[:12]}: {len(ranges)} ranges, {stored / 2**20:.1f} MiB in _lakefs/, "
              f"{write_s:.1f} s ({len(keys) / write_s:,.0f} records/s incl. record encoding)")

        sample = [rng.choice(keys) for _ in range(200_000)]
        load_started = time.perf_counter()
        for info in ranges:  # warm up: decode every range into the RAM cache
            manager.get(metarange, info.min_key)
        print(f"warm-up (decode all ranges from disk cache): {time.perf_counter() - load_started:.2f} s")
        for key in sample:  # also memoize the records the runs will touch
            manager.get(metarange, key)
        runs = [lookups_per_second(manager.get, metarange, sample, args.seconds) for _ in range(args.runs)]
        median = statistics.median(runs)
        print(f"warm random lookups: median {median:,.0f}/s over {args.runs} runs "
              f"(min {min(runs):,.0f}, max {max(runs):,.0f}); ratio to 500,000/s target: {median / TARGET:.2f}")
        print(f"  RAM cache: {manager._ram.stats()}")

        cold_sample = [rng.choice(keys) for _ in range(args.cold_lookups)]
        cold_manager = CommittedManager(block, disk, RamCache(args.ram_bytes, "cold"), manager.config)
        rate = timed_lookups(cold_manager.get, metarange, cold_sample)
        print(f"cold lookups (fresh RAM cache, files in disk cache): {rate:,.0f}/s over {len(cold_sample):,} keys")

        empty_disk = DiskCache(os.path.join(workdir, "cache-empty"), 8 * 1024**3, "fully-cold")
        fully_cold = CommittedManager(block, empty_disk, RamCache(args.ram_bytes, "fully-cold"), manager.config)
        rate = timed_lookups(fully_cold.get, metarange, cold_sample)
        print(f"fully cold lookups (empty disk cache, local storage): {rate:,.0f}/s over {len(cold_sample):,} keys")
        for m in (manager, cold_manager, fully_cold):
            m.close()
        disk.close()
        empty_disk.close()
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
