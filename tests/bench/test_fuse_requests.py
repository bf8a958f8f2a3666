"""``scripts/bench/fuse_requests.py``: the kernel's FUSE tracepoints read back per request kind,
for one mount only, and the script's table of bindfs, the pyfuse3 mirror and lakefuse."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "bench"))
import fuse_requests  # noqa: E402

TRACE = """\
# tracer: nop
    python3-901 [001] .....   100.000100: fuse_request_send: connection 57 req 10 opcode 1 (FUSE_LOOKUP) len 45
    python3-901 [001] .....   100.000130: fuse_request_end: connection 57 req 10 len 144 error -2
    python3-901 [000] .....   100.000200: fuse_request_send: connection 99 req 10 opcode 35 (FUSE_CREATE) len 80
    python3-901 [001] .....   100.000210: fuse_request_send: connection 57 req 12 opcode 35 (FUSE_CREATE) len 80
    python3-901 [000] .....   100.000300: fuse_request_end: connection 99 req 10 len 160 error 0
    python3-901 [001] .....   100.000290: fuse_request_end: connection 57 req 12 len 160 error 0
    python3-901 [001] .....   100.000400: fuse_request_send: connection 57 req 14 opcode 1 (FUSE_LOOKUP) len 45
    python3-901 [001] .....   100.000450: fuse_request_end: connection 57 req 14 len 144 error 0
    python3-901 [001] .....   100.000500: fuse_request_send: connection 57 req 16 opcode 18 (FUSE_RELEASE) len 64
    python3-901 [001] .....   100.000520: fuse_request_end: connection 57 req 99 len 16 error 0
"""


def test_latencies_are_paired_per_request_of_one_connection():
    latencies = fuse_requests.parse_trace(TRACE.splitlines(), 57)
    assert set(latencies) == {"LOOKUP", "CREATE"}  # the RELEASE got no answer within the trace
    assert [round(v * 1e6) for v in latencies["LOOKUP"]] == [30, 50]
    assert [round(v * 1e6) for v in latencies["CREATE"]] == [80]  # not connection 99's request 10
    assert [round(v * 1e6) for v in fuse_requests.parse_trace(TRACE.splitlines(), 99)["CREATE"]] == [100]
    assert fuse_requests.parse_trace(TRACE.splitlines(), 5) == {}


def test_idle_gaps_are_the_times_with_no_request_of_the_connection_outstanding():
    span, gaps = fuse_requests.idle_gaps(TRACE.splitlines(), 57)
    # connection 57: from 100.000100 to 100.000520, idle 130-210, 290-400 and 450-500
    assert round(span * 1e6) == 420
    assert [round(g * 1e6) for g in gaps] == [80, 110, 50]
    assert fuse_requests.idle_gaps(TRACE.splitlines(), 5) == (0.0, [])


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        fuse_requests.main(["--runs", "0"])
    assert exc.value.code == 2
    assert "--files and --runs must be at least 1" in capsys.readouterr().err


def _can_trace() -> bool:
    if os.geteuid() != 0 or shutil.which("bindfs") is None or not os.path.exists("/dev/fuse"):
        return False
    try:
        fuse_requests.FuseTrace().close()
    except fuse_requests.TracingUnavailable:
        return False
    return True


@pytest.mark.skipif(not _can_trace(), reason="needs root, bindfs, /dev/fuse and a kernel with FUSE tracepoints")
def test_the_script_counts_each_request_of_each_mount(tmp_path, capsys):
    # another tracer at the same time (another run of the script, say): neither disturbs the other
    other_lines: list[str] = []
    with fuse_requests.FuseTrace() as other:
        with other.record(other_lines):
            assert fuse_requests.main(["--workload", "create", "--files", "20", "--runs", "1",
                                       "--workdir", str(tmp_path)]) == 0
        assert other.root.is_dir()
    assert not other.root.exists()  # its tracing instance removed
    assert sum(" (FUSE_CREATE) " in line for line in other_lines) >= 60  # the three mounts' creates
    out = capsys.readouterr().out
    assert re.search(r"create: bindfs \d+\.\d+ s, mirror \d+\.\d+ s, lakefuse \d+\.\d+ s \(lakefuse / bindfs", out)
    # every file: one CREATE on each mount, one RELEASE (bindfs, the mirror, lakefuse)
    three = r"\s+20\s+\d+\.\d\s+\d+" * 3
    assert re.search(r"\n  CREATE" + three + r"\s+\d+\.\d\d\n", out)
    assert re.search(r"\n  RELEASE" + three + r"\s+\d+\.\d\d\n", out)
    assert re.search(r"no request outstanding .*: bindfs \d+%.*; mirror \d+%.*; lakefuse \d+%", out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("lakefuse-requests-")]  # removed


@pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")
def test_the_rsync_workload_copies_the_tree_with_modes_and_times(tmp_path):
    fixtures = tmp_path / "fixtures"
    fuse_requests.make_fixtures(fixtures, 12, ["rsync"])
    source = fixtures / "tree"
    os.chmod(next(p for p in source.rglob("*") if p.is_file()), 0o600)
    target = tmp_path / "run-rsync"
    fuse_requests.run_workload("rsync", target, fixtures, 12)
    copied = target / "tree"
    originals = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file())
    assert len(originals) == 12
    assert sorted(p.relative_to(copied) for p in copied.rglob("*") if p.is_file()) == originals
    for relative in originals:
        before, after = (source / relative).stat(), (copied / relative).stat()
        assert (copied / relative).read_bytes() == (source / relative).read_bytes()
        assert (after.st_mode, int(after.st_mtime)) == (before.st_mode, int(before.st_mtime))
    assert not [p for p in copied.rglob(".*") if p.is_file()]  # no temporary file left behind
