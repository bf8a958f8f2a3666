"""Write throughput: cp of a 1 GiB file into a branch through lakefuse vs cp to local disk
(and cp + sync, the same durability as lakefuse's upload, which fsyncs) vs cp through bindfs.

    python scripts/bench/mount_write.py [--size-mib 1024] [--runs 2] [--workdir DIR]

The lakefuse time includes close(), which uploads and stages the object.  Target: >= 0.5 of
cp to local disk.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from mount_common import LakeHome, best, bindfs_mount, lakefuse_mount, print_table, timed

MiB = 1024 * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="lakefuse-bench-", dir=args.workdir))
    gb = args.size_mib * MiB / 1e9
    home = LakeHome(workdir)
    home.create_repository("bench")
    source = workdir / "source.bin"
    with open(source, "wb") as f:
        for _ in range(args.size_mib):
            f.write(os.urandom(MiB))
    subprocess.run(["cat", str(source)], stdout=subprocess.DEVNULL, check=True)  # warm the source
    target_dir = workdir / "local-target"
    target_dir.mkdir()
    bind_source = workdir / "bind-source"
    bind_source.mkdir()
    rows = []

    def settle() -> None:
        os.sync()  # start every run without dirty pages of the previous one
        time.sleep(1)

    def local_cp() -> float:
        settle()
        t = timed(["cp", str(source), str(target_dir / "copy.bin")])
        os.unlink(target_dir / "copy.bin")
        return t

    def local_cp_sync() -> float:
        settle()
        started = time.perf_counter()
        subprocess.run(["cp", str(source), str(target_dir / "copy.bin")], check=True)
        fd = os.open(target_dir / "copy.bin", os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        elapsed = time.perf_counter() - started
        os.unlink(target_dir / "copy.bin")
        return elapsed

    rows.append(("cp to local disk", gb / best(args.runs, local_cp), ""))
    rows.append(("cp + fsync to local disk", gb / best(args.runs, local_cp_sync), ""))
    with lakefuse_mount(home, workdir / "mnt-lake", "lakefs://bench/main") as mnt:
        counter = iter(range(100))

        def lake_cp() -> float:
            settle()
            return timed(["cp", str(source), str(mnt / f"copy{next(counter)}.bin")])

        rows.append(("cp into a lakefuse branch (incl. upload)", gb / best(args.runs, lake_cp), ""))
        copied = mnt / "copy0.bin"
        assert copied.stat().st_size == args.size_mib * MiB
    with bindfs_mount(bind_source, workdir / "mnt-bind") as mnt:
        def bind_cp() -> float:
            settle()
            t = timed(["cp", str(source), str(mnt / "copy.bin")])
            os.unlink(mnt / "copy.bin")
            return t

        rows.append(("cp through bindfs", gb / best(args.runs, bind_cp), ""))
    home.close()
    print_table(f"cp of a {args.size_mib} MiB file (GB/s, best of {args.runs})", rows, "GB/s", "cp to local disk")
    values = {label: value for label, value, _ in rows}
    print(f"\n  lakefuse / cp to local disk: {values['cp into a lakefuse branch (incl. upload)'] / values['cp to local disk']:.2f}"
          " (target >= 0.5)")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
