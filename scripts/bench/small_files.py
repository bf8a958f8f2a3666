"""Small files through shell tools: creating 2,000 x 4 KiB files, `tar x`, `cp -r`, `rsync -a`,
`grep -r` and `rm -r` of a tree of 1,400 files (54 MB), `git clone` of a 300-file repository, and the
cost of creating a file in a directory of 10,000 against an empty one, on a local directory,
bindfs, the pyfuse3 mirror (pyfuse3_mirror.py: the least any pyfuse3 filesystem does per
request), rclone mount (--vfs-cache-mode writes, when installed) and a lakefuse branch, side by
side in one run on the same disk (a journaled ext4 made for the run, where the temp dir is ext4
without a journal: see ``mount_common.unjournaled_ext4``).  The mirror splits lakefuse's gap to
bindfs in two: pyfuse3 / bindfs is what the binding costs, lakefuse / pyfuse3 what lakefuse does
beyond it.

    python scripts/bench/small_files.py [--runs 3] [--files 2000] [--big-dir 10000] [--workdir DIR] [--quick]

Every system is mounted once, and each run goes through the systems in a rotating order (this
VM's speed drifts), every workload in fresh directories of its own; the figures are medians of
the runs' seconds. Targets (issue 18): lakefuse no slower than bindfs, and 2x faster than
rclone.

Durability: no workload calls fsync or sync; every figure stops when the tool exits. The
benchmark syncs, untimed, before each workload. lakefuse's close stores the file's object (no
fsync) and stages a new file's entry in a batch within 50 ms; fsync(2) and commits are its
durability points (docs/mount.md#durability). rclone's close leaves the file in
its cache and copies it to the backing directory 5 s later (--vfs-write-back), and lakefuse
deletes the objects of removed files (never committed) a second after their unlink; the
benchmark waits, untimed, until such a server has no more work to do (its CPU time stops
growing) before it times anything else, so that no workload pays for the one before it.
`grep -r` runs twice over the tree `cp -r` wrote: once just after, and once more at the end of
the run, cold: after syncing and dropping the kernel's caches (/proc/sys/vm/drop_caches; the
servers keep their own caches).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mount_common import (
    READY_TIMEOUT,
    LakeHome,
    benchmark_disk,
    bindfs_mount,
    have,
    is_mounted,
    lakefuse_mount,
    pyfuse3_mirror_mount,
    show_mount_log,
    unmount,
)

from lakefuse.fs.owned import RECLAIM_DELAY

KiB = 1024
NEEDLE = "lakefuse-needle-18"  # hex text cannot contain it: grep finds exactly the planted lines
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "bench",
           "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "bench",
           "GIT_COMMITTER_EMAIL": "bench@example.invalid", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


@dataclass
class System:
    label: str
    base: Path  # the workloads' directories go here
    idle: Callable[[], None] = lambda: None  # returns once the server has no work left in the background
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def record(self, workload: str, value: float) -> None:
        self.seconds.setdefault(workload, []).append(value)


# fixtures: made once, locally

def make_tree(root: Path, files: int, dirs: int, seed: int = 18) -> tuple[int, int]:
    """``files`` text files of 1-200 KiB (log-uniform, about 38 KiB on average) spread over
    ``dirs`` directories (a quarter of them at the top, the rest one level below), each file's
    bytes its own; every 7th file holds a line with NEEDLE. Returns (total bytes, files with NEEDLE)."""
    rng = random.Random(seed)
    tops = max(1, dirs // 4)
    directories = [root / f"d{t:02d}" for t in range(tops)]
    directories += [root / f"d{i % tops:02d}" / f"s{i:02d}" for i in range(dirs - tops)]
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
    total = needles = 0
    for i in range(files):
        size = int(KiB * 200 ** rng.random())
        text = rng.randbytes(size // 2 + 1).hex()
        lines = [text[p:p + 99] for p in range(0, len(text), 99)]
        if i % 7 == 0:
            lines.insert(len(lines) // 2, NEEDLE)
            needles += 1
        data = ("\n".join(lines) + "\n").encode()[:max(size, len(NEEDLE) + 2)]
        if i % 7 == 0 and NEEDLE.encode() not in data:
            data = NEEDLE.encode() + b"\n" + data[len(NEEDLE) + 1:]
        (directories[i % len(directories)] / f"file{i:05d}.txt").write_bytes(data)
        total += len(data)
    return total, needles


def make_git_repo(path: Path, files: int, commits: int, seed: int = 18) -> None:
    """A repository of ``files`` small text files (100 B-4 KiB) in a few directories, added over
    ``commits`` commits, each commit also changing a few files of the earlier ones."""
    rng = random.Random(seed)
    path.mkdir(parents=True)
    env = dict(os.environ, **GIT_ENV)
    git = lambda *a: subprocess.run(["git", *a], cwd=path, env=env, check=True, capture_output=True)
    git("init", "-q", "-b", "main")
    written: list[Path] = []
    per_commit = -(-files // commits)
    for c in range(commits):
        for i in range(c * per_commit, min(files, (c + 1) * per_commit)):
            f = path / ["src", "src/core", "src/util", "docs", "tests", "data"][i % 6] / f"m{i:04d}.txt"
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(rng.randbytes(int(50 * 40 ** rng.random())).hex() + "\n")
            written.append(f)
        for f in rng.sample(written, min(5, len(written))):
            with open(f, "a") as out:
                out.write(f"change {c}\n")
        git("add", "-A")
        git("commit", "-q", "-m", f"commit {c}")


# the workloads: each returns seconds

def run(cmd: list[str], **kwargs) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, **kwargs)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed


def create_files(directory: Path, names: list[str], size: int = 4 * KiB) -> float:
    """open, write ``size`` bytes (the name, then filler: every file's bytes its own), close."""
    filler = b"x" * size
    started = time.perf_counter()
    for name in names:
        with open(directory / name, "wb") as f:
            f.write((name.encode() + filler)[:size])
    return time.perf_counter() - started


def grep(tree: Path, expected: int) -> float:
    started = time.perf_counter()
    done = subprocess.run(["grep", "-r", "-l", NEEDLE, str(tree)], capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    found = len(done.stdout.splitlines())
    if done.returncode != 0 or found != expected:
        raise RuntimeError(f"grep -r in {tree}: {found} files, expected {expected}: {done.stderr.decode()[-500:]}")
    return elapsed


def count_files(tree: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(tree))


def drop_caches(what: int = 3) -> bool:
    """Sync, then drop the kernel's caches (``what``: 3 pages, dentries and inodes; 2 the
    dentries and inodes only); False if not allowed."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write(f"{what}\n")
        return True
    except OSError:
        return False


# rclone with --vfs-cache-mode writes (mount_common's rclone_mount uses full)

@contextlib.contextmanager
def rclone_writes_mount(source: Path, mountpoint: Path, cache_dir: Path, log: Path):
    mountpoint.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as err:
        proc = subprocess.Popen(["rclone", "mount", str(source), str(mountpoint), "--vfs-cache-mode", "writes",
                                 "--cache-dir", str(cache_dir), "--config", "/dev/null"],
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while not is_mounted(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"rclone mount did not come up (see {log})")
            time.sleep(0.05)
        yield proc
    finally:
        unmount(mountpoint)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_idle(pid: int, first: float, window: float = 0.5, limit: float = 300.0) -> None:
    """Sleep ``first`` seconds (rclone's write-back delay), then until the process spends
    under 2% of a CPU over ``window``."""
    time.sleep(first)
    deadline = time.monotonic() + limit
    before = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = cpu_seconds(pid)
        if now - before < 0.02 * window:
            return
        before = now


# the benchmark

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument("--files", type=int, default=None, help="4 KiB files to create (default 2000)")
    parser.add_argument("--tree-files", type=int, default=None, help="files of the tar/cp/grep/rm tree (default 1400)")
    parser.add_argument("--big-dir", type=int, default=None, help="files already in the big directory (default 10000)")
    parser.add_argument("--new-files", type=int, default=None,
                        help="files created in the big and in an empty directory (default 200)")
    parser.add_argument("--workdir", default=None,
                        help="parent of the throw-away directory (default: the temp dir); on ext4 without a journal, "
                             "run as root, a journaled ext4 made there for the run instead")
    parser.add_argument("--quick", action="store_true", help="small sizes, one run: a check that it works")
    args = parser.parse_args()
    quick = args.quick
    runs = args.runs or (1 if quick else 3)
    n_files = args.files or (200 if quick else 2000)
    tree_files = args.tree_files or (140 if quick else 1400)
    big = args.big_dir or (1000 if quick else 10_000)
    new = args.new_files or (50 if quick else 200)
    git_files, git_commits = (60, 3) if quick else (300, 6)

    with benchmark_disk(args.workdir) as (disk, about_disk):
        print(f"disk: {about_disk}", flush=True)
        workdir = Path(tempfile.mkdtemp(prefix="lakefuse-bench-", dir=disk))
        try:
            bench(workdir, runs, n_files, tree_files, big, new, git_files, git_commits)
        except Exception:
            # what lakefuse said about the failure, before its home goes with the work directory
            show_mount_log(workdir / "home" / "bench-mount.log", last=30)
            raise
        finally:
            for mnt in workdir.glob("mnt-*"):
                unmount(mnt)
            shutil.rmtree(workdir, ignore_errors=True)


def bench(workdir: Path, runs: int, n_files: int, tree_files: int, big: int, new: int,
          git_files: int, git_commits: int) -> None:
    started = time.monotonic()
    fixtures = workdir / "fixtures"
    tree = fixtures / "tree"
    tree_bytes, needles = make_tree(tree, tree_files, max(4, tree_files * 40 // 1400))
    tarball = fixtures / "tree.tar"
    subprocess.run(["tar", "-cf", str(tarball), "-C", str(fixtures), "tree"], check=True)
    git_src = fixtures / "repo"
    use_git = have("git")
    if use_git:
        make_git_repo(git_src, git_files, git_commits)
    use_rclone = have("rclone")
    use_rsync = have("rsync")
    print(f"fixtures: tree of {tree_files} files, {tree_bytes / 1e6:.1f} MB in "
          f"{sum(1 for p in tree.rglob('*') if p.is_dir())} directories (tar {tarball.stat().st_size / 1e6:.1f} MB); "
          + (f"git repository of {git_files} files in {git_commits} commits" if use_git else "git: n/a")
          + f"; rclone: {'yes' if use_rclone else 'n/a'}", flush=True)

    home = LakeHome(workdir)
    home.create_repository("bench")
    cold_ok = True
    try:
        with contextlib.ExitStack() as stack:
            local = workdir / "local"
            local.mkdir()
            systems = [System("local", local)]
            (workdir / "bind-src").mkdir()
            systems.append(System("bindfs", stack.enter_context(bindfs_mount(workdir / "bind-src", workdir / "mnt-bind"))))
            (workdir / "mirror-src").mkdir()
            systems.append(System("pyfuse3", stack.enter_context(
                pyfuse3_mirror_mount(workdir / "mirror-src", workdir / "mnt-mirror"))))
            if use_rclone:
                (workdir / "rclone-src").mkdir()
                proc = stack.enter_context(rclone_writes_mount(workdir / "rclone-src", workdir / "mnt-rclone",
                                                               workdir / "rclone-cache", workdir / "rclone.log"))
                systems.append(System("rclone", workdir / "mnt-rclone",
                                      idle=lambda pid=proc.pid: wait_until_idle(pid, first=5.5)))
            daemon: list = []
            systems.append(System("lakefuse", stack.enter_context(
                lakefuse_mount(home, workdir / "mnt-lake", "lakefs://bench/main", procs=daemon)),
                # the objects of removed files are deleted RECLAIM_DELAY s after their unlink
                idle=lambda: wait_until_idle(daemon[0].pid, first=RECLAIM_DELAY + 0.5)))

            def settle(system: System) -> None:
                system.idle()
                os.sync()

            names = [f"f{i:05d}.dat" for i in range(n_files)]
            for r in range(runs):
                for system in systems[r % len(systems):] + systems[:r % len(systems)]:
                    d = system.base / f"run{r}"
                    for sub in ("small", "tar", "empty"):
                        (d / sub).mkdir(parents=True)
                    settle(system)
                    system.record("create", create_files(d / "small", names))
                    settle(system)
                    system.record("tar", run(["tar", "-x", "--no-same-owner", "-f", str(tarball), "-C", str(d / "tar")]))
                    settle(system)
                    system.record("cp", run(["cp", "-r", str(tree), str(d / "cp")]))
                    if use_rsync:  # a temporary name per file, renamed into place; times and modes set
                        settle(system)
                        system.record("rsync", run(["rsync", "-a", f"{tree}/", str(d / "rsync")]))
                        assert count_files(d / "rsync") == tree_files
                    settle(system)
                    system.record("grep", grep(d / "cp", needles))
                    assert count_files(d / "tar") == tree_files
                    settle(system)
                    system.record("rm", run(["rm", "-r", str(d / "tar" / "tree")]))
                    if use_git:
                        settle(system)
                        system.record("git clone", run(["git", "clone", "-q", "--no-hardlinks", str(git_src),
                                                        str(d / "clone")], env=dict(os.environ, **GIT_ENV)))
                        assert count_files(d / "clone") - count_files(d / "clone" / ".git") == git_files
                    if drop_caches():  # last: the workloads before it find the caches as the tools left them
                        system.record("grep cold", grep(d / "cp", needles))
                    else:
                        cold_ok = False
                    for attempt in range(3):  # untimed: the next run starts without this one's files
                        settle(system)
                        try:
                            run(["rm", "-rf", str(d)])
                            break
                        except RuntimeError:  # rclone's VFS may answer EIO while it writes back
                            if attempt == 2:
                                raise
                            time.sleep(1)
                    # the next system's workloads start once this one's background work is done
                    # (rclone uploads what it cached 5 s after the files closed: it had taken
                    # the CPU from the system measured after it, lakefuse in every run)
                    settle(system)
                    print(f"  run {r + 1}/{runs} {system.label}: done ({time.monotonic() - started:.0f} s)", flush=True)

            # the Nth file in a big directory: filled once per system (untimed), then each run
            # creates new files in it and as many in a fresh empty directory, and removes them
            fill = {}
            for system in systems:
                (system.base / "big").mkdir()
                settle(system)
                fill[system.label] = create_files(system.base / "big", [f"b{i:06d}.dat" for i in range(big)])
            if use_rclone:
                deadline = time.monotonic() + 300
                while len(os.listdir(workdir / "rclone-src" / "big")) < big and time.monotonic() < deadline:
                    time.sleep(0.5)
            for r in range(runs):
                for system in systems[r % len(systems):] + systems[:r % len(systems)]:
                    empty = system.base / f"empty{r}"
                    empty.mkdir()
                    new_names = [f"n{r}-{i:05d}.dat" for i in range(new)]
                    settle(system)
                    t_empty = create_files(empty, new_names)
                    settle(system)
                    t_big = create_files(system.base / "big", new_names)
                    system.record("empty dir", t_empty)
                    system.record("big dir", t_big)
                    system.record("big/empty", t_big / t_empty)
                    for name in new_names:
                        os.unlink(system.base / "big" / name)
                    run(["rm", "-rf", str(empty)])
                    settle(system)  # before the next system's creates (see the runs above)
            print(f"  big directories done ({time.monotonic() - started:.0f} s)", flush=True)
    finally:
        home.close()

    rows = [("create", f"create {n_files} x 4 KiB files (Python)"),
            ("tar", f"tar x: {tree_files} files, {tree_bytes / 1e6:.0f} MB"),
            ("cp", "cp -r of the same tree"),
            ("rsync", "rsync -a of the same tree"),
            ("grep", "grep -r, tree just written"),
            ("grep cold", "grep -r, cold (kernel caches dropped)"),
            ("rm", "rm -r of the tar x tree"),
            ("git clone", f"git clone --no-hardlinks ({git_files} files)"),
            ("empty dir", f"create {new} files in an empty dir"),
            ("big dir", f"create {new} files in a dir of {big}"),
            ("big/empty", "  per-file cost, big dir / empty dir")]
    report(systems, rows, runs, fill, big, cold_ok, use_git, use_rclone)


def report(systems: list[System], rows, runs: int, fill: dict, big: int, cold_ok: bool, use_git: bool,
           use_rclone: bool) -> None:
    by_label = {s.label: s for s in systems}
    columns = ["local", "bindfs", "pyfuse3", "rclone", "lakefuse"]
    width = max(len(text) for _, text in rows)

    def med(label: str, key: str) -> float | None:
        system = by_label.get(label)
        return statistics.median(system.seconds[key]) if system and system.seconds.get(key) else None

    print(f"\nSmall files through shell tools (seconds, median of {runs} run{'s' if runs > 1 else ''}; "
          f"ratios above 1: lakefuse slower; pyfuse3: pyfuse3_mirror.py; rclone --vfs-cache-mode writes)")
    print(f"  {'':{width}} " + " ".join(f"{c:>9}" for c in columns)
          + f" {'lf/bindfs':>10} {'lf/rclone':>10}  {'<= bindfs':>10} {'<= rclone/2':>12}"
          + f" {'lf/pyfuse3':>11} {'pyfuse3/bindfs':>15}")
    met = {"bindfs": [0, 0], "rclone": [0, 0]}
    for key, text in rows:
        values = {c: med(c, key) for c in columns}
        cells = " ".join(f"{v:9.3f}" if v is not None else f"{'n/a':>9}" for v in values.values())
        ratio_cells, target_cells = [], []
        for ref, limit in (("bindfs", 1.0), ("rclone", 0.5)):
            lake, other = values["lakefuse"], values[ref]
            if lake is None or other is None or key == "big/empty":
                ratio_cells.append(f"{'':>10}" if key == "big/empty" else f"{'n/a':>10}")
                target_cells.append("" if key == "big/empty" else "n/a")
                continue
            ratio = lake / other
            ratio_cells.append(f"{ratio:10.2f}")
            ok = ratio <= limit
            target_cells.append("met" if ok else "not met")
            met[ref][0] += ok
            met[ref][1] += 1
        split = ""  # the gap to bindfs: the binding's part, and lakefuse's own
        if key != "big/empty" and values["pyfuse3"]:
            lake_floor = f"{values['lakefuse'] / values['pyfuse3']:.2f}" if values["lakefuse"] else "n/a"
            floor_bind = f"{values['pyfuse3'] / values['bindfs']:.2f}" if values["bindfs"] else "n/a"
            split = f" {lake_floor:>11} {floor_bind:>15}"
        if key == "big/empty":
            cells = " ".join(f"{v:8.2f}x" if v is not None else f"{'n/a':>9}" for v in values.values())
        print(f"  {text:{width}} {cells} {' '.join(ratio_cells)}  {target_cells[0]:>10} {target_cells[1]:>12}{split}")
    print(f"\n  target 'no slower than bindfs' (lakefuse/bindfs <= 1): met in {met['bindfs'][0]} of {met['bindfs'][1]} workloads")
    if use_rclone:
        print(f"  target '2x faster than rclone' (lakefuse/rclone <= 0.5): met in {met['rclone'][0]} of {met['rclone'][1]} workloads")
    else:
        print("  target '2x faster than rclone': n/a (rclone not installed)")
    print(f"  filling the big directory with {big} files (once, untimed above): "
          + ", ".join(f"{label} {seconds:.2f} s" for label, seconds in fill.items()))
    if not cold_ok:
        print("  grep cold: n/a (/proc/sys/vm/drop_caches is not writable)")
    if not use_git:
        print("  git clone: n/a (git not installed)")
    print("\n  every run's seconds:")
    for s in systems:
        print(f"  {s.label:>9}: " + "  ".join(f"{key} " + "/".join(f"{v:.2f}" for v in vals)
                                           for key, vals in s.seconds.items() if key != "big/empty"))


if __name__ == "__main__":
    main()
