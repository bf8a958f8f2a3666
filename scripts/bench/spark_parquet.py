"""Spark writing and reading Parquet through the mount (issue 19): the same Spark job writes a
DataFrame as Parquet to a local directory and into a branch directory of a lakefuse mount, then
reads each back, side by side in one run on the same disk.

    python scripts/bench/spark_parquet.py [--rows 6000000] [--files 8] [--runs 3]
        [--master local[2]] [--workdir /var/tmp] [--timeout 1800] [--keep] [--quick]
        [--profile FILE.raw] [--mount-arg=--writeback-cache ...] [--conf KEY=VALUE ...]

The job: ``spark.range(rows)`` with three derived columns (``l`` a long, ``d`` a double, ``s``
a short string), ``repartition(files)``, ``write.mode("overwrite").parquet(file://<dir>/out)``:
Hadoop's local filesystem and the FileOutputCommitter, so each task writes under
``out/_temporary/0/_temporary/attempt_...``, renames its directory on task commit, the job
commit renames every part file into ``out`` and removes ``_temporary``, and every file gets a
``.<name>.crc`` sibling (the ``_SUCCESS`` marker too). The read: ``spark.read.parquet`` of the
output, count(*) plus sums over all three columns (so every column's bytes are read); the
result must equal the local one, and the count ``--rows``.

The systems: "local", a directory in the work directory (``--workdir``, default /var/tmp: /tmp
may be tmpfs); "lakefuse branch", ``<mount>/main/out`` of a ``lakefuse mount`` of the one
repository of a throw-away lakefuse home in the same work directory (its storage namespace is
on the same disk). One Spark session, started once, then an untimed warm-up round: the write
and read on each system (a JVM's first jobs are slow, and on a VM so is writing into page cache
the guest never used: a first full-size write took twice the time of the next one). Each run
writes then reads on every system, in an order that alternates between runs (this VM's speed
drifts). Before each write the previous output is removed (untimed: overwrite then finds
nothing to delete) and dirty pages are synced; before each read the kernel's caches are dropped
(/proc/sys/vm/drop_caches: the mount's own caches keep what the write left in them). After each
write the output is checked: ``_SUCCESS``, ``--files`` part files, their ``.crc`` files, no
``_temporary`` left. The lines of the lakefuse runs also give the CPU time the mount daemon used
during the write and the read (on a 2-core machine it competes with Spark's two task threads).

The table gives the median seconds of the runs and local / lakefuse (higher is better; targets
of issue 19: write >= 0.8, read >= 0.9). ``--profile FILE`` then runs one more lakefuse write
(untimed in the table) while ``py-spy record --nonblocking -f raw`` samples the mount daemon,
keeps the raw stacks in FILE and prints the top functions by own and by total time.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from many_small_reads import bounded
from mount_common import LakeHome, lakefuse_mount, show_mount_log, unmount
from small_files import drop_caches
from spark_common import start_spark, tree_bytes

REPO = "bench"
BRANCH = "main"
WRITE_TARGET, READ_TARGET = 0.8, 0.9


@dataclass
class System:
    label: str
    out: Path  # the Parquet output directory
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def record(self, step: str, value: float) -> None:
        self.seconds.setdefault(step, []).append(value)

    def median(self, step: str) -> float:
        return statistics.median(self.seconds[step])


# the job

def dataframe(spark, rows: int, files: int):
    from pyspark.sql import functions as F

    return spark.range(rows).select(
        F.col("id"),
        ((F.col("id") * 2654435761) % 1_000_000_007).alias("l"),
        (F.col("id") / 7.0).alias("d"),
        F.concat(F.lit("k"), ((F.col("id") * 7919) % 100_000).cast("string")).alias("s"),
    ).repartition(files)


def write(spark, out: Path, rows: int, files: int) -> float:
    df = dataframe(spark, rows, files)  # the plan only: the job runs in save()
    started = time.perf_counter()
    df.write.mode("overwrite").parquet(f"file://{out}")
    return time.perf_counter() - started


def read(spark, out: Path) -> tuple[float, tuple]:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    row = spark.read.parquet(f"file://{out}").agg(
        F.count(F.lit(1)), F.sum("l"), F.sum("d"), F.sum(F.length("s"))).collect()[0]
    return time.perf_counter() - started, tuple(row)


def same_result(a: tuple, b: tuple) -> bool:
    """Equal results of read(); the sum of doubles within rounding (its order of addition varies)."""
    return all(math.isclose(x, y, rel_tol=1e-9) if isinstance(x, float) else x == y for x, y in zip(a, b))


def check_output(out: Path, files: int) -> str:
    """One line saying the committed output is complete; RuntimeError if it is not."""
    names = os.listdir(out)
    parts = [n for n in names if n.startswith("part-") and n.endswith(".parquet")]
    crcs = [n for n in names if n.startswith(".") and n.endswith(".crc")]
    problems = []
    if "_SUCCESS" not in names:
        problems.append("no _SUCCESS")
    if len(parts) != files:
        problems.append(f"{len(parts)} part files, expected {files}")
    if "_temporary" in names:
        problems.append("_temporary left")
    if problems:
        raise RuntimeError(f"{out}: " + ", ".join(problems) + f" (listed: {sorted(names)})")
    return f"_SUCCESS, {len(parts)} part files, {len(crcs)} .crc files, no _temporary"


def remove_output(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    os.sync()


# the mount daemon and py-spy

def mount_pid(mountpoint: Path) -> int:
    """The pid of the lakefuse server of ``mountpoint`` (mount_common.lakefuse_mount does not
    say): the process whose command line is ``... -m lakefuse.fuse mount ... <mountpoint> ...``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"lakefuse.fuse" in argv and str(mountpoint).encode() in argv:
            return int(entry)
    raise RuntimeError(f"no lakefuse process serves {mountpoint}")


