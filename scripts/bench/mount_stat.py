"""Metadata speed: stat of 10,000 files (cold: first time through the mount; warm: again) and
ls -l of a 10,000-entry directory, lakefuse (a branch and a commit) vs a local directory vs
bindfs vs rclone mount (--vfs-cache-mode full, when installed), side by side, and vs the
floor of pyfuse3 itself (pyfuse3_floor.py: the same names from a dict, no work per request);
then how long another process's write to a branch takes to show through the mount.

All systems are mounted at once and take turns of 500 stats over the same names, so a drift
of the machine's speed (this VM's FUSE round trips vary 3x within minutes) hits all of them
alike; the figures are medians over the turns, the ratios medians of the same turns' ratios.

    python scripts/bench/mount_stat.py [--files 10000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from statistics import median

from mount_common import (LakeHome, bindfs_mount, have, lakefuse_mount, print_table, pyfuse3_floor_mount,
                          rclone_mount)


def stat_all(paths: list[Path]) -> float:
    started = time.perf_counter()
    for path in paths:
        os.stat(path)
    return time.perf_counter() - started


def ls_l(directory: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["ls", "-l", str(directory)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=500, help="stats per system in turn (default 500)")
    parser.add_argument("--ls-rounds", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    n = args.files
    workdir = Path(tempfile.mkdtemp(prefix="lakefuse-bench-", dir=args.workdir))
    home = LakeHome(workdir)
    home.create_repository("bench")
    entry = home.catalog.upload_bytes("bench", "main", "seed", b"x" * 100)
    names = [f"f{i:06d}.csv" for i in range(n)]
    home.catalog.stage_entries("bench", "main", [(f"dir/{name}", entry) for name in names])
    commit = home.catalog.commit("bench", "main", "files", "bench")
    local = workdir / "local" / "dir"
    local.mkdir(parents=True)
    for name in names:
        (local / name).write_bytes(b"x" * 100)

    @contextlib.contextmanager
    def no_mount():
        yield Path("/")

    lake = lambda: lakefuse_mount(home, workdir / "mnt-lake")  # noqa: E731
    # label -> (mount, the 10,000-entry directory inside it)
    systems = {
        "local": (no_mount, local),
        "lakefuse commit": (lake, Path(f"bench/{commit.id}/dir")),
        "lakefuse branch": (lake, Path("bench/main/dir")),
        "bindfs": (lambda: bindfs_mount(local.parent, workdir / "mnt-bind"), Path("dir")),
        "pyfuse3 floor (no work per request)": (lambda: pyfuse3_floor_mount(workdir / "mnt-floor", n), Path("dir")),
    }
    if have("rclone"):
        systems["rclone --vfs-cache-mode full"] = (
            lambda: rclone_mount(local.parent, workdir / "mnt-rclone", workdir / "rclone-cache"), Path("dir"))

    cold, warm = stat_rates(systems, names, args.chunk)
    ls_cold, ls_warm = ls_times(systems, args.ls_rounds)
    latencies = change_latencies(home, workdir / "mnt-lake")
    home.close()

    rows = []
    for label in systems:
        rows.append((f"{label}: stat cold", median(cold[label]), ""))
        rows.append((f"{label}: stat warm", median(warm[label]), ""))
        rows.append((f"{label}: ls -l cold (entries/s)", n / median(ls_cold[label]), f"{median(ls_cold[label]) * 1000:.0f} ms"))
        rows.append((f"{label}: ls -l warm (entries/s)", n / median(ls_warm[label]), f"{median(ls_warm[label]) * 1000:.0f} ms"))
    print_table(f"Metadata of {n} files (operations/s, medians; stats in turns of {args.chunk} fresh names "
                f"per system, ls -l over {args.ls_rounds} rounds)", rows, "ops/s", "local: stat warm")
    reference = "rclone --vfs-cache-mode full" if "rclone --vfs-cache-mode full" in systems else "bindfs"
    print(f"\n  vs {reference} (median of the ratios of the same turns; above 1: lakefuse ahead)")
    for label in ("lakefuse commit", "lakefuse branch", "pyfuse3 floor (no work per request)"):
        for what, rates in (("stat cold", cold), ("stat warm", warm)):
            ratios = [a / b for a, b in zip(rates[label], rates[reference])]
            print(f"  {label}: {what} {median(ratios):.2f}")
        print(f"  {label}: ls -l cold {median(ls_cold[reference]) / median(ls_cold[label]):.2f}, "
              f"warm {median(ls_warm[reference]) / median(ls_warm[label]):.2f}")
    latencies.sort()
    print(f"\nanother process's write seen through the branch directory after: median "
          f"{latencies[len(latencies) // 2] * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms "
          f"({len(latencies)} writes; the mount polls every 0.5 s)")
    shutil.rmtree(workdir, ignore_errors=True)


def stat_rates(systems, names: list[str], chunk: int) -> tuple[dict, dict]:
    """Stats per second of every system, all mounted at once and taking turns over the same
    ``chunk`` names (the machine's speed drifts; turns keep the comparison fair): first every
    name once (cold), then every name again (warm)."""
    cold = {label: [] for label in systems}
    warm = {label: [] for label in systems}
    labels = list(systems)
    with contextlib.ExitStack() as stack:
        mounted = {}
        dirs = {}
        for label, (mount, directory) in systems.items():
            if mount not in mounted:
                mounted[mount] = stack.enter_context(mount())
            dirs[label] = mounted[mount] / directory
        for rates in (cold, warm):
            for turn, start in enumerate(range(0, len(names), chunk)):
                part = names[start:start + chunk]
                shift = turn % len(labels)
                for label in labels[shift:] + labels[:shift]:
                    paths = [dirs[label] / name for name in part]
                    rates[label].append(len(part) / stat_all(paths))
    return cold, warm


def ls_times(systems, rounds: int) -> tuple[dict, dict]:
    """Seconds of ``ls -l`` of the whole directory just after mounting (cold) and again
    (warm), each system in turn, ``rounds`` times."""
    cold = {label: [] for label in systems}
    warm = {label: [] for label in systems}
    for _ in range(rounds):
        for label, (mount, directory) in systems.items():
            with mount() as base:
                cold[label].append(ls_l(base / directory))
                warm[label].append(ls_l(base / directory))
    return cold, warm


def change_latencies(home: LakeHome, mountpoint: Path, runs: int = 9) -> list[float]:
    """Seconds from another process's write of a branch file (this process, through the API)
    until a ``stat`` through the mount shows it, ``runs`` times."""
    out = []
    with lakefuse_mount(home, mountpoint) as base:
        path = base / "bench/main/dir/f000000.csv"
        for run in range(runs):
            os.stat(path)
            size = 200 + run
            home.catalog.upload_bytes("bench", "main", "dir/f000000.csv", b"y" * size)
            started = time.perf_counter()
            deadline = started + 10
            while os.stat(path).st_size != size:
                if time.perf_counter() > deadline:
                    raise SystemExit("another writer's change did not show within 10 s")
                time.sleep(0.005)
            out.append(time.perf_counter() - started)
    return out


if __name__ == "__main__":
    main()
