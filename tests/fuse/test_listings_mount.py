"""Listings through a real kernel mount: the kernel keeps a commit's and a tag's listings, and a
branch's while they hold (a listing read again while the daemon is stopped still answers), and
a branch's listing still shows this mount's changes at once and another writer's within the
change-poll interval."""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import struct
import threading
import time

import pytest

from lakefuse.fuse.operations import OPENDIR_TAKES_FILE_INFO
from lakemount import MountedLake, mounted

POLL_DEADLINE = 5.0  # seconds: the mount polls every 0.5 s


@pytest.fixture(scope="module")
def listed(lake_home, tmp_path_factory):
    """A branch with a directory of 300 files, committed and tagged, and a mount of its own
    (the tests stop and continue its daemon)."""
    catalog = lake_home.catalog
    catalog.create_branch("sales", "listings", "main")
    entry = catalog.upload_bytes("sales", "listings", "many/seed", b"x" * 10)
    catalog.stage_entries("sales", "listings", [(f"many/f{i:04d}.txt", entry) for i in range(300)])
    commit = catalog.commit("sales", "listings", "many files", "tests").id
    catalog.create_tag("sales", "listed-tag", commit)
    mount = MountedLake(lake_home, tmp_path_factory.mktemp("mnt") / "listings")
    mount.start()
    yield mount, commit
    mount.stop()


def listing_while_stopped(mount: MountedLake, directory) -> list[str] | None:
    """The names of ``directory`` read again (from an opendir made before) while the daemon is
    stopped: what the kernel kept, or None if it asked the daemon (it would wait for it).  A
    listing the daemon served makes the kernel ask for the directory's attributes (its atime)
    at the next ``fstat``: two more listings first (the second, which the kernel answers
    itself if it can, asks for them)."""
    os.listdir(directory)
    os.listdir(directory)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    found: list[list[str]] = []
    os.kill(mount.proc.pid, signal.SIGSTOP)
    try:
        reader = threading.Thread(target=lambda: found.append(os.listdir(fd)), daemon=True)
        reader.start()
        reader.join(2.0)
        return sorted(found[0]) if found else None
    finally:
        os.kill(mount.proc.pid, signal.SIGCONT)
        reader.join(30)
        os.close(fd)


needs_listing_cache = pytest.mark.skipif(
    not OPENDIR_TAKES_FILE_INFO, reason="a stock pyfuse3 cannot ask the kernel to keep listings")


@needs_listing_cache
@pytest.mark.parametrize("ref", ["commit", "listed-tag"])
def test_the_kernel_keeps_a_commit_or_tag_listing(listed, ref):
    mount, commit = listed
    directory = mount / f"sales/{commit if ref == 'commit' else ref}/many"
    names = sorted(os.listdir(directory))
    assert len(names) == 301
    assert listing_while_stopped(mount, directory) == names


@needs_listing_cache
def test_the_kernel_keeps_a_branch_listing_until_it_changes(listed, lake_home):
    mount, _commit = listed
    directory = mount / "sales/listings/many"
    names = sorted(os.listdir(directory))
    assert listing_while_stopped(mount, directory) == names
    (directory / "mine.txt").write_bytes(b"mine")
    assert "mine.txt" in os.listdir(directory)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)  # its entry is staged: a listing with files not uploaded yet is not kept
    os.close(fd)
    assert listing_while_stopped(mount, directory) == sorted(names + ["mine.txt"])


def test_a_branch_listing_shows_this_mounts_changes_at_once(listed):
    mount, _commit = listed
    directory = mount / "sales/listings/many"
    before = set(os.listdir(directory))
    (directory / "added.txt").write_bytes(b"a")
    assert set(os.listdir(directory)) == before | {"added.txt"}
    os.unlink(directory / "added.txt")
    assert set(os.listdir(directory)) == before
    os.mkdir(directory / "sub")
    assert set(os.listdir(directory)) == before | {"sub"}
    os.rmdir(directory / "sub")
    assert set(os.listdir(directory)) == before


def test_a_branch_listing_shows_another_writers_change_within_the_poll_interval(listed, lake_home):
    mount, _commit = listed
    directory = mount / "sales/listings/many"
    os.listdir(directory)
    os.listdir(directory)  # kept by the kernel now
    lake_home.catalog.upload_bytes("sales", "listings", "many/from-elsewhere.txt", b"e")
    started = time.monotonic()
    while "from-elsewhere.txt" not in os.listdir(directory):
        assert time.monotonic() - started < POLL_DEADLINE, "another writer's new file never listed"
        time.sleep(0.05)
    lake_home.catalog.delete_object("sales", "listings", "many/from-elsewhere.txt")
    started = time.monotonic()
    while "from-elsewhere.txt" in os.listdir(directory):
        assert time.monotonic() - started < POLL_DEADLINE, "another writer's deletion never listed"
        time.sleep(0.05)


