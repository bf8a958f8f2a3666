"""What lakefuse itself costs per small file created on a branch, without the kernel.

Drives ``LakeFilesystem`` in one process over the real core (local directory storage and
SQLite, in a fresh ``LAKEFUSE_HOME``) through the calls a FUSE mount makes for Python's
``open(name, "wb").write(4 KiB)`` and close: LOOKUP of the new name, CREATE, FLUSH and
RELEASE, on the event loop's paths where they have one (``blocking=False``), as
``lakefuse.fuse.operations`` calls them.  The kernel's part is played here: a stand-in for its
passthrough registry hands out backing ids, and the script writes the 4 KiB into the spool
the kernel would write (``FileHandle.kernel_writes``).  The stager, the spool reserve and the
other threads of a mount run as they do there, and the garbage collector is tuned as a mount
tunes it (``lakefuse.fuse.runner.tune_garbage_collector``).

Beside it, in the same run, the whole per-file time of the same loop through bindfs (kernel
round trips and all): what lakefuse's own work must fit in for the issue's "no slower than
bindfs" creates.  Where this script's figure alone is above bindfs's, no change in the FUSE
binding or the kernel's part can meet that target; only less work per file in lakefuse can.

    python scripts/bench/create_path.py [--files 2000] [--runs 5] [--workdir DIR] [--profile]

Prints, per run and as medians: microseconds per file for LOOKUP + CREATE, the script's write
(the kernel's part), FLUSH + RELEASE, the whole loop and the loop thread's CPU time (the
steadiest figure to compare two versions by: it leaves out the waits for the interpreter lock
that the other threads cause), how slow the slowest files were (p90, p99, the share of the
loop's time in files over 1 ms), and the CPU time of the mount's other threads per file (the
stager writing the entries, the spool reserve making the next spools): their Python holds the
interpreter lock the loop waits for, and each time one of them takes it while the loop is in a
system call, the loop's return waits for a thread switch; then bindfs's per-file time and
the ratio.
``--profile`` also prints cProfile's top functions of one more run.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import errno
import itertools
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FILE_BYTES = 4096
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
#: how long a run waits after its loop before reading the other threads' CPU
SETTLE_SECONDS = 0.3


class StandInBackings:
    """The kernel's passthrough registry as ``lakefuse.fs.passthrough`` sees it: ids only."""

    def __init__(self):
        self._ids = itertools.count(1)

    def open(self, path, size=None, read_ahead=0) -> int:
        return next(self._ids)

    def register(self, fd: int) -> int:
        return next(self._ids)

    def close(self, backing_id: int) -> None:
        pass


class CreatePath:
    """A ``LakeFilesystem`` over a fresh home with repository ``bench``, and the create loop."""

    def __init__(self, workdir: Path):
        from lakefuse.app import App
        from lakefuse.config import load_config
        from lakefuse.fs.app_backend import AppBackend
        from lakefuse.fs.filesystem import LakeFilesystem
        from lakefuse.fs.readers import BlockCache, RamBlockStore
        from lakefuse.fs.replies import WouldBlock

        self.WouldBlock = WouldBlock
        home = workdir / "home"
        self.app = App(load_config(environ={"LAKEFUSE_HOME": str(home)}))
        self.app.catalog.create_repository("bench", self.app.default_namespace("bench"))
        # watched branches, as a mount has them by default (its change poll): what the mount
        # learnt of a directory stays true until the change feed says otherwise
        self.fs = LakeFilesystem(AppBackend(self.app, BlockCache(RamBlockStore(64 << 20))),
                                 spool_dir=str(workdir / "spool"), change_feed=True)
        self.fs.enable_passthrough(StandInBackings())
        from lakefuse.fuse.runner import tune_garbage_collector

        tune_garbage_collector()
        self.branch = self.fs.lookup(self.fs.lookup(1, "bench").ino, "main").ino
        self.hops = 0  # calls that would have gone to a worker thread (WouldBlock)

    def close(self) -> None:
        self.fs.close()
        self.app.close()

    def _nowait(self, call, *args):
        """The event loop's attempt, then the worker thread's, as the FUSE adapter makes them."""
        return self._either(lambda: call(*args, blocking=False), lambda: call(*args))

    def _either(self, on_loop, on_thread):
        """``on_loop()``, or ``on_thread()`` when that would block (a hop, counted)."""
        try:
            return on_loop()
        except self.WouldBlock:
            self.hops += 1
            return on_thread()

    def _lookup_missing(self, directory: int, name: str) -> None:
        try:
            attrs = self._nowait(self.fs.lookup, directory, name)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
            return
        if attrs.ino != 0:
            raise RuntimeError(f"{name} exists already")

    def _create(self, directory: int, name: str):
        """CREATE of a new file, as root; its ``OpenResult``."""
        create = self.fs.create
        return self._either(lambda: create(directory, name, 0o100644, CREATE_FLAGS, False, 0, 0),
                            lambda: create(directory, name, 0o100644, CREATE_FLAGS, True, 0, 0))[0]

    def _flush(self, fh: int) -> None:
        self._either(lambda: self.fs.flush_nowait(fh), lambda: self.fs.flush(fh))

    def _release(self, fh: int) -> None:
        self._either(lambda: self.fs.release_nowait(fh), lambda: self.fs.release(fh))

    def run(self, directory_name: str, files: int) -> dict[str, float]:
        """Create ``files`` files of 4 KiB in a new directory; microseconds per file of each part
        (medians) and of the whole loop (mean)."""
        fs = self.fs
        data = b"x" * FILE_BYTES
        directory = fs.mkdir(self.branch, directory_name, 0o755, uid=0, gid=0).ino
        parts: dict[str, list[float]] = {"lookup+create": [], "kernel write": [], "flush+release": []}
        per_file: list[float] = []
        clock = time.perf_counter
        threads = background_threads()
        others_before = {name: thread_cpu(tid) for name, tid in threads.items()}
        cpu_started = time.thread_time()
        started = clock()
        for i in range(files):
            name = f"f{i:05d}"
            t0 = clock()
            self._lookup_missing(directory, name)
            result = self._create(directory, name)
            t1 = clock()
            handle = fs._handles.get(result.fh)
            if handle.kernel_writes:  # the kernel's passthrough write into the spool
                os.pwrite(handle.open_file.spool.fd, data, 0)
            else:
                fs.write(result.fh, 0, data)
            t2 = clock()
            self._flush(result.fh)
            self._release(result.fh)
            t3 = clock()
            parts["lookup+create"].append(t1 - t0)
            parts["kernel write"].append(t2 - t1)
            parts["flush+release"].append(t3 - t2)
            per_file.append(t3 - t0)
        total = clock() - started
        cpu = time.thread_time() - cpu_started
        time.sleep(SETTLE_SECONDS)  # the stager's last batch, the reserve's refill
        others = {name: thread_cpu(tid) - others_before[name] for name, tid in threads.items()}
        out = {k: statistics.median(v) * 1e6 for k, v in parts.items()}
        out["whole loop"] = total / files * 1e6
        out["its CPU"] = cpu / files * 1e6  # this thread's: without the waits for the interpreter lock
        per_file.sort()
        out["p90"] = per_file[int(0.9 * (files - 1))] * 1e6
        out["p99"] = per_file[int(0.99 * (files - 1))] * 1e6
        # the files above 1 ms: their share of the loop's time
        out["over 1 ms %"] = 100 * sum(t for t in per_file if t > 1e-3) / total
        for name, seconds in others.items():  # the other threads' CPU: it competes for the interpreter lock
            out[f"{name.removeprefix('lakefuse-')} CPU"] = seconds / files * 1e6
        return out