def profiled(fn, pid: int, output: Path):
    """fn() while py-spy samples process ``pid`` (raw collapsed stacks to ``output``)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    proc = subprocess.Popen([py_spy, "record", "--nonblocking", "-f", "raw", "-o", str(output), "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1)  # py-spy attaches
    if proc.poll() is not None:
        raise RuntimeError(f"py-spy exited {proc.returncode}: {proc.stderr.read().decode()[-1000:]}")
    try:
        return fn()
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


#: lakefuse's frames under the event loop's whole thread (the mount command), left out of totals
ENTRY_FRAMES = ("(lakefuse/fuse/__main__.py)", "(lakefuse/fuse/mountcmd.py)", "serve (lakefuse/fuse/runner.py)")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def summarise_profile(path: Path, top: int = 10) -> None:
    """The functions with the most samples on top of the stack (own time), and lakefuse's own
    functions with the most samples anywhere in the stack (total time: the frames of threads,
    trio and the mount command under every stack would fill that list)."""
    own, total, samples = Counter(), Counter(), 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]  # "f (file.py:12)"
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    print(f"\nprofile of the mount daemon during one lakefuse write: {samples:,} samples of busy threads "
          f"(py-spy, 100 per second and thread) in {path}")
    lakefuse_total = Counter({frame: n for frame, n in total.items()
                              if "(lakefuse/" in frame and not frame.endswith(ENTRY_FRAMES)})
    for title, counter in (("own time", own), ("total time, lakefuse's functions", lakefuse_total)):
        print(f"  top {top} by {title}:")
        for frame, n in counter.most_common(top):
            print(f"    {100 * n / max(samples, 1):5.1f}%  {frame}")


# the benchmark

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None, help="rows of the DataFrame (default 6,000,000)")
    parser.add_argument("--files", type=int, default=8, help="Parquet part files (default 8)")
    parser.add_argument("--runs", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--workdir", default="/var/tmp",
                        help="parent of the throw-away directory (default /var/tmp: /tmp may be tmpfs)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="bound of each Spark job, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (unmounted)")
    parser.add_argument("--quick", action="store_true", help="100,000 rows, one run: a check that it works")
    parser.add_argument("--profile", type=Path, default=None,
                        help="after the runs, profile one more lakefuse write with py-spy; raw stacks here")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for both systems (repeatable), e.g. "
                             "--conf spark.hadoop.io.file.buffer.size=1048576")
    parser.add_argument("--mount-arg", action="append", default=[],
                        help="an option of `lakefuse mount` (repeatable), e.g. --mount-arg=--writeback-cache")
    args = parser.parse_args()
    rows = args.rows or (100_000 if args.quick else 6_000_000)
    runs = args.runs or (1 if args.quick else 3)
    if rows < args.files or args.files < 1:
        parser.error("--rows must be at least --files, and --files at least 1")

    workdir = Path(tempfile.mkdtemp(prefix="lakefuse-bench-parquet-", dir=args.workdir))
    try:
        conf = dict(item.split("=", 1) for item in args.conf)
        bench(workdir, rows, args.files, runs, args.master, args.timeout, args.profile, tuple(args.mount_arg), conf)
    finally:
        for mnt in workdir.glob("mnt-*"):
            unmount(mnt)
        if args.keep:
            print(f"\nkept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def bench(workdir: Path, rows: int, files: int, runs: int, master: str, timeout: float,
          profile: Path | None, mount_args: tuple[str, ...] = (), conf: dict[str, str] | None = None) -> None:
    started = time.monotonic()
    home = LakeHome(workdir)
    spark = None
    cold_ok = True
    try:
        home.create_repository(REPO)
        spark = start_spark(master, conf)
        on_timeout = spark.sparkContext.cancelAllJobs

        def job(fn, what: str):
            return bounded(fn, timeout, what, on_timeout=on_timeout)

        with lakefuse_mount(home, workdir / "mnt-lake", f"lakefs://{REPO}", args=mount_args) as mnt:
            systems = [System("local", workdir / "local" / "out"), System("lakefuse branch", mnt / BRANCH / "out")]
            systems[0].out.parent.mkdir()
            daemon = mount_pid(mnt)
            expected = None

            def one_pass(system: System, run: str) -> tuple[float, float]:
                """Write then read on ``system``, both checked; their seconds."""
                nonlocal cold_ok, expected
                remove_output(system.out)
                cpu = [cpu_seconds(daemon)]
                write_seconds = job(partial(write, spark, system.out, rows, files), f"write on {system.label}")
                cpu.append(cpu_seconds(daemon))
                check = check_output(system.out, files)
                cold_ok = drop_caches() and cold_ok
                cpu.append(cpu_seconds(daemon))
                read_seconds, result = job(partial(read, spark, system.out), f"read on {system.label}")
                cpu.append(cpu_seconds(daemon))
                expected = expected or result
                if not same_result(result, expected) or result[0] != rows:
                    raise RuntimeError(f"{system.label} read {result}, expected {expected} ({rows:,} rows)")
                daemon_cpu = (f"; mount daemon CPU: write {cpu[1] - cpu[0]:.1f} s, read {cpu[3] - cpu[2]:.1f} s"
                              if system is systems[1] else "")
                print(f"  {run} {system.label}: write {write_seconds:.2f} s, read {read_seconds:.2f} s; "
                      f"output: {check}{daemon_cpu} ({time.monotonic() - started:.0f} s)", flush=True)
                return write_seconds, read_seconds

            for system in systems:  # a JVM's first jobs are slow, and so is page cache a VM never used
                one_pass(system, "warm-up (untimed)")
            for r in range(runs):
                for system in systems[r % 2:] + systems[:r % 2]:
                    write_seconds, read_seconds = one_pass(system, f"run {r + 1}/{runs}")
                    system.record("write", write_seconds)
                    system.record("read", read_seconds)
            size = tree_bytes(str(systems[0].out))

            if profile is not None:
                lake = systems[1]
                remove_output(lake.out)
                cpu = cpu_seconds(daemon)
                seconds = profiled(partial(job, partial(write, spark, lake.out, rows, files), "profiled write"),
                                   daemon, profile)
                used = cpu_seconds(daemon) - cpu
                print(f"\n  profiled lakefuse write: {seconds:.2f} s, mount daemon CPU {used:.1f} s; "
                      f"output: {check_output(lake.out, files)}")
    finally:
        if spark is not None:
            spark.stop()
        home.close()

    report(systems, rows, files, runs, master, size, cold_ok)
    if profile is not None:
        summarise_profile(profile)
    show_mount_log(home.path / "bench-mount.log")


def report(systems: list[System], rows: int, files: int, runs: int, master: str, size: int, cold_ok: bool) -> None:
    local, lake = systems
    print(f"\nSpark {master}: Parquet of {rows:,} rows in {files} files ({size / 1e6:.1f} MB with .crc files; "
          f"seconds, median of {runs} run{'s' if runs > 1 else ''}; local/lakefuse above 1: lakefuse faster)")
    print(f"  {'':6} {'local':>10} {'lf branch':>10} {'local/lf':>10}  target")
    for step, target in (("write", WRITE_TARGET), ("read", READ_TARGET)):
        ratio = local.median(step) / lake.median(step)
        print(f"  {step:6} {local.median(step):10.2f} {lake.median(step):10.2f} {ratio:10.2f}  "
              f">= {target}: {'met' if ratio >= target else 'NOT met'}")
    if not cold_ok:
        print("  /proc/sys/vm/drop_caches is not writable: reads were NOT from a cold page cache")
    print("\n  every run's seconds:")
    for s in systems:
        print(f"  {s.label:>15}: " + "  ".join(f"{step} " + "/".join(f"{v:.2f}" for v in values)
                                             for step, values in s.seconds.items()))


if __name__ == "__main__":
    main()
