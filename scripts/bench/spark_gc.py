#!/usr/bin/env python3
"""Benchmark: ``lakefuse gc`` of a repository with many commits, on a local Spark session.

Builds (not timed) a repository with ``--commits`` commits on main; each commit uploads
``--objects-per-commit`` small objects, half of them overwriting earlier paths, so older
versions become garbage once their commits leave retention; a tag on commit 10 keeps that
commit alive.  Then times, with "now" 40 days later (every commit but the head and the tag
outside the 21-day retention): a dry run, the real run, and a second dry run (nothing left).

Plain script, not a test:  python scripts/bench/spark_gc.py --commits 100
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--objects-per-commit", type=int, default=100)
    add_common_arguments(parser)
    args = parser.parse_args(argv)

    from lakefuse.spark.gc import collect_garbage
    from lakefuse.spark.session import Progress

    workdir = args.workdir or tempfile.mkdtemp(prefix="lakefuse-bench-gc-")
    app = spark = None
    try:
        app = make_app(workdir)
        catalog = app.catalog
        catalog.create_repository("bench", f"local://{workdir}/storage/bench")
        started = time.perf_counter()
        paths = 0
        for commit in range(args.commits):
            for i in range(args.objects_per_commit):
                if i % 2 and paths:
                    index = (commit * 131 + i * 17) % paths  # overwrite an existing path
                else:
                    index = paths
                    paths += 1
                path = f"tables/t{index % 10}/part-{index:06d}"
                catalog.upload_bytes("bench", "main", path, f"{commit}:{i}".encode() * 20)
            catalog.commit("bench", "main", f"commit {commit}", "bench")
            if commit == 10:
                catalog.create_tag("bench", "v10", "main")
        print(f"built {args.commits} commits, {args.commits * args.objects_per_commit:,} uploads, "
              f"{paths:,} paths in {time.perf_counter() - started:.1f} s (not timed)")
        spark = start_spark(args.master)
        later = time.time() + 40 * 86400
        for label, dry_run in (("dry run", True), ("real run", False), ("second dry run", True)):
            started = time.perf_counter()
            summary = collect_garbage(spark, app, "bench", dry_run=dry_run, min_age_seconds=0, now=later,
                                      progress=Progress("gc", enabled=False))
            seconds = time.perf_counter() - started
            print(f"{label}: {seconds:.1f} s  ({summary.listed:,} listed, {summary.referenced:,} referenced, "
                  f"{summary.candidates:,} candidates, {summary.deleted:,} deleted; "
                  f"{summary.retained_commits}/{summary.commits} commits retained)")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        if app is not None:
            app.close()
        if not args.keep and not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