def background_threads() -> dict[str, int]:
    """The mount's own threads in this process (name -> native thread id)."""
    return {thread.name: thread.native_id for thread in threading.enumerate()
            if thread.name.startswith("lakefuse-") and thread.native_id is not None}


def thread_cpu(native_id: int) -> float:
    """CPU seconds (user + system) a thread of this process used so far; 0 once it is gone."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bindfs_per_file(workdir: Path, files: int, runs: int) -> list[float]:
    """Microseconds per file of the same loop (os.open, os.write, os.close) through bindfs."""
    if shutil.which("bindfs") is None:
        return []
    from mount_common import bindfs_mount

    (workdir / "plain").mkdir()
    data = b"x" * FILE_BYTES
    out = []
    with bindfs_mount(workdir / "plain", workdir / "bindfs") as mountpoint:
        for run in range(runs):
            directory = mountpoint / f"run{run}"
            directory.mkdir()
            started = time.perf_counter()
            for i in range(files):
                fd = os.open(directory / f"f{i:05d}", CREATE_FLAGS, 0o644)
                os.write(fd, data)
                os.close(fd)
            out.append((time.perf_counter() - started) / files * 1e6)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workdir", help="where to make the home and bindfs's directory (default: a temp dir)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of one more run")
    args = parser.parse_args(argv)
    if args.files < 1 or args.runs < 1:
        parser.error("--files and --runs must be at least 1")
    workdir = Path(tempfile.mkdtemp(prefix="lf-create-path-", dir=args.workdir))
    path = CreatePath(workdir)
    try:
        path.run("warm", min(args.files, 200))  # the repository's storage opened, the spool reserve started
        print(f"lakefuse in one process, {args.files} files of {FILE_BYTES} bytes per run "
              "(microseconds per file; parts are medians, the whole loop a mean)", flush=True)
        runs = []
        for run in range(args.runs):
            figures = path.run(f"run{run}", args.files)
            runs.append(figures)
            print(f"  run {run + 1}: " + ", ".join(f"{k} {v:.0f}" for k, v in figures.items()), flush=True)
        median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print("  median: " + ", ".join(f"{k} {v:.0f}" for k, v in median.items()))
        print(f"  calls that went to a worker thread: {path.hops}")
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            path.run("profiled", args.files)
            profile.disable()
            pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    finally:
        path.close()
    try:
        bindfs = bindfs_per_file(workdir, args.files, args.runs)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(workdir)
    if not bindfs:
        print("bindfs: n/a (not installed)")
        return 0
    whole = statistics.median(bindfs)
    print(f"bindfs through the kernel, the whole loop: {', '.join(f'{v:.0f}' for v in bindfs)}; median {whole:.0f}")
    print(f"lakefuse's own work / bindfs's whole time: {median['whole loop'] / whole:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
