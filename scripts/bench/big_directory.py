"""Costs that do not grow with the directory (issue 18, third target): creating a file, and
looking up one name, present or missing, in a directory of 100,000 files against a small one,
on a local directory, bindfs (the reference) and a lakefuse branch, side by side in one run on
the same disk.

    python scripts/bench/big_directory.py [--big 100000] [--new 2000] [--runs 3] [--workdir DIR] [--quick]

Every system gets a directory ``big`` filled with ``--big`` files of 100 bytes through the mount
(Python open/write/close, untimed, progress every 10 s), and, per measured run, a lookup
directory holding just the ``--new`` files the lookups stat. Then, per run, every system in a
rotating order (this VM's speed drifts):

1. create: ``--new`` new files of 4 KiB (Python open/write/close) in a new empty directory, and
   as many in ``big``; removed, untimed, after the run;
2. stat of a present name: ``--new`` distinct names of ``big`` (random order), and every name of
   the run's lookup directory;
3. stat of a missing name: ``--new`` distinct never-existing names (FileNotFoundError) in
   ``big`` and in the lookup directory.

Before each timed batch the benchmark syncs and drops the kernel's dentry and inode caches
(writes 2 to /proc/sys/vm/drop_caches) so every stat reaches the filesystem; if that file is not
writable it says so (the names are distinct anyway: no batch stats a name an earlier batch
looked up, as long as --big is at least 4 x --runs x --new). Before each batch it also waits until
the lakefuse daemon is idle (it stages new files in batches, in the background). Figures are
medians of the runs' microseconds per operation; big/empty is the median of the runs' ratios of
the two.

lakefuse is measured four ways, one mount after another (local and bindfs run beside each, their
figures pooled over all of them):

- writer: the mount that filled the directories (its memory knows them);
- fresh: a fresh mount of the same repository after unmounting (staged entries, cold daemon
  memory; the disk cache under the lakefuse home stays);
- commit: after committing the branch, a fresh mount, looking up in the commit's directory
  (committed entries; creating is not possible there);
- committed branch: another fresh mount, the branch after that commit.

Target (issue 18): "creating the 2,000th file in a directory of 100,000 costs what the first did
in an empty one, and so does looking up one name, present or missing", read as: big/empty
within 1.2x for lakefuse on every row. The lakefuse/bindfs column shows the big-directory
figure against bindfs's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import small_files
from mount_common import LakeHome, bindfs_mount, have, lakefuse_mount, unmount
from small_files import drop_caches, wait_until_idle

REPO = "bench"
TARGET = 1.2  # big/empty, every lakefuse row
PROGRESS_EVERY = 10.0  # seconds
STAGED_TIMEOUT = 300.0  # seconds to wait for the branch to show every file before committing
WORKLOADS = [("create", "create a 4 KiB file (open/write/close)"),
             ("present", "stat a present name"),
             ("missing", "stat a missing name")]


@dataclass
class System:
    """One column of the comparison: where its directories are, and its per-op microseconds."""

    label: str
    base: Path  # holds big/, lookupNN/ and the runs' new-* directories
    creates: bool = True  # False for a read-only commit directory
    idle: Callable[[], None] = lambda: None  # returns once the server has no work left in the background
    micros: dict[str, list[float]] = field(default_factory=dict)  # "create big" -> [µs per op, ...]

    def record(self, key: str, value: float) -> None:
        self.micros.setdefault(key, []).append(value)

    def median(self, key: str) -> float | None:
        values = self.micros.get(key)
        return statistics.median(values) if values else None


# filling (untimed)

def fill_names(count: int) -> list[str]:
    return [f"b{i:06d}.dat" for i in range(count)]


def write_small_files(directory: Path, names: list[str], what: str, size: int = 100) -> float:
    """Create ``names`` in ``directory`` with ``size`` bytes each; a progress line every 10 s."""
    directory.mkdir(parents=True, exist_ok=True)
    filler = b"." * size
    started = last = time.monotonic()
    for done, name in enumerate(names, 1):
        with open(directory / name, "wb") as f:
            f.write((name.encode() + filler)[:size])
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY:
            print(f"    {what}: {done:,} of {len(names):,} files ({now - started:.0f} s)", flush=True)
            last = now
    return time.monotonic() - started


def fill(system: System, big: int, new: int, lookups: int) -> None:
    """``big/`` with ``big`` files, and ``lookups`` directories of ``new`` files each."""
    seconds = write_small_files(system.base / "big", fill_names(big), f"{system.label} big/")
    print(f"  {system.label}: big/ filled with {big:,} files in {seconds:.1f} s", flush=True)
    started = time.monotonic()
    for k in range(lookups):
        write_small_files(system.base / f"lookup{k:02d}", fill_names(new), f"{system.label} lookup{k:02d}/")
    print(f"  {system.label}: {lookups} lookup directories of {new:,} files in "
          f"{time.monotonic() - started:.1f} s", flush=True)


# the timed operations: each returns microseconds per operation

def create_files(directory: Path, names: list[str]) -> float:
    """small_files.create_files of 4 KiB files, in microseconds per file."""
    return small_files.create_files(directory, names) / len(names) * 1e6


def stat_names(paths: list[Path], present: bool) -> float:
    """os.stat of every path; each must exist (``present``) or raise FileNotFoundError."""
    wrong = 0
    started = time.perf_counter()
    for path in paths:
        try:
            os.stat(path)
            wrong += not present
        except FileNotFoundError:
            wrong += present
    elapsed = time.perf_counter() - started
    if wrong:
        raise RuntimeError(f"{wrong} of {len(paths)} stats under {paths[0].parent} did not find what was expected")
    return elapsed / len(paths) * 1e6


# one run of one system

@dataclass
class Plan:
    """What run ``r`` of lakefuse way ``phase`` touches: names are never reused across batches."""

    big: int
    new: int
    runs: int
    order: list[int]  # a random permutation of range(big): which fill names the present-stats take

    def slot(self, phase: int, r: int) -> int:
        return phase * self.runs + r

    def present_in_big(self, phase: int, r: int) -> list[str]:
        start = self.slot(phase, r) * self.new
        return [f"b{self.order[(start + i) % self.big]:06d}.dat" for i in range(self.new)]

    def present_in_lookup(self, phase: int, r: int) -> list[str]:
        names = fill_names(self.new)
        random.Random(self.slot(phase, r)).shuffle(names)
        return names


class Runner:
    """Measures the workloads on one system, keeping track of whether the caches could be dropped."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.caches_dropped = True

    def timed(self, system: System, directory: Path, fn, *args) -> float:
        """``fn(*args)`` after the server went idle and the kernel's caches were dropped; the path
        down to ``directory`` is looked up first, untimed (the figures are for names in it)."""
        system.idle()
        self.caches_dropped = drop_caches(2) and self.caches_dropped  # dentries and inodes
        os.stat(directory)
        return fn(*args)

    def run(self, system: System, phase: int, r: int, tag: str) -> None:
        """One run: create (in a new empty directory and in big/), then the stats."""
        plan, slot = self.plan, self.plan.slot(phase, r)
        big, lookup = system.base / "big", system.base / f"lookup{slot:02d}"
        pairs = {}
        if system.creates:
            empty = system.base / f"new-{tag}-{r}"
            empty.mkdir()
            names = [f"new-{tag}-{r}-{i:05d}.dat" for i in range(plan.new)]
            pairs["create"] = self.pair(r, lambda: self.timed(system, big, create_files, big, names),
                                        lambda: self.timed(system, empty, create_files, empty, names))
        present_big = [big / n for n in plan.present_in_big(phase, r)]
        present_lookup = [lookup / n for n in plan.present_in_lookup(phase, r)]
        pairs["present"] = self.pair(r, lambda: self.timed(system, big, stat_names, present_big, True),
                                     lambda: self.timed(system, lookup, stat_names, present_lookup, True))
        missing = [f"missing-{slot:02d}-{i:05d}.dat" for i in range(plan.new)]
        missing_big, missing_lookup = [big / n for n in missing], [lookup / n for n in missing]
        pairs["missing"] = self.pair(r, lambda: self.timed(system, big, stat_names, missing_big, False),
                                     lambda: self.timed(system, lookup, stat_names, missing_lookup, False))
        for workload, (in_big, in_empty) in pairs.items():
            system.record(f"{workload} big", in_big)
            system.record(f"{workload} empty", in_empty)
            system.record(f"{workload} ratio", in_big / in_empty)
        if system.creates:  # untimed: the next run starts with big/ as it was
            for name in names:
                os.unlink(big / name)
            shutil.rmtree(empty)

    @staticmethod
    def pair(r: int, in_big, in_empty) -> tuple[float, float]:
        """(big, empty) microseconds, the big directory first in even runs, second in odd ones."""
        if r % 2 == 0:
            first = in_big()
            return first, in_empty()
        second = in_empty()
        return in_big(), second


