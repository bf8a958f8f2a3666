"""Listings at scale: ``find``, ``du -s``, ``ls -lR``, ``rsync -an`` (and optionally Spark's file
discovery) over trees of 200,000 and 1,000,000 small objects, side by side in one run: the local
disk, bindfs over it, and lakefuse (the branch the tree was imported into, and its commit
directory), with the ratios to the local disk, the 1M/200k ratio of each figure and the
daemon's RSS after the walks.

The tree is ``part=NNNN/fNNNNNNN.txt``, 2,000 files a directory (a partitioned Spark dataset
too), written on the local disk and imported with ``lakefuse import`` (entries point at those
files).  Per size and system:

- ``find`` of a fresh mount (the local disk: just after bindfs walked it), then ``find`` again
  (median of ``--runs``);
- ``du -s`` (a stat per file) first, and again (median);
- ``ls -lR`` again (after the ``du``s; median);
- ``rsync -an`` to an empty directory (median);
- lakefuse: one mount of the repository walks the branch, then the commit directory; its RSS
  is read after each (the second: both views).  The commit's fresh-mount ``find`` has its own
  mount, before.
- the pyfuse3 floor (``pyfuse3_floor.py --dirs``): a fresh ``find`` of the same shape of tree
  served by a pyfuse3 filesystem that does nothing but build one reply per entry, the least a
  READDIRPLUS listing through pyfuse3 costs on this machine;
- ``--spark``: ``spark.read.format("text").load(dir)`` (partition discovery and the file
  listing, nothing read) in one local Spark session, and its file count: the local disk and
  lakefuse (bindfs is left out: it takes minutes at 1,000,000 files).

    python scripts/bench/listings.py [--objects 200000,1000000] [--per-dir 2000] [--runs 3]
                                     [--bindfs-runs 1] [--before DIR] [--spark] [--workdir DIR]
                                     [--mount-args "--metadata-entries 50000"]

Run as root (bindfs, mounts).  Results go to stdout; ``--json FILE`` also writes them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mount_common import LakeHome, bindfs_mount, have, lakefuse_mount, pyfuse3_floor_mount  # noqa: E402

WORKLOADS = ("find fresh", "find again", "du -s first", "du -s again", "ls -lR again", "rsync -an")
SYSTEMS = ["local disk", "bindfs", "lakefuse branch", "lakefuse commit"]
BEFORE = ("lakefuse branch (before)", "lakefuse commit (before)")


def make_tree(root: Path, count: int, per_dir: int) -> None:
    payload = b"x" * 100
    for start in range(0, count, per_dir):
        directory = root / f"part={start // per_dir:04d}"
        directory.mkdir(parents=True, exist_ok=True)
        for i in range(start, min(start + per_dir, count)):
            fd = os.open(directory / f"f{i:07d}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, payload)
            os.close(fd)


def timed(cmd: list[str], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd)
    return time.perf_counter() - started


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def walks(directory: Path, runs: int, scratch: Path, fresh: bool = True) -> dict[str, float]:
    """The workloads over ``directory``, in order (the first ``find`` is the fresh one); the
    repeated ones ``runs`` times (median)."""
    out: dict[str, float] = {}
    find = ["find", str(directory)]
    if fresh:
        out["find fresh"] = timed(find)
    else:
        timed(find)
    out["find again"] = median(timed(find) for _ in range(runs))
    du = ["du", "-s", str(directory)]
    out["du -s first"] = timed(du)
    out["du -s again"] = median(timed(du) for _ in range(runs))
    lsr = ["ls", "-lR", str(directory)]
    out["ls -lR again"] = median(timed(lsr) for _ in range(runs))

    def rsync() -> float:
        target = scratch / "rsync-target"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        return timed(["rsync", "-an", f"{directory}/", f"{target}/"])

    out["rsync -an"] = median(rsync() for _ in range(runs))
    return out


def spark_discovery(spark, directory: Path) -> tuple[float, int]:
    started = time.perf_counter()
    frame = spark.read.format("text").load(str(directory))
    files = len(frame.inputFiles())
    return time.perf_counter() - started, files


def measure_size(workdir: Path, home: LakeHome, count: int, args, spark) -> dict:
    repo = f"n{count}"
    local = workdir / f"local-{count}"
    scratch = workdir / "scratch"
    started = time.perf_counter()
    make_tree(local, count, args.per_dir)
    print(f"[{count:,}] local tree written in {time.perf_counter() - started:.0f} s", flush=True)
    home.create_repository(repo)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from lakefuse.cli.main import main; sys.exit(main())",
                    "import", f"lakefs://{repo}/main", "--from", str(local), "--quiet", "-m", "bench tree"],
                   check=True, env=home.env, stdout=subprocess.DEVNULL)
    commit = home.catalog.get_branch(repo, "main").commit_id
    print(f"[{count:,}] imported in {time.perf_counter() - started:.0f} s (commit {commit[:12]})", flush=True)
    results: dict[str, dict[str, float]] = {}
    rss: dict[str, float] = {}
    spark_times: dict[str, tuple[float, int]] = {}

    # bindfs first: it walks the local tree once, so the local disk's "fresh" find has warm dentries
    with bindfs_mount(local, workdir / "mnt-bind") as base:
        results["bindfs"] = walks(base, args.bindfs_runs, scratch)
    results["local disk"] = walks(local, args.runs, scratch)
    # the pyfuse3 floor: the same shape of tree from a trivial pyfuse3 filesystem that builds one
    # reply per entry and nothing else (what any READDIRPLUS listing through pyfuse3 costs here)
    with pyfuse3_floor_mount(workdir / "mnt-floor", args.per_dir, dirs=count // args.per_dir) as floor:
        floor_find = timed(["find", str(floor / "dir")])
    if spark is not None:
        spark_discovery(spark, local / "part=0000")  # the JVM warms up before anything is timed
        spark_times["local disk"] = spark_discovery(spark, local)
    versions = [("", None)] + ([(" (before)", args.before)] if args.before else [])
    mount_args = tuple(args.mount_args.split())
    for suffix, source in versions:
        procs: list = []
        with lakefuse_mount(home, workdir / "mnt-lake", f"lakefs://{repo}", procs=procs, source=source,
                            args=mount_args) as base:
            commit_fresh = timed(["find", str(base / commit)])
        procs.clear()
        with lakefuse_mount(home, workdir / "mnt-lake", f"lakefs://{repo}", procs=procs, source=source,
                            args=mount_args) as base:
            pid = procs[0].pid
            results["lakefuse branch" + suffix] = walks(base / "main", args.runs, scratch)
            rss["branch" + suffix] = rss_mb(pid)
            results["lakefuse commit" + suffix] = walks(base / commit, args.runs, scratch, fresh=False)
            results["lakefuse commit" + suffix]["find fresh"] = commit_fresh
            rss["branch and commit" + suffix] = rss_mb(pid)
            if spark is not None and not suffix:
                spark_times["lakefuse branch"] = spark_discovery(spark, base / "main")
                spark_times["lakefuse commit"] = spark_discovery(spark, base / commit)
                rss["both views and Spark's listings"] = rss_mb(pid)
    shutil.rmtree(local, ignore_errors=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return {"objects": count, "seconds": results, "rss_mb": rss, "floor_find_fresh": floor_find,
            "spark": {label: {"seconds": s, "files": n} for label, (s, n) in spark_times.items()}}


def systems_of(result: dict) -> list[str]:
    return [label for label in SYSTEMS + list(BEFORE) if label in result["seconds"]]


def print_size(result: dict) -> None:
    count, seconds = result["objects"], result["seconds"]
    systems = systems_of(result)
    print(f"\n{count:,} objects in directories of files (seconds, medians; x: vs the local disk, same run)")
    print(f"  {'workload':14}" + "".join(f"{label:>26}" for label in systems))
    for workload in WORKLOADS:
        local = seconds["local disk"][workload]
        cells = []
        for label in systems:
            value = seconds[label][workload]
            cells.append(f"{value:8.2f}" + (f" ({value / local:5.1f}x)" if label != "local disk" else " " * 9))
        print(f"  {workload:14}" + "".join(f"{cell:>26}" for cell in cells))
    if "floor_find_fresh" in result:
        floor = result["floor_find_fresh"]
        print(f"  pyfuse3 floor (one reply per entry, no other work), find fresh: {floor:.2f} s "
              f"({floor / seconds['local disk']['find fresh']:.1f}x the local disk)")
    for label, value in result["rss_mb"].items():
        print(f"  daemon RSS after walking the {label}: {value:.0f} MiB")
    for label, figures in result["spark"].items():
        print(f"  spark discovery, {label}: {figures['seconds']:.1f} s ({figures['files']:,} files)")


def print_scaling(small: dict, big: dict) -> None:
    factor = big["objects"] / small["objects"]
    print(f"\nscaling {small['objects']:,} -> {big['objects']:,} objects ({factor:.0f}x the objects; "
          f"target for lakefuse: {factor:.0f}x +-20%)")
    systems = systems_of(big)
    print(f"  {'workload':14}" + "".join(f"{label:>26}" for label in systems))
    for workload in WORKLOADS:
        cells = [f"{big['seconds'][label][workload] / small['seconds'][label][workload]:.1f}x" for label in systems]
        print(f"  {workload:14}" + "".join(f"{cell:>26}" for cell in cells))
    for label in big["spark"]:
        if label in small["spark"]:
            print(f"  spark discovery, {label}: "
                  f"{big['spark'][label]['seconds'] / small['spark'][label]['seconds']:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", default="200000,1000000", help="sizes, comma-separated")
    parser.add_argument("--per-dir", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each repeated workload (median)")
    parser.add_argument("--bindfs-runs", type=int, default=1,
                        help="the same for bindfs (default 1: its ls -lR takes minutes at 1,000,000)")
    parser.add_argument("--before", default=None, metavar="DIR",
                        help="also mount with the lakefuse package under DIR (e.g. `git archive` of an "
                             "older commit): the 'before' columns, in the same run")
    parser.add_argument("--spark", action="store_true", help="also time Spark's partition discovery")
    parser.add_argument("--mount-args", default="",
                        help="options of every lakefuse mount, e.g. \"--metadata-entries 50000 --cache-ram-bytes "
                             "256MiB\" (the RSS a smaller bound of the caches leaves)")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    args = parser.parse_args()
    for tool in ("bindfs", "rsync", "find", "du"):
        if not have(tool):
            raise SystemExit(f"{tool} not found")
    workdir = Path(tempfile.mkdtemp(prefix="lakefuse-bench-listings-", dir=args.workdir))
    home = LakeHome(workdir)
    spark = None
    if args.spark:
        from lakefuse.spark.session import spark_session

        spark = spark_session("local[2]", app_name="lakefuse-bench-listings",
                              conf={"spark.driver.memory": "6g"})  # a million FileStatus objects
    results = []
    try:
        for count in (int(text) for text in args.objects.split(",")):
            results.append(measure_size(workdir, home, count, args, spark))
            print_size(results[-1])
        if len(results) > 1:
            print_scaling(results[0], results[-1])
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        if spark is not None:
            spark.stop()
        home.close()
        if not args.keep:
            with contextlib.suppress(OSError):
                shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
