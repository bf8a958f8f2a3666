"""Shared pieces of the mount benchmarks (mount_read.py, mount_stat.py, mount_write.py):
a throw-away lakefuse home with one repository, mounts of lakefuse / bindfs / rclone that always
unmount, timing, and the side-by-side table.  Run the benchmarks as root on an idle machine."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READY_TIMEOUT = 60.0


def is_mounted(path: Path | str) -> bool:
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def unmount(path: Path | str) -> None:
    for cmd in (["fusermount3", "-u", str(path)], ["fusermount3", "-uz", str(path)], ["umount", "-l", str(path)]):
        if not is_mounted(path):
            return
        subprocess.run(cmd, capture_output=True)
        time.sleep(0.2)


class LakeHome:
    def __init__(self, workdir: Path):
        self.path = workdir / "home"
        self.path.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, LAKEFUSE_HOME=str(self.path))
        for var in ("LAKEFUSE_CONFIG", "LAKEFUSE_DATABASE_URL", "LAKEFUSE_CACHE_DIR"):
            self.env.pop(var, None)
        from lakefuse.app import App
        from lakefuse.config import load_config

        self.app = App(load_config(environ={"LAKEFUSE_HOME": str(self.path)}))
        self.catalog = self.app.catalog

    def create_repository(self, name: str) -> Path:
        self.catalog.create_repository(name, self.app.default_namespace(name))
        return Path(self.app.default_namespace(name)[len("local://"):])

    def close(self) -> None:
        self.app.close()


def show_mount_log(path: Path, last: int = 10) -> None:
    """Print the last lines of a benchmark mount's log (``lakefuse_mount`` writes warnings and
    errors to ``bench-mount.log`` in its home)."""
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    print(f"\nmount log ({path.name}, level WARNING): {len(lines)} lines")
    for line in lines[-last:]:
        print(f"  {line}")


@contextlib.contextmanager
def lakefuse_mount(home: LakeHome, mountpoint: Path, uri: str | None = None, args: tuple[str, ...] = (),
                   procs: list | None = None, source: str | None = None):
    """Mount ``uri`` (everything by default) at ``mountpoint`` until the block ends; ``procs``, if
    given, receives the daemon's ``Popen`` (to read its memory, say); ``source``: the directory
    of another lakefuse package to serve it with (an older version, to compare)."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    sock_dir = tempfile.mkdtemp(prefix="lfb-")
    sock_path = os.path.join(sock_dir, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    cmd = [sys.executable, "-m", "lakefuse.fuse", "mount", "-f", "--log-level", "WARNING",
           "--log-file", str(home.path / "bench-mount.log"), *args, str(mountpoint)] + ([uri] if uri else [])
    env = dict(home.env, NOTIFY_SOCKET=sock_path)
    if source is not None:
        env["PYTHONPATH"] = source
    # ``python -m`` puts its working directory first on sys.path: started from a checkout, the
    # daemon would run that checkout's lakefuse whatever PYTHONPATH says
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, cwd=source)
    if procs is not None:
        procs.append(proc)
    try:
        sock.settimeout(READY_TIMEOUT)
        while b"READY=1" not in sock.recv(4096):
            pass
        yield mountpoint
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        # after the daemon stopped: it tells the socket it is stopping (a warning in its log if gone)
        sock.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
        unmount(mountpoint)


@contextlib.contextmanager
def bindfs_mount(source: Path, mountpoint: Path):
    mountpoint.mkdir(parents=True, exist_ok=True)
    subprocess.run(["bindfs", "--no-allow-other", str(source), str(mountpoint)], check=True, capture_output=True)
    try:
        yield mountpoint
    finally:
        unmount(mountpoint)


@contextlib.contextmanager
def rclone_mount(source: Path, mountpoint: Path, cache_dir: Path):
    mountpoint.mkdir(parents=True, exist_ok=True)
    with _served_by(["rclone", "mount", str(source), str(mountpoint), "--vfs-cache-mode", "full",
                     "--cache-dir", str(cache_dir), "--config", "/dev/null"], mountpoint, "rclone mount"):
        yield mountpoint


