"""Which FUSE requests a shell workload makes, and how long each kind took to be answered, on
bindfs, the pyfuse3 mirror (pyfuse3_mirror.py over a local directory: the least a pyfuse3
server does per request) and a lakefuse branch side by side: the kernel's own view, from its
FUSE tracepoints (``fuse:fuse_request_send`` and ``fuse:fuse_request_end``, Linux 6.12 and
later), with no instrumentation in any server.

    python scripts/bench/fuse_requests.py [--workload create|utime|tar|cp|rsync|grep|git|rm|all] [--files 300]
        [--runs 2] [--workdir DIR]

Per workload and system: the workload's seconds, then per request kind (LOOKUP, CREATE,
RELEASE, ...) how many the kernel sent, the total and the median of their latencies (from
the kernel queueing the request to the server's reply: a request that waited behind another
one in a single-threaded server counts that wait), the three systems side by side, with
lakefuse's total over bindfs's.  What it shows that a profile of the server does not: which requests a workload
makes at all (``git clone`` makes 1,346 RELEASE for 300 files), and which kind of request
holds the caller up.  Requests answered in the kernel (a cached lookup, a read of cached
pages) never reach a server and are not counted.

Only requests of the mounts measured are counted (the tracepoints' ``connection`` is the
mount's device number), traced in a tracing instance of the script's own (other users of
tracefs do not disturb it).  Needs root and tracefs (mounted at /sys/kernel/tracing if it is
not); exits 2 with a one-line reason when the kernel has no FUSE tracepoints.  The workloads:

- ``create``: ``--files`` files of 4 KiB from Python (open, write, close);
- ``utime``: the same, each followed by ``os.utime`` (what ``cp -p`` and ``git clone
  --no-hardlinks`` do after each copy);
- ``tar``: ``tar x`` of a tree of ``--files`` files (small_files.py's kind: 1-200 KiB);
- ``cp``: ``cp -r`` of the same tree from the local disk;
- ``rsync``: ``rsync -a`` of the same tree (each file written under a temporary name, its times
  and mode set, then renamed into place);
- ``grep``: ``grep -r`` over the ``tar`` tree just written (run after it);
- ``git``: ``git clone --no-hardlinks`` of a repository of ``--files`` files in 6 commits;
- ``rm``: ``rm -r`` of the ``tar`` tree (run after it).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mount_common import (  # noqa: E402
    LakeHome,
    benchmark_disk,
    bindfs_mount,
    have,
    lakefuse_mount,
    pyfuse3_mirror_mount,
)
from small_files import NEEDLE, create_files, make_git_repo, make_tree  # noqa: E402

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = ("fuse/fuse_request_send", "fuse/fuse_request_end")
WORKLOADS = ("create", "utime", "tar", "cp", "rsync", "grep", "git", "rm")
REPO = "requests"
#: traced on after a workload ends (untimed): the kernel sends RELEASE after close(2) returns
SETTLE_SECONDS = 0.5
TRACE_BUFFER_KIB = 65536  # per CPU: about 500,000 events, a few minutes of a busy mount

_SEND = re.compile(r"\s(\d+\.\d+): fuse_request_send: connection (\d+) req (\d+) opcode \d+ \((\w+)\)")
_END = re.compile(r"\s(\d+\.\d+): fuse_request_end: connection (\d+) req (\d+) ")
_INSTANCES = itertools.count(1)  # tracing instances this process made: their names' suffixes


class TracingUnavailable(Exception):
    """The kernel cannot trace FUSE requests here (no tracefs, no FUSE tracepoints, not root)."""


def _events(lines, connection: int):
    """(seconds, request id, request kind or None for an answer) of each event of one FUSE
    connection in ``lines`` (the tracefs ``trace`` file's lines), in their order."""
    wanted = str(connection)
    for line in lines:
        match = _SEND.search(line)
        if match:
            if match.group(2) == wanted:
                kind = match.group(4)
                yield float(match.group(1)), match.group(3), kind[5:] if kind.startswith("FUSE_") else kind
            continue
        match = _END.search(line)
        if match and match.group(2) == wanted:
            yield float(match.group(1)), match.group(3), None


def parse_trace(lines, connection: int) -> dict[str, list[float]]:
    """The latencies in seconds, per request kind (``LOOKUP``, ...), of the requests of one
    FUSE connection that were both sent and answered within ``lines``."""
    sent: dict[str, tuple[float, str]] = {}
    latencies: dict[str, list[float]] = defaultdict(list)
    for at, request, kind in _events(lines, connection):
        if kind is not None:
            sent[request] = (at, kind)
        elif request in sent:
            started, sent_kind = sent.pop(request)
            latencies[sent_kind].append(at - started)
    return dict(latencies)


def idle_gaps(lines, connection: int) -> tuple[float, list[float]]:
    """For one FUSE connection in ``lines``: the seconds from its first traced event to its
    last, and the gaps in between during which it had no request outstanding (the server
    waiting for its callers)."""
    events = sorted((at, kind is not None) for at, _, kind in _events(lines, connection))
    if not events:
        return 0.0, []
    outstanding, last, gaps = 0, events[0][0], []
    for at, sent in events:
        if outstanding == 0 and at > last:
            gaps.append(at - last)
        outstanding = outstanding + 1 if sent else max(0, outstanding - 1)
        last = at
    return events[-1][0] - events[0][0], gaps


class FuseTrace:
    """The kernel's FUSE tracepoints, switched on around a block (``record``), in a tracing
    instance of this process's own (``instances/<name>``: its own buffer and event switches),
    so that other users of tracefs, another run of this script included, neither see nor
    disturb its events.  ``close`` removes the instance."""

    def __init__(self, root: Path = TRACEFS):
        if not (root / "events").is_dir():
            if os.geteuid() != 0:
                raise TracingUnavailable("tracing FUSE requests needs root (tracefs)")
            root.mkdir(parents=True, exist_ok=True)
            done = subprocess.run(["mount", "-t", "tracefs", "nodev", str(root)], capture_output=True, text=True)
            if done.returncode != 0:
                raise TracingUnavailable(f"cannot mount tracefs at {root}: {done.stderr.strip()}")
        if not all((root / "events" / event).is_dir() for event in EVENTS):
            raise TracingUnavailable("this kernel has no FUSE tracepoints (fuse:fuse_request_send, Linux 6.12+)")
        self.root = root / "instances" / f"lakefuse-requests-{os.getpid()}-{next(_INSTANCES)}"
        try:
            self.root.mkdir()
        except OSError as exc:
            raise TracingUnavailable(f"cannot make a tracing instance {self.root}: {exc.strerror}") from None
        self._write("tracing_on", "0")
        self._write("buffer_size_kb", str(TRACE_BUFFER_KIB))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._write("tracing_on", "0")
            for event in EVENTS:
                self._write(f"events/{event}/enable", "0")
        for _ in range(50):  # busy while a reader has its files open: briefly
            try:
                self.root.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)

    def __enter__(self) -> "FuseTrace":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _write(self, name: str, value: str) -> None:
        (self.root / name).write_text(value)

    @contextlib.contextmanager
    def record(self, out: list[str]):
        """Trace FUSE requests while the block runs; ``out`` receives the trace's lines."""
        self._write("trace", "")  # empties the buffer
        for event in EVENTS:
            self._write(f"events/{event}/enable", "1")
        self._write("tracing_on", "1")
        try:
            yield
        finally:
            self._write("tracing_on", "0")
            for event in EVENTS:
                self._write(f"events/{event}/enable", "0")
            out.extend((self.root / "trace").read_text().splitlines())
            self._write("trace", "")


