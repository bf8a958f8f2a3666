#!/usr/bin/env python3
"""Benchmark: version-control operations of the Graveler core at repository scale.

On a local storage namespace in a temporary directory (refs and staging in the memory twins by
default, ``--db sqlite`` for a SQLite file), big commits are populated directly with
``CommittedManager.write_metarange`` (no million staged writes), then:

1. commit of ONE changed object on a branch of ``--big`` objects vs one of ``--small``
   objects: median seconds of ``--runs`` commits each, their ratio (target <= 2) and the
   Graveler files written per commit (target: 1 range + 1 metarange);
2. diff of two commits differing in 10 of ``--big`` objects: seconds with warm caches and with
   a fresh RAM cache (files on the disk cache) (target < 0.2 s);
3. merge of a branch holding 1,000 changes into a ``--big``-object main that moved on by 10
   changes since the branch point: seconds and files written.

``--scale`` multiplies ``--big`` (and the 1,000 merge changes) to run small while developing:
    python scripts/bench/vc_ops.py --scale 0.02
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

COMMIT_RATIO_TARGET = 2.0
DIFF_TARGET_S = 0.2


def realistic_keys(count: int) -> list[bytes]:
    """Sorted keys like ``tables/events/date=2021-03-04/part-00042.parquet``."""
    names = ["clicks", "events", "impressions", "orders", "payments", "sessions", "shipments", "users", "views", "visits"]
    per_table = -(-count // len(names))
    keys = []
    for name in names:
        for i in range(per_table):
            if len(keys) == count:
                break
            day = i // 400
            date = f"{2020 + day // 360:04d}-{day // 30 % 12 + 1:02d}-{day % 30 + 1:02d}"
            keys.append(f"tables/{name}/date={date}/part-{i % 400:05d}.parquet".encode())
    keys.sort()
    return keys


def make_record(key: bytes, version: int = 0):
    from lakefuse.graveler.committed.encoding import entry_to_record
    from lakefuse.graveler.model import Entry

    checksum = hashlib.md5(key + b"#%d" % version).hexdigest()
    return entry_to_record(
        key,
        Entry(physical_address="data/" + checksum, size=1_000_000 + len(key) + version, mtime=1_700_000_000 + version,
              checksum=checksum),
    )


class Setup:
    """A Graveler over one local namespace with realistic caches."""

    def __init__(self, workdir: str, db: str):
        from lakefuse.block.local import LocalBlockAdapter
        from lakefuse.cache import DiskCache, RamCache
        from lakefuse.config import CommittedConfig
        from lakefuse.graveler.committed import CommittedManager
        from lakefuse.graveler.graveler import Graveler

        self.workdir = workdir
        self.block = LocalBlockAdapter(os.path.join(workdir, "namespace"))
        self.disk = DiskCache(os.path.join(workdir, "cache"), 16 * 1024**3, "bench")
        self.config = CommittedConfig()
        self.manager = CommittedManager(self.block, self.disk, RamCache(4 * 1024**3, "bench"), self.config)
        if db == "sqlite":
            from lakefuse.db import open_database
            from lakefuse.db.refs import SqlRefStore
            from lakefuse.db.staging import SqlStagingStore

            self.database = open_database(f"sqlite:///{os.path.join(workdir, 'lakefuse.db')}")
            refs, staging = SqlRefStore(self.database), SqlStagingStore(self.database)
        else:
            from lakefuse.graveler.memory import MemoryRefStore, MemoryStagingStore

            self.database = None
            staging = MemoryStagingStore()
            refs = MemoryRefStore(staging)
        self.graveler = Graveler(refs, staging, lambda _namespace: self.manager)

    def fresh_ram_manager(self):
        from lakefuse.cache import RamCache
        from lakefuse.graveler.committed import CommittedManager

        return CommittedManager(self.block, self.disk, RamCache(4 * 1024**3, "cold"), self.config)

    def populate(self, repo: str, keys: list[bytes]) -> str:
        """Repository ``repo`` whose main holds one record per key, committed at once."""
        from lakefuse.graveler.commits import new_commit
        from lakefuse.graveler.ports import Branch

        g = self.graveler
        g.create_repository(repo, f"local://{self.workdir}/namespace-{repo}")
        metarange = self.manager.write_metarange(make_record(key) for key in keys)
        branch = g.get_branch(repo, "main")
        head = g.get_commit(repo, branch.commit_id)
        commit = new_commit(metarange, [head], f"populate {len(keys):,} objects", "bench", int(time.time()))
        g.refs.add_commit(repo, commit)
        g.refs.compare_and_swap_branch(repo, "main", branch, Branch(branch.id, commit.id, branch.staging_token, ()))
        return metarange

    def close(self):
        self.manager.close()
        self.disk.close()
        if self.database is not None:
            self.database.close()


def commit_one_change(setup: Setup, repo: str, keys: list[bytes], runs: int, rng: random.Random):
    """Median seconds of committing one changed object, and files written per commit."""
    times, written = [], []
    for run in range(runs):
        key = rng.choice(keys)
        setup.graveler.set(repo, "main", make_record(key, 1000 + run))
        started = time.perf_counter()
        setup.graveler.commit(repo, "main", f"change {run}", "bench")
        times.append(time.perf_counter() - started)
        written.append(len(setup.manager.last_written))
    return statistics.median(times), written


def timed(function):
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--big", type=int, default=1_000_000, help="objects of the big repository")
    parser.add_argument("--small", type=int, default=10_000, help="objects of the small repository")
    parser.add_argument("--merge-changes", type=int, default=1_000, help="changes on the merged branch")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply --big and --merge-changes")
    parser.add_argument("--runs", type=int, default=5, help="commits timed per size (median reported)")
    parser.add_argument("--db", choices=["memory", "sqlite"], default="memory", help="ref and staging stores")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    big = max(100, int(args.big * args.scale))
    small = min(args.small, big)
    merge_changes = max(10, int(args.merge_changes * args.scale))
    rng = random.Random(args.seed)

    workdir = tempfile.mkdtemp(prefix="lakefuse-bench-vc-")
    setup = Setup(workdir, args.db)
    g = setup.graveler
    try:
        print(f"sizes: big {big:,} objects, small {small:,} objects, merge {merge_changes:,} changes; stores: {args.db}")
        big_keys = realistic_keys(big)
        small_keys = realistic_keys(small)
        populate_s, big_metarange = timed(lambda: setup.populate("big", big_keys))
        ranges = len(setup.manager.ranges(big_metarange))
        print(f"populated big: {ranges} ranges in {populate_s:.1f} s")
        setup.populate("small", small_keys)

        # 1. commit of one change
        for repo, keys in (("small", small_keys), ("big", big_keys)):  # warm-up: load metaranges
            g.set(repo, "main", make_record(keys[0], 1))
            g.commit(repo, "main", "warm-up", "bench")
        small_s, small_written = commit_one_change(setup, "small", small_keys, args.runs, rng)
        big_s, big_written = commit_one_change(setup, "big", big_keys, args.runs, rng)
        ratio = big_s / small_s
        print(f"1. commit of 1 change: {small:,} objects {small_s * 1000:.1f} ms, {big:,} objects {big_s * 1000:.1f} ms "
              f"(median of {args.runs}); ratio {ratio:.2f} (target <= {COMMIT_RATIO_TARGET:g}) "
              f"{'OK' if ratio <= COMMIT_RATIO_TARGET else 'MISSED'}")
        print(f"   files written per commit: small {small_written}, big {big_written} (target 2 = 1 range + 1 metarange)")

        # 2. diff of commits differing in 10 objects
        left = g.get_branch("big", "main").commit_id
        changed = rng.sample(big_keys, 10)
        g.stage("big", "main", [(key, make_record(key, 5000)) for key in changed])
        right = g.commit("big", "main", "ten changes", "bench").id
        cold = setup.fresh_ram_manager()
        first_s, changes = timed(lambda: list(g.diff("big", left, right)))
        assert sorted(c.key for c in changes) == sorted(changed), "diff found other changes"
        warm_s, _changes = timed(lambda: list(g.diff("big", left, right)))
        left_mr, right_mr = g.get_commit("big", left).metarange_id, g.get_commit("big", right).metarange_id
        cold_s, cold_changes = timed(lambda: list(cold.diff(left_mr, right_mr)))
        cold.close()
        assert len(cold_changes) == 10
        print(f"2. diff of 10 changes in {big:,} objects: first {first_s * 1000:.1f} ms, again (ranges in RAM) "
              f"{warm_s * 1000:.1f} ms, fresh RAM cache (files on disk cache) {cold_s * 1000:.1f} ms "
              f"(target < {DIFF_TARGET_S * 1000:.0f} ms) {'OK' if max(first_s, cold_s) < DIFF_TARGET_S else 'MISSED'}")

        # 3. merge of a branch with many changes into the big main
        g.create_branch("big", "feature", "main")
        feature_keys = rng.sample(big_keys, merge_changes - merge_changes // 10)
        new_keys = [b"tables/new/part-%06d.parquet" % i for i in range(merge_changes // 10)]
        g.stage("big", "feature", [(key, make_record(key, 7000)) for key in feature_keys + new_keys])
        g.commit("big", "feature", f"{merge_changes} changes", "bench")
        main_keys = [k for k in rng.sample(big_keys, 30) if k not in set(feature_keys)][:10]
        g.stage("big", "main", [(key, make_record(key, 9000)) for key in main_keys])
        g.commit("big", "main", "main moves on", "bench")
        merge_s, merged = timed(lambda: g.merge("big", "main", "feature", "bench"))
        written = len(setup.manager.last_written)
        check = g.view("big", merged.id)
        assert check.get(new_keys[0]) == make_record(new_keys[0], 7000)
        assert check.get(main_keys[0]) == make_record(main_keys[0], 9000)
        print(f"3. merge of {merge_changes:,} changes into {big:,} objects: {merge_s:.2f} s, "
              f"{written} files written ({len(setup.manager.ranges(merged.metarange_id))} ranges in the result)")
    finally:
        setup.close()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