@contextlib.contextmanager
def pyfuse3_floor_mount(mountpoint: Path, files: int, data: Path | None = None, dirs: int = 0):
    """The trivial pyfuse3 filesystem of pyfuse3_floor.py: ``dir/`` with ``files`` names (or
    ``dirs`` directories of ``files`` names each), and ``data.bin`` with the bytes of ``data``
    if given."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).with_name("pyfuse3_floor.py")
    extra = ["--data", str(data)] if data is not None else []
    if dirs:
        extra += ["--dirs", str(dirs)]
    with _served_by([sys.executable, str(script), str(mountpoint), "--files", str(files), *extra], mountpoint,
                    "the pyfuse3 floor filesystem"):
        yield mountpoint


@contextlib.contextmanager
def pyfuse3_mirror_mount(source: Path, mountpoint: Path):
    """pyfuse3_mirror.py: ``source`` read and written through the least a pyfuse3 filesystem
    can do per request (the binding's floor, beside bindfs)."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).with_name("pyfuse3_mirror.py")
    with _served_by([sys.executable, str(script), str(source), str(mountpoint)], mountpoint,
                    "the pyfuse3 mirror filesystem"):
        yield mountpoint


@contextlib.contextmanager
def _served_by(cmd: list[str], mountpoint: Path, what: str):
    """Run a FUSE server ``cmd`` until ``mountpoint`` is mounted; unmount and stop it after."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while not is_mounted(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not come up")
            time.sleep(0.05)
        yield
    finally:
        unmount(mountpoint)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


def drop_file_cache(path: Path) -> None:
    """Evict one file's pages from the page cache (works on FUSE files too)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(cmd: list[str], **kwargs) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, **kwargs)
    return time.perf_counter() - started


def best(runs: int, fn) -> float:
    return min(fn() for _ in range(runs))


def print_table(title: str, rows: list[tuple[str, float | None, str]], unit: str, reference: str) -> None:
    """rows: (label, value, note); ratios against the row labelled ``reference``."""
    ref = next((v for label, v, _ in rows if label == reference), None)
    width = max([44] + [len(label) for label, _, _ in rows])
    print(f"\n{title}")
    print(f"  {'':{width}} {unit:>12} {'vs ' + reference:>22}")
    for label, value, note in rows:
        if value is None:
            print(f"  {label:{width}} {'n/a':>12} {'':>22}  {note}")
            continue
        ratio = f"{value / ref:.2f}" if ref else ""
        print(f"  {label:{width}} {value:12.2f} {ratio:>22}  {note}")


# ---------------------------------------------------------------- the disk every system writes to

def unjournaled_ext4(path: Path | str) -> str | None:
    """The device of ``path``'s filesystem if it is ext4 without a journal, else None.

    Why it matters: ext4 without a journal checks, for each inode it is about to hand out,
    whether that inode was deleted in the last minute or so (``recently_deleted`` in the
    kernel's ialloc.c), reading the inode table to do so.  After a workload removed thousands of
    files, each create walks past all of them: seen here, bindfs took 0.2 s for a `git clone`
    on a fresh mount and 2 s a few clones later, nearly all of it in that check.  Every
    system that creates files on such a disk pays it; lakefuse less visibly, since it makes its
    spool files ahead on a thread of its own.  Figures taken there compare the disk's history,
    not the systems."""
    st_dev = os.stat(path).st_dev
    major_minor = f"{os.major(st_dev)}:{os.minor(st_dev)}"  # the filesystem ``path`` is on
    device = fstype = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[2] == major_minor:
                fstype, device = fields[fields.index("-") + 1:][:2]
    if fstype != "ext4" or device is None:
        return None
    # jbd2 names each journal after its block device: vda-8, loop0-8
    name = os.path.basename(os.path.realpath(f"/sys/dev/block/{major_minor}"))
    journals = os.listdir("/proc/fs/jbd2") if os.path.isdir("/proc/fs/jbd2") else []
    return None if any(j.startswith(name + "-") for j in journals) else device


@contextlib.contextmanager
def benchmark_disk(parent: Path | str | None, size_gib: int = 8):
    """A directory to run the benchmark in: under ``parent`` (the temp dir if None), unless that
    is ext4 without a journal (``unjournaled_ext4``) and this runs as root; then a journaled
    ext4 made for the run in a sparse file there, loop-mounted, removed after.  Yields the
    directory and a line saying what it is."""
    parent = Path(parent or tempfile.gettempdir())
    device = unjournaled_ext4(parent)
    if device is None or os.geteuid() != 0 or not have("mkfs.ext4"):
        note = f"{parent} ({'ext4 without a journal: creates after deletions are slow' if device else 'as is'})"
        yield parent, note
        return
    fd, name = tempfile.mkstemp(prefix="lakefuse-bench-", suffix=".ext4", dir=parent)
    os.close(fd)
    image = Path(name)
    mountpoint = Path(tempfile.mkdtemp(prefix="lakefuse-bench-fs-", dir=parent))
    try:
        os.truncate(image, size_gib << 30)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], check=True, capture_output=True)
        try:
            yield mountpoint, (f"a journaled ext4 of {size_gib} GiB made for this run ({parent} is on {device}, "
                               "ext4 without a journal: creates after deletions are slow there)")
        finally:
            for _ in range(50):
                if subprocess.run(["umount", str(mountpoint)], capture_output=True).returncode == 0:
                    break
                time.sleep(0.2)
            else:
                subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
    finally:
        with contextlib.suppress(OSError):
            mountpoint.rmdir()
        image.unlink(missing_ok=True)