def rotate(systems: list[System], r: int) -> list[System]:
    k = r % len(systems)
    return systems[k:] + systems[:k]


# lakefuse

@contextlib.contextmanager
def lakefuse_system(home: LakeHome, mountpoint: Path, label: str, ref: str, creates: bool = True) -> Iterator[System]:
    """A mount of every repository; the system's directories live under ``<mount>/bench/<ref>``.
    Before each timed batch it waits until the daemon is idle (new files are staged in batches,
    in the background)."""
    procs: list = []
    with lakefuse_mount(home, mountpoint, procs=procs) as mnt:
        yield System(label, mnt / REPO / ref, creates=creates,
                     idle=lambda pid=procs[0].pid: wait_until_idle(pid, first=0.05, window=0.2, limit=60.0))


def wait_until_listed(home: LakeHome, prefix: str, expected: int) -> None:
    """Until the branch lists ``expected`` objects under ``prefix`` (bounded)."""
    deadline = time.monotonic() + STAGED_TIMEOUT
    while True:
        count = sum(1 for _ in home.catalog.iter_objects(REPO, "main", prefix=prefix))
        if count >= expected:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"main lists {count} objects under {prefix}, expected {expected}")
        time.sleep(0.5)


def commit_branch(home: LakeHome, plan: Plan, lookups: int) -> str:
    """Commit main (no mount running); the commit's id."""
    wait_until_listed(home, "big/b", plan.big)
    for k in range(lookups):
        wait_until_listed(home, f"lookup{k:02d}/b", plan.new)
    started = time.monotonic()
    commit = home.catalog.commit(REPO, "main", "big directory", "bench")
    print(f"  committed main as {commit.id[:12]} in {time.monotonic() - started:.1f} s", flush=True)
    return commit.id


