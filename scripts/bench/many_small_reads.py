"""Many small files read back (issue 18, read side): for 2,000 tiny CSV files, a stat of a
missing `.crc` sibling and then a full read of the file (what Hadoop's checksum filesystem does
for every file it opens), `find | xargs cat` of 4,000 files, (with --busy-readers) two reader
processes that compute between files, and (with --spark) a Spark count of a dataset of 100,000
one-row CSV files, on a local directory, bindfs, the pyfuse3 mirror of the same directory
(pyfuse3_mirror.py: what any pyfuse3 filesystem costs per request), a lakefuse commit and a
lakefuse branch holding the same files (the branch twice: as mounted by default, and
with ``--passthrough-branches``), side by side in one run on the same disk.

    python scripts/bench/many_small_reads.py [--runs 3] [--dirs 100] [--per-dir 1000] [--spark]
        [--busy-readers] [--busy-us 1000] [--master local[2]] [--workdir /var/tmp] [--timeout 1800]
        [--keep] [--quick] [--mount-args "--spin-us 0"]

The dataset: ``--dirs`` directories ``data/d000 ...`` of ``--per-dir`` files ``part-00000.csv
...``, each "id,value\\n<n>,<2n>\\n" (a few bytes), written once on local disk (the local
system; bindfs serves the same directory). lakefuse gets the same files through its core in
the benchmark process (write_data + stage_entries on main, then one commit; untimed, its time
printed), and two mounts of every repository: one read at <mount>/bench/<commit id>/data (the
"commit" system: the kernel reads commit files from the storage namespace itself, FUSE
passthrough, where available) and one at <mount>/bench/main/data (the "branch" system: the
committed data, nothing staged; lakefuse serves the bytes), and a third mount with
``--passthrough-branches`` read at <mount>/bench/main/data (the "branch, kernel reads" system:
the kernel reads the branch's files itself, as it does a commit's; a choice a user makes for a
mount whose readers need not see writes made through the mount after they opened a file, see
docs/mount.md). Each mount has its own cache directory, so that one system's reads do not warm
another's server.

The workloads, on each system:

- "probe + read": the files of the first 2 directories, by names generated in the benchmark
  (the benchmark never lists them; Spark, with --spark, does): os.stat of ``.<name>.crc``
  (FileNotFoundError expected), then open and read the file to its end (the bytes are checked);
- "find | xargs cat": ``find d002 .. d005 -type f -print0 | xargs -0 cat > /dev/null``,
  files just listed (the number of files is checked once, after the runs, untimed);
- "busy readers" (--busy-readers only): the files of the first 20 directories (at most),
  listed and stat'ed (untimed, as Spark's discovery does), then read by 2 processes between
  them, each doing what "probe + read" does per file and then computing ``--busy-us`` (1 ms by
  default) on its CPU: a job whose workers parse what they read keeps every CPU of this 2-core
  VM busy, and the mount's answers then wait for a CPU;
- "Spark count" (--spark only: slow): ``spark.read.csv(file://<root>/data).count()`` with a
  schema, a header and recursiveFileLookup (d000 ... are not key=value partition directories:
  without it Spark finds no file), on one local Spark session (started once, then one count of
  the local d000 to warm its JVM up, both untimed); the count must equal the number of files
  (one row each). Spark reads through Hadoop's local filesystem, which also probes each file's
  ``.crc``.

Each run goes through the systems in a rotating order (this VM's speed drifts); the figures
are medians of the runs' seconds. Before each workload the benchmark syncs and drops the
kernel's caches (/proc/sys/vm/drop_caches: pages, dentries and inodes, so the kernel asks the
FUSE servers again); the mounts are not restarted between workloads or runs, so the servers'
own caches (lakefuse's metadata and range caches, bindfs has none) stay warm after the first
workload that touched them. Every wait is bounded (--timeout per workload). Target (issue 18):
lakefuse no slower than bindfs (ratio <= 1).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from mount_common import LakeHome, bindfs_mount, have, lakefuse_mount, pyfuse3_mirror_mount, unmount
from small_files import drop_caches

REPO = "bench"
PROBE_DIRS = 2  # directories d000, d001: "probe + read"
FIND_DIRS = 4  # the next ones, d002 .. d005: "find | xargs cat"
#: the branch mounted with --passthrough-branches: the kernel reads its files itself
KERNEL_BRANCH = "branch, kernel reads"
STAGE_BATCH = 5000
BUSY_DIRS = 20  # "busy readers": the files of d000 .. d019
BUSY_READERS = 2  # processes, one per CPU of the project's VM


@dataclass
class System:
    label: str
    root: Path  # holds data/d000 ...
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def record(self, workload: str, value: float) -> None:
        self.seconds.setdefault(workload, []).append(value)


# the dataset

def dir_name(d: int) -> str:
    return f"d{d:03d}"


def file_name(i: int) -> str:
    return f"part-{i:05d}.csv"


def content(n: int) -> bytes:
    return f"id,value\n{n},{n * 2}\n".encode()


def dataset(dirs: int, per_dir: int):
    """(relative path, bytes) of every file, directory by directory."""
    for d in range(dirs):
        for i in range(per_dir):
            yield f"data/{dir_name(d)}/{file_name(i)}", content(d * per_dir + i)


def write_local(root: Path, dirs: int, per_dir: int) -> None:
    for d in range(dirs):
        (root / "data" / dir_name(d)).mkdir(parents=True)
    for path, data in dataset(dirs, per_dir):
        (root / path).write_bytes(data)


def load_lakefuse(home: LakeHome, dirs: int, per_dir: int) -> str:
    """The dataset staged on main through the core and committed; the commit's id."""
    from lakefuse.graveler.model import Entry

    catalog = home.catalog
    batch: list[tuple[str, Entry]] = []
    spool = home.path / "load.tmp"
    for path, data in dataset(dirs, per_dir):
        spool.write_bytes(data)  # moved into storage without an fsync: the commit syncs once
        batch.append((path, catalog.store_file(REPO, spool, content_type="text/csv", move=True, durable=False)))
        if len(batch) >= STAGE_BATCH:
            catalog.stage_entries(REPO, "main", batch)
            batch = []
    if batch:
        catalog.stage_entries(REPO, "main", batch)
    commit = catalog.commit(REPO, "main", "dataset", "bench")
    if next(iter(catalog.diff_uncommitted(REPO, "main")), None) is not None:
        raise RuntimeError("main still has staged changes after the commit")
    return commit.id


