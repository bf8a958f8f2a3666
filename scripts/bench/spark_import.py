#!/usr/bin/env python3
"""Benchmark: ``lakefuse import`` of many objects on a local Spark session: objects/s.

Two sources:

- ``--source listing`` (default): a synthetic listing generated on the executors (keys like
  ``events/year=2024/month=05/day=17/part-00042-000123.parquet``, S3 full addresses, ETags):
  times the import pipeline itself (records, sampling, sorting, range writing, commit).
- ``--source tree``: a real local tree of empty files (1,000 per directory) created first
  (not timed): times the distributed listing (scandir + stat) too.

Each import runs twice: the second, of the unchanged source, must give the same metarange.

Plain script, not a test:  python scripts/bench/spark_import.py --objects 1000000
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spark_common import add_common_arguments, make_app, start_spark  # noqa: E402


def synthetic_object(i: int):
    from lakefuse.spark.sources import SourceObject

    day = i // 40_000
    key = f"events/year=2024/month={1 + day // 28:02d}/day={1 + day % 28:02d}/part-{i // 1000 % 40:05d}-{i:09d}.parquet"
    return SourceObject(key, 1000 + i % 5000, 1_700_000_000 + i, f"{i:032x}", "s3://bench-bucket/" + key)


def make_tree(root: str, count: int) -> None:
    for start in range(0, count, 1000):
        directory = os.path.join(root, f"d{start // 1_000_000:03d}", f"{start // 1000 % 1000:03d}")
        os.makedirs(directory, exist_ok=True)
        for i in range(start, min(start + 1000, count)):
            with open(os.path.join(directory, f"file-{i:09d}.bin"), "wb"):
                pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=1_000_000, help="objects to import (default 1,000,000)")
    parser.add_argument("--source", choices=("listing", "tree"), default="listing")
    parser.add_argument("--records-per-partition", type=int, default=None)
    add_common_arguments(parser)
    args = parser.parse_args(argv)

    from lakefuse.spark.importer import DEFAULT_RECORDS_PER_PARTITION, import_listing, import_objects

    workdir = args.workdir or tempfile.mkdtemp(prefix="lakefuse-bench-import-")
    app = None
    spark = None
    try:
        app = make_app(workdir)
        app.catalog.create_repository("bench", f"local://{workdir}/storage/bench")
        per_partition = args.records_per_partition or DEFAULT_RECORDS_PER_PARTITION
        tree = os.path.join(workdir, "tree")
        if args.source == "tree":
            started = time.perf_counter()
            make_tree(tree, args.objects)
            print(f"created {args.objects:,} files in {time.perf_counter() - started:.1f} s (not timed)")
        spark = start_spark(args.master)
        sc = spark.sparkContext
        results = []
        for attempt in ("first import", "re-import (unchanged)"):
            started = time.perf_counter()
            if args.source == "tree":
                summary = import_objects(spark, app, "bench", "main", tree, records_per_partition=per_partition)
            else:
                slices = max(4, 2 * sc.defaultParallelism)
                objects = sc.range(args.objects, numSlices=slices).map(synthetic_object)
                summary = import_listing(spark, app, "bench", "main", objects, source_label="synthetic listing",
                                         records_per_partition=per_partition)
            seconds = time.perf_counter() - started
            results.append(summary)
            print(f"{attempt}: {summary.objects:,} objects in {seconds:.1f} s = {summary.objects / seconds:,.0f} objects/s "
                  f"({summary.ranges} ranges, {summary.ranges_uploaded} new, {summary.partitions} partitions)")
        same = results[0].metarange_id == results[1].metarange_id
        print(f"same metarange on re-import: {same}")
        return 0 if same else 1
    finally:
        if spark is not None:
            spark.stop()
        if app is not None:
            app.close()
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
