"""Reading ahead across files through a real kernel mount (``lakefuse.fs.siblings``): a program
whose first read of a directory's file finds the page cache cold has the next files' objects
read in before it opens them, wherever the mount serves the reads (a branch; a commit mounted
``--no-passthrough``); with the caches warm, or where the kernel reads the objects itself, nothing
more is read."""

from __future__ import annotations

import os
import time

import pytest
from lakemount import MountedLake
from posix_helpers import drop_cached_pages

from lakefuse.fs.readers import MappedFile

FILES = 12
SIZE = 96 * 1024  # a miss of a smaller file starts nothing (SMALLEST_MISS_BYTES)


def object_files(lake_home, directory) -> list[str]:
    namespace = lake_home.app.default_namespace("sales")[len("local://"):]
    return [os.path.join(namespace, os.getxattr(directory / f"f{i:02d}.bin", "lakefuse.physical_address").decode())
            for i in range(FILES)]


def uncache(paths: list[str]) -> None:
    for path in paths:
        drop_cached_pages(path)


def resident_pages(path: str) -> list[bool]:
    """Which 4 KiB pages of the object at ``path`` are in the page cache (one mapping)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        pages = MappedFile(fd, SIZE)
        try:
            return [pages.resident(offset, 4096) for offset in range(0, SIZE, 4096)]
        finally:
            pages.close()
    finally:
        os.close(fd)


def resident(path: str) -> bool:
    """Whether the whole object at ``path`` is in the page cache."""
    return all(resident_pages(path))


def wait_resident(paths: list[str], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not all(resident(p) for p in paths):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def wait_uncached(paths: list[str], timeout: float = 5.0) -> bool:
    """Drop the pages of ``paths`` until none is resident (pages under I/O stay until it ends)."""
    deadline = time.monotonic() + timeout
    while True:
        uncache(paths)
        if not any(any(resident_pages(p)) for p in paths):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


@pytest.fixture
def walk_commit_id(lake_home):
    """A commit with ``walk/`` holding FILES objects."""
    catalog = lake_home.catalog
    name = f"walk-{os.getpid()}-{time.monotonic_ns()}"
    catalog.create_branch("sales", name, "main")
    for i in range(FILES):
        catalog.upload_bytes("sales", name, f"walk/f{i:02d}.bin", os.urandom(SIZE))
    return catalog.commit("sales", name, "files to walk", "tests").id


@pytest.fixture
def served_lake(lake_home, tmp_path):
    """A second mount that serves commits' reads itself (``--no-passthrough``)."""
    mount = MountedLake(lake_home, tmp_path / "served", args=("--no-passthrough",))
    mount.start()
    yield mount
    mount.stop()


@pytest.mark.parametrize("where", ["served commit", "branch"])
def test_a_cold_walk_has_the_next_files_read_in_before_it_opens_them(where, walk_commit_id, branch, lake_home,
                                                                     request):
    if where == "served commit":
        directory = request.getfixturevalue("served_lake") / f"sales/{walk_commit_id}/walk"
    else:
        directory = branch / "walk"
        directory.mkdir()
        for i in range(FILES):
            (directory / f"f{i:02d}.bin").write_bytes(os.urandom(SIZE))
    assert sorted(os.listdir(directory)) == [f"f{i:02d}.bin" for i in range(FILES)]  # listed: known whole
    objects = object_files(lake_home, directory)
    # a READ misses when its bytes are not cached, but on a fast disk the binding's own
    # non-blocking read may start and finish their read-in at once: then nothing misses, and
    # the walk is tried again from cold (a mount that never reads ahead fails every try)
    for _ in range(5):
        uncache(objects)
        drop_cached_pages(directory / "f00.bin")  # the mount's page of it too: the next read is a READ
        assert wait_uncached(objects[1:])
        with open(directory / "f00.bin", "rb") as f:  # the walk's first, cold, read
            # what the open asked to be read in (at the first open) arrived: drop it again, so
            # that the READ misses (pages still being read in are not dropped: waited for)
            wait_resident(objects[:1], timeout=1.0)
            assert wait_uncached(objects[:1])
            assert len(f.read()) == SIZE
        if wait_resident(objects[1:9], timeout=2.0):
            break
    else:
        pytest.fail("the next files were not read in")
    for i in range(1, FILES):  # the walk goes on: every file still reads whole
        with open(directory / f"f{i:02d}.bin", "rb") as f:
            assert f.read() == open(objects[i], "rb").read()


def walk_first_file(directory, objects: list[str]) -> None:
    """Open and read the directory's first file, then leave time for any read-ahead."""
    assert sorted(os.listdir(directory))[0] == "f00.bin"
    with open(directory / "f00.bin", "rb") as f:
        assert len(f.read()) == SIZE
    time.sleep(0.5)


def test_a_read_that_finds_its_bytes_cached_reads_nothing_ahead(served_lake, walk_commit_id, lake_home):
    directory = served_lake / f"sales/{walk_commit_id}/walk"
    objects = object_files(lake_home, directory)
    with open(objects[0], "rb") as f:  # the first file's object cached
        f.read()
    uncache(objects[1:])
    time.sleep(0.2)
    walk_first_file(directory, objects)
    assert not any(resident(p) for p in objects[1:])


def test_files_the_kernel_reads_itself_start_no_read_ahead(lake, walk_commit_id, lake_home):
    if "passthrough reads of local objects: on" not in lake.log_path.read_text():
        pytest.skip("the kernel did not grant FUSE passthrough (tests/fuse/test_passthrough_mount.py says why)")
    directory = lake / f"sales/{walk_commit_id}/walk"  # passthrough: no READ reaches the mount
    objects = object_files(lake_home, directory)
    uncache(objects)
    time.sleep(0.2)
    walk_first_file(directory, objects)
    assert not any(resident(p) for p in objects[1:])
