#!/usr/bin/env python3
"""Benchmark: ``lakefuse export`` of a commit of many objects vs ``cp -r`` of the same tree.

Creates (not timed) a local tree of ``--objects`` files of ``--size`` bytes, imports it into a
repository (entries point at the tree), then times: ``cp -r`` of the tree, the export of the
commit to a fresh directory (MB/s), and a re-run of the export over the complete destination
(resume: every object skipped).  Page cache: the tree is read once before timing anything.

Plain script, not a test:  python scripts/bench/spark_export.py --objects 10000
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from spark_common import add_common_arguments, make_app, start_spark, tree_bytes  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=64 * 1024, help="bytes per object (default 64 KiB)")
    add_common_arguments(parser)
    args = parser.parse_args(argv)

    from lakefuse.spark.exporter import export_commit
    from lakefuse.spark.importer import import_objects
    from lakefuse.spark.session import Progress

    workdir = args.workdir or tempfile.mkdtemp(prefix="lakefuse-bench-export-")
    app = spark = None
    quiet = Progress("bench", enabled=False)
    try:
        tree = os.path.join(workdir, "tree")
        payload = os.urandom(args.size)
        for i in range(args.objects):
            directory = os.path.join(tree, f"part={i // 500:04d}")
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, f"{i:08d}.bin"), "wb") as handle:
                handle.write(payload[i % 251 :] + payload[: i % 251])
        total = tree_bytes(tree)
        app = make_app(workdir)
        app.catalog.create_repository("bench", f"local://{workdir}/storage/bench")
        spark = start_spark(args.master)
        import_objects(spark, app, "bench", "main", tree, progress=quiet)
        print(f"tree of {args.objects:,} objects, {total / 1e6:.1f} MB, imported (not timed)")

        started = time.perf_counter()
        subprocess.run(["cp", "-r", tree, os.path.join(workdir, "cp-copy")], check=True)
        cp_seconds = time.perf_counter() - started
        print(f"cp -r:   {cp_seconds:.2f} s = {total / cp_seconds / 1e6:.1f} MB/s")

        started = time.perf_counter()
        summary = export_commit(spark, app, "bench", "main", os.path.join(workdir, "export"), progress=quiet)
        seconds = time.perf_counter() - started
        print(f"export:  {seconds:.2f} s = {summary.bytes_copied / seconds / 1e6:.1f} MB/s "
              f"({summary.copied:,} copied; {seconds / cp_seconds:.1f}x the time of cp -r)")

        started = time.perf_counter()
        summary = export_commit(spark, app, "bench", "main", os.path.join(workdir, "export"), progress=quiet)
        print(f"re-run (resume, all present): {time.perf_counter() - started:.2f} s ({summary.skipped:,} skipped)")
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