def connection_of(mountpoint: Path) -> int:
    """The FUSE connection number of the mount at ``mountpoint`` (its device number)."""
    return os.stat(mountpoint).st_dev


# ---------------------------------------------------------------- the workloads

def run_workload(name: str, target: Path, fixtures: Path, files: int) -> None:
    """Run workload ``name`` writing under ``target``, which it creates; ``grep`` and ``rm``
    instead read and remove the tree ``tar`` wrote beside it in the same run."""
    tar_tree = target.with_name(target.name.rsplit("-", 1)[0] + "-tar")
    if name == "rm":
        subprocess.run(["rm", "-r", str(tar_tree)], check=True)
        return
    if name == "grep":  # exit status 1: no line matched, which is not a failure here
        subprocess.run(["grep", "-r", "-l", "-e", NEEDLE, str(tar_tree)], stdout=subprocess.DEVNULL, check=False)
        return
    target.mkdir()
    if name == "create":
        create_files(target, [f"f{i:05d}.dat" for i in range(files)])
    elif name == "utime":
        for i in range(files):
            path = target / f"f{i:05d}.dat"
            with open(path, "wb") as f:
                f.write(b"u" * 4096)
            os.utime(path, (1_600_000_000, 1_600_000_000))
    elif name == "tar":
        subprocess.run(["tar", "-x", "--no-same-owner", "-f", str(fixtures / "tree.tar"), "-C", str(target)],
                       check=True)
    elif name == "cp":
        subprocess.run(["cp", "-r", str(fixtures / "tree"), str(target / "tree")], check=True)
    elif name == "rsync":
        subprocess.run(["rsync", "-a", f"{fixtures / 'tree'}/", str(target / "tree")], check=True)
    elif name == "git":
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(fixtures / "repo"), str(target / "clone")],
                       check=True, capture_output=True)
    else:
        raise ValueError(f"unknown workload {name!r}")


