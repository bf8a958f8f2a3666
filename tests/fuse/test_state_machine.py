"""A hypothesis state machine: random create/write/truncate/rename/unlink/mkdir/rmdir on a
branch through the kernel mount and on a local directory must succeed or fail alike (same
errno) and leave the same tree."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from lakemount import mounted

pytestmark = pytest.mark.slow

NAMES = ["a", "b", "d", "e"]
paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
data = st.binary(max_size=300)
_examples = itertools.count()


def outcome(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return exc.errno


def snapshot(root: Path) -> dict[str, bytes | None]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        for name in dirnames:
            out[os.path.normpath(os.path.join(rel, name)) + "/"] = None
        for name in filenames:
            out[os.path.normpath(os.path.join(rel, name))] = (Path(dirpath) / name).read_bytes()
    return out


def make_machine(mount_root: Path, local_base: Path):
    class MountVsLocal(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            name = f"ex{next(_examples)}"
            self.roots = (mount_root / name, local_base / name)
            for root in self.roots:
                root.mkdir()

        def both(self, fn):
            results = [outcome(lambda root=root: fn(root)) for root in self.roots]
            assert results[0] == results[1], f"mount: {results[0]}, local: {results[1]}"

        @rule(path=paths, content=data)
        def write_file(self, path, content):
            self.both(lambda root: (root / path).write_bytes(content))

        @rule(path=paths, offset=st.integers(0, 400), content=data)
        def write_at(self, path, offset, content):
            def op(root):
                with open(root / path, "r+b") as f:
                    f.seek(offset)
                    f.write(content)
            self.both(op)

        @rule(path=paths, content=data)
        def append(self, path, content):
            def op(root):
                with open(root / path, "ab") as f:
                    f.write(content)
            self.both(op)

        @rule(path=paths, size=st.integers(0, 400))
        def truncate(self, path, size):
            self.both(lambda root: os.truncate(root / path, size))

        @rule(src=paths, dst=paths)
        def rename(self, src, dst):
            self.both(lambda root: os.rename(root / src, root / dst))

        @rule(path=paths)
        def unlink(self, path):
            self.both(lambda root: os.unlink(root / path))

        @rule(path=paths)
        def mkdir(self, path):
            self.both(lambda root: os.mkdir(root / path))

        @rule(path=paths)
        def rmdir(self, path):
            self.both(lambda root: os.rmdir(root / path))

        @invariant()
        def same_tree(self):
            assert snapshot(self.roots[0]) == snapshot(self.roots[1])

    return MountVsLocal


def run_machine(mount_root: Path, tmp_path: Path) -> None:
    mount_root.mkdir()
    local_base = Path(tempfile.mkdtemp(dir=tmp_path))
    machine = make_machine(mount_root, local_base)
    machine.TestCase.settings = settings(max_examples=20, stateful_step_count=15, deadline=None,
                                         suppress_health_check=list(HealthCheck))
    try:
        machine.TestCase().runTest()
    finally:
        shutil.rmtree(local_base, ignore_errors=True)


def test_mount_behaves_like_a_local_directory(lake_home, lake, tmp_path):
    lake_home.catalog.create_branch("sales", "statemachine", "main")
    run_machine(lake / "sales/statemachine/runs", tmp_path)


def test_so_does_a_mount_whose_kernel_reads_branch_files(lake_home, tmp_path):
    """With --passthrough-branches every read of the invariant opens the file the kernel reads
    (where passthrough is available), between writes, truncates and renames of the same files."""
    lake_home.catalog.create_branch("sales", "statemachine-pt", "main")
    with mounted(lake_home, tmp_path / "mnt-pt", "lakefs://sales", ("--passthrough-branches",)) as mount:
        run_machine(mount / "statemachine-pt/runs", tmp_path)
        log = mount.log_path.read_text()
        if "passthrough reads of local objects: on" in log:  # else tests/fuse/test_passthrough_mount.py fails
            assert "the kernel reads" in log
