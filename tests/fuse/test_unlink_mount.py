"""Deleting a file through the kernel mount, right before other changes of the same name: a
listing never shows the deleted file, also while its deletion waits for the stager's batch,
and a directory made in its place at once is listed as that directory."""

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