# bounded waits

def bounded(fn, timeout: float, what: str, on_timeout=None):
    """fn() in a daemon thread, waited for at most ``timeout`` seconds (a hung FUSE request must
    not hang the benchmark: the mounts are then unmounted lazily and the process exits)."""
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name=what)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        if on_timeout is not None:
            on_timeout()
        raise TimeoutError(f"{what}: still running after {timeout:.0f} s")
    if "error" in result:
        raise result["error"]
    return result["value"]


def run_bounded(cmd: list[str], timeout: float) -> float:
    """Seconds ``cmd`` took; in a session of its own, killed (the whole group) after ``timeout``."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        raise TimeoutError(f"{' '.join(cmd)}: still running after {timeout:.0f} s") from None
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err.decode()[-2000:]}")
    return elapsed


# the workloads: each returns seconds

def probe_and_read_one(crc: str, path: str, expected: bytes) -> None:
    """A stat of the missing ``crc`` sibling, then ``path`` read whole and checked."""
    try:
        os.stat(crc)
    except FileNotFoundError:
        pass
    else:
        raise RuntimeError(f"{crc} exists")
    with open(path, "rb") as f:
        data = f.read()
    if data != expected:
        raise RuntimeError(f"{path}: read {data!r}, expected {expected!r}")


def probe_and_read(files: list[tuple[str, str, bytes]]) -> float:
    """files: (missing .crc path, file path, expected bytes)."""
    started = time.perf_counter()
    for crc, path, expected in files:
        probe_and_read_one(crc, path, expected)
    return time.perf_counter() - started


def busy_read(root: str, dirs: int, per_dir: int, index: int, count: int, busy_us: float) -> float:
    """One busy reader: every ``count``-th file from the ``index``-th, as ``probe_and_read`` does
    (stat of the missing ``.crc``, the whole file read and checked), then ``busy_us`` of CPU
    time; seconds from its start to its last file."""
    started = time.perf_counter()
    for n in range(index, dirs * per_dir, count):
        directory = f"{root}/data/{dir_name(n // per_dir)}"
        name = file_name(n % per_dir)
        probe_and_read_one(f"{directory}/.{name}.crc", f"{directory}/{name}", content(n))
        until = time.perf_counter() + busy_us / 1e6
        while time.perf_counter() < until:  # the job's own work: a CPU kept busy
            pass
    return time.perf_counter() - started


def busy_readers(root: Path, dirs: int, per_dir: int, busy_us: float, timeout: float) -> float:
    """``BUSY_READERS`` processes reading the files of ``dirs`` directories between them, each
    computing ``busy_us`` after every file, so that every CPU is busy (what a job of several
    workers that parse what they read does); the files listed and stat'ed first, untimed (as
    Spark's discovery does). Seconds until the last reader's last file."""
    for d in range(dirs):
        directory = root / "data" / dir_name(d)
        for name in os.listdir(directory):
            os.stat(directory / name)
    here = str(Path(__file__).resolve().parent)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from many_small_reads import busy_read; "
            "sys.stdin.readline(); print(busy_read(sys.argv[2], *map(int, sys.argv[3:7]), float(sys.argv[7])))")
    readers = [subprocess.Popen([sys.executable, "-c", code, here, str(root), str(dirs), str(per_dir), str(index),
                                 str(BUSY_READERS), str(busy_us)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
               for index in range(BUSY_READERS)]
    try:
        for reader in readers:  # all start at once
            reader.stdin.write(b"go\n")
            reader.stdin.flush()
        deadline = time.monotonic() + timeout
        seconds = []
        for reader in readers:
            out, err = reader.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if reader.returncode != 0:
                raise RuntimeError(f"busy reader of {root} exited {reader.returncode}: {err.decode()[-2000:]}")
            seconds.append(float(out))
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"busy readers of {root}: still running after {timeout:.0f} s") from None
    finally:
        for reader in readers:
            if reader.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(reader.pid, signal.SIGKILL)
                reader.wait(30)
    return max(seconds)


def find_cat(directories: list[Path], timeout: float) -> float:
    script = 'set -o pipefail; find "$@" -type f -print0 | xargs -0 cat > /dev/null'
    return run_bounded(["bash", "-c", script, "find-cat", *map(str, directories)], timeout)


def count_listed(directories: list[Path]) -> int:
    return sum(len(os.listdir(directory)) for directory in directories)


def spark_count(spark, root: Path, expected: int, timeout: float, path: str = "data") -> float:
    # the files are in subdirectories d000 ... (not partitions key=value): looked up recursively
    reader = spark.read.schema("id INT, value INT").option("header", "true").option("recursiveFileLookup", "true")

    def count() -> tuple[float, int]:
        started = time.perf_counter()
        n = reader.csv(f"file://{root}/{path}").count()
        return time.perf_counter() - started, n

    seconds, n = bounded(count, timeout, f"Spark count of {root}", on_timeout=spark.sparkContext.cancelAllJobs)
    if n != expected:
        raise RuntimeError(f"Spark counted {n} rows in {root}/{path}, expected {expected}")
    return seconds


# the benchmark

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--dirs", type=int, default=None, help="directories of the dataset (default 100; at least 3)")
    parser.add_argument("--per-dir", type=int, default=None, help="files per directory (default 1000)")
    parser.add_argument("--spark", action="store_true", help="also time a Spark count of the whole dataset (slow)")
    parser.add_argument("--busy-readers", action="store_true",
                        help=f"also time {BUSY_READERS} reader processes that keep the CPUs busy between files")
    parser.add_argument("--busy-us", type=float, default=1000.0,
                        help="CPU time each busy reader spends after each file, microseconds (default 1000)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--workdir", default="/var/tmp",
                        help="parent of the throw-away directory (default /var/tmp: /tmp may be tmpfs)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="bound of each workload, seconds (default 1800)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (unmounted)")
    parser.add_argument("--quick", action="store_true", help="5 x 200 files, one run: a check that it works")
    parser.add_argument("--mount-args", default="",
                        help="more options for both lakefuse mounts, one string (e.g. \"--spin-us 0\")")
    args = parser.parse_args()
    quick = args.quick
    runs = args.runs or (1 if quick else 3)
    dirs = args.dirs or (5 if quick else 100)
    per_dir = args.per_dir or (200 if quick else 1000)
    if dirs < PROBE_DIRS + 1 or per_dir < 1:
        parser.error(f"--dirs must be at least {PROBE_DIRS + 1} and --per-dir at least 1")
    if not 0 <= args.busy_us <= 1e6:
        parser.error("--busy-us must be between 0 and 1000000")

    workdir = Path(tempfile.mkdtemp(prefix="lakefuse-bench-reads-", dir=args.workdir))
    try:
        bench(workdir, runs, dirs, per_dir, args.spark, args.master, args.timeout, tuple(args.mount_args.split()),
              busy_us=args.busy_us if args.busy_readers else None)
    finally:
        for mnt in workdir.glob("mnt-*"):
            unmount(mnt)
        if args.keep:
            print(f"\nkept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def bench(workdir: Path, runs: int, dirs: int, per_dir: int, use_spark: bool, master: str, timeout: float,
          mount_args: tuple[str, ...] = (), busy_us: float | None = None) -> None:
    started = time.monotonic()
    total = dirs * per_dir
    probe_dirs = list(range(PROBE_DIRS))
    find_dirs = list(range(PROBE_DIRS, min(dirs, PROBE_DIRS + FIND_DIRS)))
    n_probe, n_find = len(probe_dirs) * per_dir, len(find_dirs) * per_dir
    busy_dirs = min(dirs, BUSY_DIRS)

    local = workdir / "local"
    t = time.perf_counter()
    write_local(local, dirs, per_dir)
    print(f"dataset: {dirs} directories x {per_dir} files = {total:,} files, written locally in "
          f"{time.perf_counter() - t:.1f} s", flush=True)

    home = LakeHome(workdir)
    spark = None
    cold_ok = True
    try:
        home.create_repository(REPO)
        t = time.perf_counter()
        commit_id = load_lakefuse(home, dirs, per_dir)
        print(f"lakefuse: {total:,} objects written, staged and committed in {time.perf_counter() - t:.1f} s "
              f"(untimed below); commit {commit_id[:12]}", flush=True)
        use_bindfs = have("bindfs")
        if use_spark:
            from spark_common import start_spark

            spark = start_spark(master)
            t = time.perf_counter()  # the first job of a JVM is slow: not on the first system of run 1
            spark_count(spark, local, per_dir, timeout, path=f"data/{dir_name(0)}")
            print(f"spark warm-up: count of {local}/data/{dir_name(0)} in {time.perf_counter() - t:.1f} s (untimed)",
                  flush=True)

        with contextlib.ExitStack() as stack:
            systems = [System("local", local)]
            if use_bindfs:
                systems.append(System("bindfs", stack.enter_context(bindfs_mount(local, workdir / "mnt-bind"))))
            else:
                print("bindfs: not installed (n/a below)")
            # the binding's floor: the same directory through a pyfuse3 filesystem that does
            # nothing per request but the system call (what pyfuse3 itself costs, beside bindfs)
            systems.append(System("pyfuse3", stack.enter_context(pyfuse3_mirror_mount(local, workdir / "mnt-mirror"))))
            for name, label, ref, extra in (("commit", "commit", commit_id, ()), ("branch", "branch", "main", ()),
                                            ("kernel", KERNEL_BRANCH, "main", ("--passthrough-branches",))):
                mnt = stack.enter_context(lakefuse_mount(home, workdir / f"mnt-lake-{name}",
                                                         args=("--cache-dir", str(workdir / f"cache-{name}"),
                                                               *extra, *mount_args)))
                systems.append(System(f"lakefuse {label}", mnt / REPO / ref))

            for r in range(runs):
                for system in systems[r % len(systems):] + systems[:r % len(systems)]:
                    root = system.root
                    files = []
                    for d in probe_dirs:
                        for i in range(per_dir):
                            directory = root / "data" / dir_name(d)
                            files.append((str(directory / f".{file_name(i)}.crc"), str(directory / file_name(i)),
                                          content(d * per_dir + i)))
                    cold_ok = drop_caches() and cold_ok
                    system.record("probe", bounded(partial(probe_and_read, files), timeout,
                                                   f"probe + read on {system.label}"))
                    cold_ok = drop_caches() and cold_ok
                    system.record("find", find_cat([root / "data" / dir_name(d) for d in find_dirs], timeout))
                    if busy_us is not None:
                        cold_ok = drop_caches() and cold_ok
                        system.record("busy", bounded(partial(busy_readers, root, busy_dirs, per_dir, busy_us, timeout),
                                                      timeout + 60, f"busy readers on {system.label}"))
                    if spark is not None:
                        cold_ok = drop_caches() and cold_ok
                        system.record("spark", spark_count(spark, root, total, timeout))
                    print(f"  run {r + 1}/{runs} {system.label}: "
                          + ", ".join(f"{key} {values[-1]:.3f} s" for key, values in system.seconds.items())
                          + f" ({time.monotonic() - started:.0f} s)", flush=True)

            for system in systems:  # untimed: find listed every file it should have
                found = bounded(partial(count_listed, [system.root / "data" / dir_name(d) for d in find_dirs]),
                                timeout, f"listing {system.label}")
                if found != n_find:
                    raise RuntimeError(f"{system.label}: {found} files in the find directories, expected {n_find}")
    finally:
        if spark is not None:
            spark.stop()
        home.close()

    rows = [("probe", f"stat .crc (missing) + read: {n_probe:,} files"),
            ("find", f"find | xargs cat: {n_find:,} files"),
            ("spark", f"Spark count: {total:,} files ({master})")]
    if spark is None:
        rows.pop()
    if busy_us is not None:
        rows.insert(2, ("busy", f"{BUSY_READERS} busy readers ({busy_us:.0f} µs CPU/file): "
                                f"{busy_dirs * per_dir:,} files"))
    report(systems, rows, runs, cold_ok, use_spark)


def report(systems: list[System], rows, runs: int, cold_ok: bool, use_spark: bool) -> None:
    by_label = {s.label: s for s in systems}
    columns = ["local", "bindfs", "pyfuse3", "lakefuse commit", "lakefuse branch", f"lakefuse {KERNEL_BRANCH}"]
    heads = ["local", "bindfs", "pyfuse3", "lf commit", "lf branch", "lf br. pt"]
    width = max(len(text) for _, text in rows)

    def med(label: str, key: str) -> float | None:
        system = by_label.get(label)
        return statistics.median(system.seconds[key]) if system and system.seconds.get(key) else None

    print(f"\nMany small files read back (seconds, median of {runs} run{'s' if runs > 1 else ''}; "
          f"kernel caches dropped before each workload; ratios above 1: lakefuse slower; "
          f"pyfuse3: pyfuse3_mirror.py over the local directory)")
    print(f"  {'':{width}} " + " ".join(f"{h:>10}" for h in heads)
          + f" {'commit/bindfs':>14} {'branch/bindfs':>14} {'br. pt/bindfs':>14} {'pyfuse3/bindfs':>15}")
    verdicts = []
    for key, text in rows:
        values = {c: med(c, key) for c in columns}
        cells = " ".join(f"{v:10.3f}" if v is not None else f"{'n/a':>10}" for v in values.values())
        ratios, verdict = [], []
        for label in ("lakefuse commit", "lakefuse branch", f"lakefuse {KERNEL_BRANCH}"):
            lake, bind = values[label], values["bindfs"]
            name = label.removeprefix("lakefuse ")
            if lake is None or bind is None:
                ratios.append(f"{'n/a':>14}")
                verdict.append(f"{name} n/a")
                continue
            ratio = lake / bind
            ratios.append(f"{ratio:14.2f}")
            verdict.append(f"{name} {'met' if ratio <= 1 else 'NOT met'} ({ratio:.2f})")
        floor, bind = values["pyfuse3"], values["bindfs"]
        floor_ratio = f"{floor / bind:15.2f}" if floor is not None and bind is not None else f"{'n/a':>15}"
        print(f"  {text:{width}} {cells} {' '.join(ratios)} {floor_ratio}")
        verdicts.append((text, verdict))
    print("\n  target 'lakefuse no slower than bindfs' (lakefuse/bindfs <= 1):")
    for text, verdict in verdicts:
        print(f"    {text:{width}}  " + ", ".join(verdict))
    if not use_spark:
        print("  Spark count: not run (--spark)")
    if not cold_ok:
        print("  /proc/sys/vm/drop_caches is not writable: the kernel's caches were NOT dropped (figures are warm)")
    print("\n  every run's seconds:")
    for s in systems:
        print(f"  {s.label:>34}: " + "  ".join(f"{key} " + "/".join(f"{v:.3f}" for v in vals)
                                             for key, vals in s.seconds.items()))


if __name__ == "__main__":
    main()