def test_files_a_walk_listed_beyond_what_the_mount_keeps_read_and_change_right(lake_home, tmp_path):
    """With ``--metadata-entries 20``, a walk of 120 files leaves most of their inodes without
    their metadata, and the tree's caches without it too: each open and chmod of such an
    inode (the kernel keeps the inodes and their attributes) reads it back."""
    catalog = lake_home.catalog
    catalog.create_branch("sales", "walked", "main")
    for i in range(120):
        catalog.upload_bytes("sales", "walked", f"w/f{i:03d}.txt", f"file {i}\n".encode() * (i + 1))
    commit = catalog.commit("sales", "walked", "walked files", "tests").id
    with mounted(lake_home, tmp_path / "m", args=("--metadata-entries", "20")) as mount:
        for ref in ("walked", commit):
            directory = mount / f"sales/{ref}/w"
            listed_sizes = {entry.name: entry.stat().st_size for entry in os.scandir(directory)}
            assert len(listed_sizes) == 120 and listed_sizes["f007.txt"] == len(b"file 7\n") * 8
            for i in range(120):
                path = directory / f"f{i:03d}.txt"
                assert path.read_bytes() == f"file {i}\n".encode() * (i + 1)
                assert os.stat(path).st_size == listed_sizes[path.name]
        branch_file = mount / "sales/walked/w/f010.txt"
        mtime = os.stat(branch_file).st_mtime_ns
        os.chmod(branch_file, 0o600)
        after = os.stat(branch_file)
        assert after.st_mode & 0o777 == 0o600 and after.st_mtime_ns == mtime


def stat_while_stopped(mount: MountedLake, directory, name: str) -> bool:
    """Whether the kernel answers a ``stat`` of ``name`` in ``directory`` by itself: the daemon
    is stopped meanwhile (the directory is opened before: the names above it have timeouts of
    their own)."""
    found = []
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    os.kill(mount.proc.pid, signal.SIGSTOP)
    try:
        reader = threading.Thread(target=lambda: found.append(os.stat(name, dir_fd=fd)), daemon=True)
        reader.start()
        reader.join(2.0)
        return bool(found)
    finally:
        os.kill(mount.proc.pid, signal.SIGCONT)
        reader.join(30)
        os.close(fd)


def test_the_branch_timeout_is_how_long_the_kernel_keeps_a_branchs_names_and_attributes(lake_home, tmp_path):
    catalog = lake_home.catalog
    catalog.create_branch("sales", "timed", "main")
    catalog.upload_bytes("sales", "timed", "t/f.txt", b"12345")
    for timeout, kept in (("1", False), ("30", True)):
        with mounted(lake_home, tmp_path / f"m{timeout}", args=("--branch-timeout", timeout)) as mount:
            directory = mount / "sales/timed/t"
            assert [entry.stat().st_size for entry in os.scandir(directory)] == [5]  # names and attributes
            time.sleep(1.5)
            assert stat_while_stopped(mount, directory, "f.txt") is kept


#: getdents64's system call number, to read a listing in pieces smaller than glibc's (which
#: reads a directory of a FUSE mount in 1 MiB pieces: its st_blksize)
GETDENTS64 = {"x86_64": 217, "aarch64": 61}.get(platform.machine())


def names_in_pieces(fd: int, piece: int, between=None) -> list[str]:
    """The names getdents64 returns for ``fd``, ``piece`` bytes at a time, with ``between()``
    called after the first piece."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(piece)
    names = []
    for _ in range(100_000):  # bounded: a listing that never ends fails the test
        got = libc.syscall(GETDENTS64, fd, buffer, piece)
        if got < 0:
            raise OSError(ctypes.get_errno(), "getdents64")
        if got == 0:
            return [name for name in names if name not in (".", "..")]
        raw, at = buffer.raw[:got], 0
        while at < got:
            reclen = struct.unpack_from("=H", raw, at + 16)[0]
            names.append(raw[at + 19:at + reclen].split(b"\0", 1)[0].decode())
            at += reclen
        if between is not None:
            between()
            between = None
    raise AssertionError("the listing did not end")


@needs_listing_cache
@pytest.mark.skipif(GETDENTS64 is None, reason="getdents64's number is known here for x86_64 and aarch64 only")
def test_a_kept_listing_lost_half_way_through_a_reader_goes_on_where_it_stood(listed):
    """The kernel reads a listing it keeps from its pages; when they go (here dropped with the
    page cache, as memory pressure would) half-way through a reader, it asks the mount for the
    rest from where that reader stands, on a handle that reported nothing.  The reader must
    get each name once: it got the first ones again, up to twice as many names, before."""
    mount, commit = listed
    directory = mount.mountpoint / "sales" / commit / "many"
    expected = sorted(os.listdir(directory))  # kept by the kernel from now on
    assert len(expected) == 301

    def drop_page_cache():
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")

    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = names_in_pieces(fd, 4096, between=drop_page_cache)
    finally:
        os.close(fd)
    assert len(names) == len(set(names)), f"{len(names) - len(set(names))} names read twice"
    assert sorted(names) == expected
