"""Metadata speed: stat of 10,000 files (cold: first time through the mount; warm: again) and
ls -l of a 10,000-entry directory, lakefuse (a branch and a commit) vs a local directory vs
bindfs vs rclone mount (--vfs-cache-mode full, when installed), side by side, and vs the
floor of pyfuse3 itself (pyfuse3_floor.py: the same names from a dict, no work per request);
then how long another process's write to a branch takes to show through the mount.

    python scripts/bench/mount_stat.py [--files 10000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

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

    rows = []

    def measure(label: str, directory: Path, remount) -> None:
        paths = [directory / name for name in names]
        with remount() as base:
            d = base / directory
            p = [base / path for path in paths]
            cold = stat_all(p)
            warm = stat_all(p)
        with remount() as base:
            ls_cold = ls_l(base / directory)
            ls_warm = ls_l(base / directory)
        rows.append((f"{label}: stat x{n} cold", n / cold, ""))
        rows.append((f"{label}: stat x{n} warm", n / warm, ""))
        rows.append((f"{label}: ls -l cold (entries/s)", n / ls_cold, f"{ls_cold * 1000:.0f} ms"))
        rows.append((f"{label}: ls -l warm (entries/s)", n / ls_warm, f"{ls_warm * 1000:.0f} ms"))
        del d

    class Local:
        def __enter__(self):
            return Path("/")

        def __exit__(self, *exc):
            return False

    measure("local", local, Local)
    measure("lakefuse commit", Path(f"bench/{commit.id}/dir"),
            lambda: lakefuse_mount(home, workdir / "mnt-lake"))
    measure("lakefuse branch", Path("bench/main/dir"), lambda: lakefuse_mount(home, workdir / "mnt-lake"))
    measure("bindfs", Path("dir"), lambda: bindfs_mount(local.parent, workdir / "mnt-bind"))
    measure("pyfuse3 floor (no work per request)", Path("dir"),
            lambda: pyfuse3_floor_mount(workdir / "mnt-floor", n))
    if have("rclone"):
        measure("rclone --vfs-cache-mode full", Path("dir"),
                lambda: rclone_mount(local.parent, workdir / "mnt-rclone", workdir / "rclone-cache"))
    latencies = change_latencies(home, workdir / "mnt-lake")
    home.close()
    print_table(f"Metadata of {n} files (operations/s; higher is better)", rows, "ops/s", f"local: stat x{n} warm")
    latencies.sort()
    print(f"another process's write seen through the branch directory after: median "
          f"{latencies[len(latencies) // 2] * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms "
          f"({len(latencies)} writes; the mount polls every 0.5 s)")
    shutil.rmtree(workdir, ignore_errors=True)


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
