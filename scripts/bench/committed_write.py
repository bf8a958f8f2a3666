#!/usr/bin/env python3
"""Benchmark: writing a committed metarange and re-writing it after a one-key change.

On a local storage namespace in a temporary directory:

1. write a metarange of ``--keys`` records (records pre-built, so only the committed layer is
   timed): records/s, ranges, bytes;
2. ``apply`` one changed key (and, separately, one inserted and one deleted key): how many new
   files land in ``_lakefs/`` (target: 1 range + the metarange) and the time, as a ratio to
   the first write.

Plain script, not a test:  python scripts/bench/committed_write.py --keys 200000
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from committed_lookups import make_records, realistic_keys  # noqa: E402


def count_files(block) -> set[str]:
    return {stat.key for stat in block.list("_lakefs/")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000, help="records in the metarange (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)

    from lakefuse.block.local import LocalBlockAdapter
    from lakefuse.cache import DiskCache, RamCache
    from lakefuse.config import CommittedConfig
    from lakefuse.graveler.committed import CommittedManager, entry_to_record, record_to_entry

    workdir = tempfile.mkdtemp(prefix="lakefuse-bench-write-")
    try:
        rng = random.Random(args.seed)
        started = time.perf_counter()
        keys = realistic_keys(args.keys)
        records = list(make_records(keys))
        print(f"built {len(records):,} records in {time.perf_counter() - started:.1f} s (not timed below)")

        block = LocalBlockAdapter(os.path.join(workdir, "namespace"))
        disk = DiskCache(os.path.join(workdir, "cache"), 8 * 1024**3, "bench")
        manager = CommittedManager(block, disk, RamCache(4 * 1024**3, "bench"), CommittedConfig())

        started = time.perf_counter()
        base = manager.write_metarange(records)
        first = time.perf_counter() - started
        files = count_files(block)
        stored = sum(stat.size for stat in block.list("_lakefs/"))
        print(f"first write: {first:.2f} s, {len(records) / first:,.0f} records/s; "
              f"{len(manager.ranges(base))} ranges + metarange = {len(files)} files, {stored / 2**20:.1f} MiB")

        started = time.perf_counter()
        again = manager.write_metarange(records)
        print(f"same records again: {time.perf_counter() - started:.2f} s, same ID: {again == base}, "
              f"new files: {len(count_files(block) - files)}")

        victim = records[rng.randrange(len(records))]
        entry = record_to_entry(victim)
        changed = entry_to_record(victim.key, dataclasses.replace(entry, size=entry.size + 1))
        inserted_key = victim.key + b".new"
        scenarios = [
            ("change one key", [(victim.key, changed)]),
            ("insert one key", [(inserted_key, entry_to_record(inserted_key, entry))]),
            ("delete one key", [(victim.key, None)]),
        ]
        # a cold RAM cache, like a commit in a fresh process: the base metarange and the one
        # touched range come from the disk cache
        for label, changes in scenarios:
            fresh = CommittedManager(block, disk, RamCache(4 * 1024**3, "apply"), manager.config)
            before = count_files(block)
            started = time.perf_counter()
            result = fresh.apply(base, changes)
            elapsed = time.perf_counter() - started
            new = count_files(block) - before
            ranges_new = len(new) - (1 if "_lakefs/" + result in new else 0)
            print(f"{label}: {elapsed:.3f} s ({elapsed / first:.4f} of the first write), new files: {len(new)} "
                  f"({ranges_new} range{'s' if ranges_new != 1 else ''} + metarange; target 1 + 1)")
            fresh.close()
        manager.close()
        disk.close()
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
