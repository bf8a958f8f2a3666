"""A big directory through a real kernel mount (issue 18): lookups that keep needing reads of
the database in a directory of more than 2,048 names have the daemon learn it whole on its
learner thread (its log says so); after that, present and missing names, a file the mount
creates there, and another process's changes all show as they should."""

from __future__ import annotations

import time

import pytest
from lakemount import MountedLake

FILES = 5000
WAIT_S = 30.0


@pytest.fixture(scope="module")
def big_branch(lake_home):
    catalog = lake_home.catalog
    catalog.create_branch("sales", "big-dir", "main")
    entry = catalog.upload_bytes("sales", "big-dir", "seed.bin", b"x")
    catalog.stage_entries("sales", "big-dir", [(f"big/f{i:05d}", entry) for i in range(FILES)])
    return "big-dir"


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:.0f} s: {what}")
        time.sleep(0.1)


def test_a_big_directory_is_learnt_whole_and_stays_right(lake_home, lake: MountedLake, big_branch):
    big = lake / "sales" / big_branch / "big"
    for i in range(40):  # probes for missing siblings, as Hadoop's checksum filesystem makes
        with pytest.raises(FileNotFoundError):
            (big / f".f{i:05d}.crc").stat()
    wait_for(lambda: f"Tree(sales/{big_branch}): learnt big whole" in lake.logs(), "the directory learnt")

    assert (big / f"f{FILES - 1:05d}").stat().st_size == 1
    assert (big / "f00000").read_bytes() == b"x"
    with pytest.raises(FileNotFoundError):
        (big / f"f{FILES:05d}").stat()
    (big / "new.txt").write_bytes(b"new")
    assert (big / "new.txt").read_bytes() == b"new"

    lake_home.catalog.upload_bytes("sales", big_branch, "big/other.txt", b"other")  # another process
    lake_home.catalog.delete_object("sales", big_branch, "big/f00007")
    wait_for(lambda: (big / "other.txt").exists() and not (big / "f00007").exists(),
             "another process's changes shown")
    assert (big / "other.txt").read_bytes() == b"other"
    assert (big / "f00008").stat().st_size == 1
