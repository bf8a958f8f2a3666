"""Changing a file through the kernel mount right before another change or a listing: a
listing never shows a deleted file, also while its deletion waits for the stager's batch, a
directory made in its place at once is listed as that directory, and a file rewritten and
listed at once reads its newest bytes."""

from __future__ import annotations

import os
import time


def test_a_directory_made_where_a_staged_file_was_just_deleted_is_listed_as_a_directory(branch):
    for i in range(20):
        root = branch / f"replace{i}"
        root.mkdir()
        (root / "d").write_bytes(b"1" * 31)
        time.sleep(0.12)  # the file's entry is staged (a batch waits 50 ms)
        os.unlink(root / "d")
        os.mkdir(root / "d")  # the deletion still waits for the stager
        assert [(e.name, e.is_dir()) for e in os.scandir(root)] == [("d", True)]
        assert os.path.isdir(root / "d")


def test_a_file_rewritten_then_deleted_is_never_listed_again(branch):
    for i in range(60):
        root = branch / f"gone{i}"
        root.mkdir()
        (root / "d").write_bytes(b"1" * 31)
        if i % 2:
            time.sleep(0.06)
        (root / "d").write_bytes(b"2" * 39)  # stored at its RELEASE, which may come after the unlink
        os.unlink(root / "d")
        assert os.listdir(root) == []
        assert os.listdir(root) == []


def test_a_file_rewritten_and_listed_reads_its_newest_bytes(branch):
    """A listing that asked the backend while the rewrite's RELEASE (where the kernel-written
    file is stored) was on its way must not bring the previous version back."""
    stale = 0
    for i in range(150):
        root = branch / f"rewritten{i}"
        root.mkdir()
        first, second = os.urandom(20 + i % 7), os.urandom(30 + i % 5)
        (root / "a").write_bytes(first)
        (root / "a").write_bytes(second)
        os.listdir(root)
        stale += (root / "a").read_bytes() != second
    assert stale == 0