# the benchmark

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=None, help="files in the big directory (default 100000)")
    parser.add_argument("--new", type=int, default=None, help="files created / names looked up per run (default 2000)")
    parser.add_argument("--runs", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--workdir", default=None, help="parent of the throw-away directory (default: the temp dir)")
    parser.add_argument("--quick", action="store_true", help="--big 2000 --new 200 --runs 1: a check that it works")
    args = parser.parse_args()
    big = args.big or (2000 if args.quick else 100_000)
    new = args.new or (200 if args.quick else 2000)
    runs = args.runs or (1 if args.quick else 3)
    workdir = Path(tempfile.mkdtemp(prefix="lakefuse-bench-", dir=args.workdir))
    try:
        bench(workdir, Plan(big, new, runs, random.Random(18).sample(range(big), big)))
    finally:
        for mnt in workdir.glob("mnt-*"):
            unmount(mnt)
        shutil.rmtree(workdir, ignore_errors=True)


def bench(workdir: Path, plan: Plan) -> None:
    started = time.monotonic()
    phases = ["lakefuse writer", "lakefuse fresh", "lakefuse commit", "lakefuse committed branch"]
    lookups = len(phases) * plan.runs
    runner = Runner(plan)
    home = LakeHome(workdir)
    home.create_repository(REPO)
    try:
        with contextlib.ExitStack() as stack:
            (workdir / "local").mkdir()
            references = [System("local", workdir / "local")]
            if have("bindfs"):
                (workdir / "bind-src").mkdir()
                references.append(System("bindfs", stack.enter_context(
                    bindfs_mount(workdir / "bind-src", workdir / "mnt-bind"))))
            else:
                print("bindfs is not installed: no reference column", flush=True)
            print(f"filling: big/ with {plan.big:,} files of 100 bytes, and {lookups} lookup directories of "
                  f"{plan.new:,} files, per system (untimed)", flush=True)
            for system in references:
                fill(system, plan.big, plan.new, lookups)

            def measure(phase: int, lake: System) -> None:
                systems = references + [lake]
                for r in range(plan.runs):
                    for system in rotate(systems, r + phase):
                        runner.run(system, phase, r, tag=f"{phase}")
                        print(f"  {phases[phase]}, run {r + 1}/{plan.runs}: {system.label} done "
                              f"({time.monotonic() - started:.0f} s)", flush=True)

            lakes = []
            with lakefuse_system(home, workdir / "mnt-lake", phases[0], "main") as lake:
                fill(lake, plan.big, plan.new, lookups)
                measure(0, lake)
                lakes.append(lake)
            with lakefuse_system(home, workdir / "mnt-lake", phases[1], "main") as lake:
                measure(1, lake)
                lakes.append(lake)
            commit = commit_branch(home, plan, lookups)
            with lakefuse_system(home, workdir / "mnt-lake", phases[2], commit, creates=False) as lake:
                measure(2, lake)
                lakes.append(lake)
            with lakefuse_system(home, workdir / "mnt-lake", phases[3], "main") as lake:
                measure(3, lake)
                lakes.append(lake)
    finally:
        home.close()
    report(references + lakes, plan, runner.caches_dropped)


def report(systems: list[System], plan: Plan, caches_dropped: bool) -> None:
    reference = next((s for s in systems if s.label == "bindfs"), None)
    width = max(len(s.label) for s in systems) + 2
    runs = f"{plan.runs} run{'s' if plan.runs > 1 else ''}"
    print(f"\nPer-operation cost in a directory of {plan.big:,} files (big) against a small one (microseconds, "
          f"median of {runs}; local and bindfs: of {runs} beside each lakefuse way)")
    print("  empty: create in a new empty directory; stat in a directory of just the "
          f"{plan.new:,} files looked up")
    misses = []
    for key, text in WORKLOADS:
        print(f"\n  {text}, {plan.new:,} per run")
        print(f"    {'':{width}} {'big µs':>9} {'empty µs':>9} {'big/empty':>10} {'lf/bindfs':>10}")
        for system in systems:
            in_big, in_empty, ratio = (system.median(f"{key} {col}") for col in ("big", "empty", "ratio"))
            if in_big is None:
                print(f"    {system.label:{width}} {'n/a':>9} {'n/a':>9} {'':>10} {'':>10}")
                continue
            versus = ""
            if system.label.startswith("lakefuse"):
                ref = reference.median(f"{key} big") if reference else None
                versus = f"{in_big / ref:10.2f}" if ref else f"{'n/a':>10}"
                if ratio > TARGET:
                    misses.append(f"{text} ({system.label}: {ratio:.2f}x)")
            print(f"    {system.label:{width}} {in_big:9.1f} {in_empty:9.1f} {ratio:9.2f}x {versus:>10}")
    if not caches_dropped:
        print("\n  /proc/sys/vm/drop_caches is not writable: the kernel's caches were NOT dropped; every stat "
              "was of a name not looked up before, but names created through the mount may still be cached")
    print("\n  every run's microseconds per op (big/empty):")
    for system in systems:
        cells = []
        for key, _ in WORKLOADS:
            pairs = zip(system.micros.get(f"{key} big", []), system.micros.get(f"{key} empty", []), strict=True)
            if cell := " ".join(f"{b:.0f}/{e:.0f}" for b, e in pairs):
                cells.append(f"{key} {cell}")
        print(f"    {system.label:{width}} " + "   ".join(cells))
    verdict = "met" if not misses else "NOT met: " + "; ".join(misses)
    print(f"\ntarget 'big/empty within {TARGET}x for lakefuse on every row': {verdict}")


if __name__ == "__main__":
    main()