def make_fixtures(fixtures: Path, files: int, workloads: list[str]) -> None:
    fixtures.mkdir(parents=True)
    if {"tar", "cp", "rsync", "grep", "rm"} & set(workloads):
        make_tree(fixtures / "tree", files, max(4, files // 35))
        subprocess.run(["tar", "-cf", str(fixtures / "tree.tar"), "-C", str(fixtures), "tree"], check=True)
    if "git" in workloads:
        make_git_repo(fixtures / "repo", files, 6)


#: the systems, in the tables' order: bindfs (C), the pyfuse3 mirror (the least a pyfuse3 server
#: does per request: the binding's floor), lakefuse
SYSTEMS = ("bindfs", "mirror", "lakefuse")


def report(workload: str, seconds: dict[str, list[float]], latencies: dict[str, dict[str, list[float]]],
           runs: int) -> None:
    """One table: per request kind, each system's count, total ms and median µs (per run:
    counts and totals are divided by the runs), and lakefuse's total over bindfs's."""
    time_of = {label: statistics.median(seconds[label]) for label in SYSTEMS}
    print(f"\n{workload}: " + ", ".join(f"{label} {time_of[label]:.3f} s" for label in SYSTEMS)
          + f" (lakefuse / bindfs {time_of['lakefuse'] / time_of['bindfs']:.2f}); medians of {runs} runs; "
          f"per run: requests, their total ms, median µs")
    print(f"  {'request':14}" + "".join(f" {label + ' n':>11} {'total':>7} {'median':>6}  " for label in SYSTEMS)
          + f" {'lf/bindfs':>9}")
    lf = latencies["lakefuse"]
    kinds = sorted(set().union(*(latencies[label] for label in SYSTEMS)), key=lambda k: -sum(lf.get(k, ())))

    def cells(values: list[float]) -> str:
        if not values:
            return f" {0:11.0f} {0:7.1f} {'-':>6}  "
        return f" {len(values) / runs:11.0f} {sum(values) / runs * 1e3:7.1f} {statistics.median(values) * 1e6:6.0f}  "

    for kind in kinds + ["all"]:
        row = {label: (latencies[label].get(kind, []) if kind != "all"
                       else [v for values in latencies[label].values() for v in values]) for label in SYSTEMS}
        bindfs_total, lakefuse_total = sum(row["bindfs"]), sum(row["lakefuse"])
        ratio = f"{lakefuse_total / bindfs_total:.2f}" if bindfs_total else "-"
        print(f"  {kind:14}" + "".join(cells(row[label]) for label in SYSTEMS) + f" {ratio:>9}")


def report_idle(spans: dict[str, float], idle: dict[str, list[float]]) -> None:
    """How much of the traced time each server had no request outstanding, and in what gaps."""
    parts = []
    for label in SYSTEMS:
        gaps = idle[label]
        share = sum(gaps) / spans[label] if spans[label] else 0.0
        typical = f", gaps median {statistics.median(gaps) * 1e6:.0f} µs" if gaps else ""
        parts.append(f"{label} {100 * share:.0f}%{typical}")
    print(f"  no request outstanding (the server waiting for its caller): {'; '.join(parts)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=(*WORKLOADS, "all"), default="all")
    parser.add_argument("--files", type=int, default=300, help="files per workload (default 300)")
    parser.add_argument("--runs", type=int, default=2, help="runs of each workload on each system (default 2)")
    parser.add_argument("--workdir", default=None, help="parent of the throw-away directory (see small_files.py)")
    args = parser.parse_args(argv)
    if args.files < 1 or args.runs < 1:
        parser.error("--files and --runs must be at least 1")
    workloads = list(WORKLOADS) if args.workload == "all" else [args.workload]
    for reader in ("grep", "rm"):  # they work on the tree ``tar`` writes
        if reader in workloads and "tar" not in workloads:
            workloads.insert(workloads.index(reader), "tar")
    for tool in ("bindfs", *(tool for tool in ("git", "rsync") if tool in workloads)):
        if not have(tool):
            print(f"fuse_requests: {tool} is not installed", file=sys.stderr)
            return 2
    try:
        trace = FuseTrace()
    except TracingUnavailable as exc:
        print(f"fuse_requests: {exc}", file=sys.stderr)
        return 2

    with trace, benchmark_disk(args.workdir) as (disk, about_disk):
        print(f"disk: {about_disk}", flush=True)
        workdir = Path(tempfile.mkdtemp(prefix="lakefuse-requests-", dir=disk))
        try:
            fixtures = workdir / "fixtures"
            make_fixtures(fixtures, args.files, workloads)
            home = LakeHome(workdir)
            home.create_repository(REPO)
            home.close()
            for source in ("bindfs-src", "mirror-src"):
                (workdir / source).mkdir()
            with lakefuse_mount(home, workdir / "mnt-lakefuse") as lake, \
                    bindfs_mount(workdir / "bindfs-src", workdir / "mnt-bindfs") as bind, \
                    pyfuse3_mirror_mount(workdir / "mirror-src", workdir / "mnt-mirror") as mirror:
                systems = {"bindfs": bind, "mirror": mirror, "lakefuse": lake / REPO / "main"}
                connections = {"bindfs": connection_of(bind), "mirror": connection_of(mirror),
                               "lakefuse": connection_of(lake)}
                for workload in workloads:
                    seconds = {label: [] for label in systems}
                    latencies: dict[str, dict[str, list[float]]] = {label: defaultdict(list) for label in systems}
                    spans = {label: 0.0 for label in systems}
                    idle: dict[str, list[float]] = {label: [] for label in systems}
                    for r in range(args.runs):
                        order = list(systems.items())  # rotated each run: this VM's speed drifts
                        for label, base in order[r % len(order):] + order[:r % len(order)]:
                            lines: list[str] = []
                            time.sleep(1.0)  # the last workload's background work (staging, reclaims)
                            with trace.record(lines):
                                started = time.perf_counter()
                                run_workload(workload, base / f"r{r}-{workload}", fixtures, args.files)
                                seconds[label].append(time.perf_counter() - started)
                                time.sleep(SETTLE_SECONDS)  # the last RELEASEs: sent after close(2) returned
                            for kind, values in parse_trace(lines, connections[label]).items():
                                latencies[label][kind].extend(values)
                            span, gaps = idle_gaps(lines, connections[label])
                            spans[label] += span
                            idle[label].extend(gaps)
                    report(workload, seconds, latencies, args.runs)
                    report_idle(spans, idle)
        finally:
            for mountpoint in workdir.glob("mnt-*"):
                with contextlib.suppress(Exception):
                    subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
