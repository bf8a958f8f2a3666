"""Read throughput of a 1 GiB object: lakefuse vs local cat vs bindfs (vs rclone mount
--vfs-cache-mode full), first read and re-read, side by side with ratios.

    python scripts/bench/mount_read.py [--size-mib 1024] [--runs 3] [--workdir DIR]

"First read": the mount's page cache for the file is empty (evicted with fadvise), the storage
file underneath is warm, as for bindfs.  "Re-read": the mount's pages are cached (lakefuse
opens immutable objects with keep_cache).  Targets: first read >= 1 GB/s and >= 0.7 of bindfs;
re-read >= 0.7 of a warm local cat.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from mount_common import (LakeHome, best, bindfs_mount, drop_file_cache, have, lakefuse_mount, print_table,
                          rclone_mount, timed)

MiB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="lakefuse-bench-", dir=args.workdir))
    size = args.size_mib * MiB
    gb = size / 1e9

    home = LakeHome(workdir)
    storage = home.create_repository("bench")
    source = workdir / "source.bin"
    with open(source, "wb") as f:
        for _ in range(args.size_mib):
            f.write(os.urandom(MiB))
    entry = home.catalog.upload_file("bench", "main", "big.bin", str(source))
    commit = home.catalog.commit("bench", "main", "big", "bench")
    stored = storage / entry.physical_address
    rows = []

    def cat(path: Path) -> float:
        return timed(["cat", str(path)])

    cat(stored)  # warm the storage file
    local = best(args.runs, lambda: cat(stored))
    rows.append(("local cat (warm page cache)", gb / local, ""))

    def first_and_again(path: Path) -> tuple[float, float]:
        def first() -> float:
            drop_file_cache(path)
            return cat(path)
        return best(args.runs, first), best(args.runs, lambda: cat(path))

    with lakefuse_mount(home, workdir / "mnt-lake") as mnt:
        for label, path in (("commit", mnt / f"bench/{commit.id}/big.bin"), ("branch", mnt / "bench/main/big.bin")):
            first, again = first_and_again(path)
            rows.append((f"lakefuse first read ({label})", gb / first, ""))
            rows.append((f"lakefuse re-read ({label})", gb / again, ""))
    with bindfs_mount(storage, workdir / "mnt-bind") as mnt:
        first, again = first_and_again(mnt / entry.physical_address)
        rows.append(("bindfs first read", gb / first, ""))
        rows.append(("bindfs re-read", gb / again, ""))
    if have("rclone"):
        try:
            with rclone_mount(storage, workdir / "mnt-rclone", workdir / "rclone-cache") as mnt:
                path = mnt / entry.physical_address
                first = cat(path)
                again = best(args.runs, lambda: cat(path))
                rows.append(("rclone --vfs-cache-mode full first read", gb / first, "(one run: it caches)"))
                rows.append(("rclone --vfs-cache-mode full re-read", gb / again, ""))
        except Exception as exc:  # noqa: BLE001 - optional comparison
            rows.append(("rclone mount", None, f"failed: {exc}"))
    else:
        rows.append(("rclone mount", None, "rclone not installed"))
    home.close()

    values = dict((label, value) for label, value, _ in rows)
    print_table(f"Read of a {args.size_mib} MiB object (GB/s, best of {args.runs})", rows, "GB/s",
                "local cat (warm page cache)")
    first = values["lakefuse first read (commit)"]
    print(f"\n  lakefuse first read / bindfs first read: {first / values['bindfs first read']:.2f} (target >= 0.7)")
    print(f"  lakefuse first read: {first:.2f} GB/s (target >= 1.0)")
    print(f"  lakefuse re-read / local cat: {values['lakefuse re-read (commit)'] / values['local cat (warm page cache)']:.2f}"
          " (target >= 0.7)")
    import shutil

    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
