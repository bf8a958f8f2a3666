"""The disk the small-files benchmark runs on (``scripts/bench/mount_common.py``): ext4 without a
journal is recognised, and the benchmark then runs on a journaled ext4 it makes, loop-mounted,
and removes after.  Needs root and loop devices (as the benchmark does)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "bench"))
from mount_common import benchmark_disk, is_mounted, unjournaled_ext4  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mkfs.ext4") is None,
                                reason="needs root and mkfs.ext4 (loop mounts)")


@pytest.fixture
def ext4(tmp_path):
    """Make and loop-mount an ext4 under tmp_path: ``ext4(journal)`` -> its mount point."""
    mounted: list[Path] = []

    def make(journal: bool) -> Path:
        image = tmp_path / f"fs{len(mounted)}.img"
        mountpoint = tmp_path / f"mnt{len(mounted)}"
        mountpoint.mkdir()
        with open(image, "wb") as f:
            f.truncate(64 << 20)
        features = [] if journal else ["-O", "^has_journal"]
        subprocess.run(["mkfs.ext4", "-q", "-F", *features, str(image)], check=True, capture_output=True)
        done = subprocess.run(["mount", "-o", "loop", str(image), str(mountpoint)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"no loop mount here: {done.stderr.strip()}")
        mounted.append(mountpoint)
        return mountpoint

    yield make
    for mountpoint in mounted:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)


def test_ext4_without_a_journal_is_recognised_and_with_one_is_not(ext4):
    bare, journaled = ext4(journal=False), ext4(journal=True)
    (bare / "sub").mkdir()
    assert unjournaled_ext4(bare) is not None
    assert unjournaled_ext4(bare / "sub") is not None  # a directory below the mount point
    assert unjournaled_ext4(journaled) is None
    assert unjournaled_ext4("/proc") is None  # not ext4


def test_on_ext4_without_a_journal_the_benchmark_runs_on_a_journaled_one_removed_after(ext4):
    bare = ext4(journal=False)
    with benchmark_disk(bare, size_gib=1) as (disk, about):
        assert disk != bare and is_mounted(disk)
        assert unjournaled_ext4(disk) is None
        assert "journaled ext4" in about
        (disk / "file").write_bytes(b"x")
    assert not is_mounted(disk)
    assert list(bare.iterdir()) == [bare / "lost+found"]  # the image and its mount point are gone


def test_elsewhere_the_benchmark_runs_where_it_was_asked(ext4):
    journaled = ext4(journal=True)
    with benchmark_disk(journaled) as (disk, about):
        assert disk == journaled
        assert str(journaled) in about
