"""Read-only opens of unmodified branch files that the FUSE binding answers itself
(``lakefuse.fs.native_answers``, ``Files.native_handle``), without a kernel: a stand-in for the
binding opens, reads and releases as lakefuse's pyfuse3 does, and the mount takes its handles
over before the file changes through it, so a reader the binding opened reads a writer's bytes
(``tail -f``), and an fsync or a release of such a handle reaches the mount as one of its own."""

from __future__ import annotations

import os
import time

import pytest
from test_native_answers import InsertingBinding
from test_native_reads import RecordingNativeReads
from test_passthrough import LocalFilesBackend, RecordingBackings

from lakefuse.fs.filesystem import LakeFilesystem

BIT = 1 << 61


class OpeningBinding(InsertingBinding):
    """The binding's registry of branch files, and what it does with their requests."""

    branch_fh_bit = BIT

    def __init__(self):
        super().__init__()
        self.branch: dict[int, tuple[bytes, int, int, float]] = {}
        self.held: dict[int, list[int]] = {}  # ino -> [descriptor, handles]

    def add_branch_file(self, ino, path, size, read_ahead=0, expires=0.0):
        self.branch[ino] = (path, size, read_ahead, expires)

    def remove_branch_file(self, ino):
        self.branch.pop(ino, None)

    def take_branch_file(self, ino):
        self.branch.pop(ino, None)
        held = self.held.pop(ino, None)
        if held is None:
            return None
        fd, count = held
        return count, fd, os.fstat(fd).st_size  # the descriptor is the mount's now

    # the kernel's requests, as the binding answers them

    def open(self, fs: LakeFilesystem, ino: int, flags: int = os.O_RDONLY) -> int:
        registered = self.branch.get(ino)
        if registered is None or flags & (os.O_ACCMODE | os.O_TRUNC):
            return fs.open(ino, flags).fh
        path, size, _, expires = registered
        assert expires == 0.0 or expires > time.monotonic()
        if ino not in self.held:
            fd = os.open(path, os.O_RDONLY)
            assert os.fstat(fd).st_size == size
            self.held[ino] = [fd, 0]
        self.held[ino][1] += 1
        return BIT | ino

    def read(self, fs: LakeFilesystem, fh: int, offset: int, size: int) -> bytes:
        held = self.held.get(fh & ~BIT) if fh & BIT else None
        if held is not None:
            return os.pread(held[0], size, offset)
        return fs.read(fh, offset, size)

    def release(self, fs: LakeFilesystem, fh: int) -> None:
        held = self.held.get(fh & ~BIT) if fh & BIT else None
        if held is None:
            return fs.release(fh)
        held[1] -= 1
        if held[1] == 0:
            os.close(held[0])
            del self.held[fh & ~BIT]


def filesystem(tmp_path, *, passthrough_branches: bool = False, native_reads: bool = True,
               change_feed: bool = False):
    backend = LocalFilesBackend(tmp_path)
    backend.create_repository("sales")
    backend.put_object("sales", "main", "data/a.csv", b"id,v\n1,2\n")
    backend.put_object("sales", "main", "data/b.csv", b"id,v\n3,4\n")
    backend.put_object("sales", "main", "big.bin", b"x" * (1024 * 1024))
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), change_feed=change_feed)
    fs.enable_passthrough(RecordingBackings(), branches=passthrough_branches)
    if native_reads:
        fs.enable_native_reads(RecordingNativeReads())
    binding = OpeningBinding()
    fs.enable_native_answers(binding)
    return fs, binding, backend


def test_small_branch_files_are_registered_with_their_objects(tmp_path, make_driver):
    fs, binding, backend = filesystem(tmp_path)
    assert fs.native_branch_opens
    drive = make_driver(fs)
    assert drive.listdir("sales/main/data") == ["a.csv", "b.csv"]
    a, b, big = (drive.ino(f"sales/main/{name}") for name in ("data/a.csv", "data/b.csv", "big.bin"))
    assert set(binding.branch) == {a, b}  # not the file of 1 MiB: the mount reads it from a map
    path, size, read_ahead, expires = binding.branch[a]
    entry = backend.get_entry("sales", backend.resolve_ref("sales", "main"), "data/a.csv")
    assert path.decode() == backend.local_file("sales", entry) and size == 9 and read_ahead == 9
    assert time.monotonic() < expires <= time.monotonic() + 1.0  # the branch's 1 s without a change feed
    fh = binding.open(fs, a)
    assert binding.read(fs, fh, 0, 100) == b"id,v\n1,2\n"
    binding.release(fs, fh)
    fs.forget([(a, 2)])  # listed, then looked up: the kernel held it twice
    assert a not in binding.branch


def test_no_more_branch_files_are_registered_than_the_bound(tmp_path, make_driver, monkeypatch):
    from lakefuse.fs import native_answers

    monkeypatch.setattr(native_answers, "BRANCH_FILES_MOST", 1)
    fs, binding, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    a, b = drive.ino("sales/main/data/a.csv"), drive.ino("sales/main/data/b.csv")
    assert set(binding.branch) == {a}
    fs.forget([(a, 1)])  # its registration ends: room for the next new inode
    c = drive.ino("sales/main/data/a.csv")
    assert set(binding.branch) == {c} and b not in binding.branch


def test_a_listing_offers_its_first_files_and_a_read_through_the_handlers_the_others(
        tmp_path, make_driver, monkeypatch):
    """A walk that opens nothing (``ls -lR``) registers only the first files of each directory;
    the first read-only open of another through the handlers (on a worker thread: the event
    loop's attempt would block) registers the directory's other listed files, and from then on
    listings there register every file they number."""
    from lakefuse.fs import native_answers
    from lakefuse.fs.replies import WouldBlock

    monkeypatch.setattr(native_answers, "LISTED_AT_ONCE", 3)  # ".", ".." and a.csv
    fs, binding, backend = filesystem(tmp_path)
    backend.put_object("sales", "main", "data/c.csv", b"id,v\n5,6\n")
    drive = make_driver(fs)
    assert drive.listdir("sales/main/data") == ["a.csv", "b.csv", "c.csv"]
    a, b, c = (drive.ino(f"sales/main/data/{name}") for name in ("a.csv", "b.csv", "c.csv"))
    assert set(binding.branch) == {a}  # the listing's first; looking the others up made no numbers
    with pytest.raises(WouldBlock):
        fs.open(b, os.O_RDONLY, blocking=False)
    assert set(binding.branch) == {a}
    opened = binding.open(fs, b)  # reaches the handlers
    assert not opened & BIT and set(binding.branch) == {a, c}  # b itself is the handler's
    assert binding.open(fs, c) == BIT | c
    assert binding.read(fs, BIT | c, 0, 100) == b"id,v\n5,6\n"
    binding.release(fs, BIT | c)
    binding.release(fs, opened)
    # the kernel forgets c; a new listing numbers it again, and registers it though not its first
    fs.forget([(c, 2)])
    assert c not in binding.branch
    assert drive.listdir("sales/main/data") == ["a.csv", "b.csv", "c.csv"]
    new_c = drive.ino("sales/main/data/c.csv")
    assert new_c != c and new_c in binding.branch


def test_a_write_through_the_handlers_registers_no_other_files(tmp_path, make_driver, monkeypatch):
    from lakefuse.fs import native_answers

    monkeypatch.setattr(native_answers, "LISTED_AT_ONCE", 0)
    fs, binding, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    drive.listdir("sales/main/data")
    a = drive.ino("sales/main/data/a.csv")
    assert binding.branch == {}
    fs.release(fs.open(a, os.O_WRONLY | os.O_APPEND).fh)
    assert binding.branch == {}


def test_no_branch_file_is_registered_where_the_binding_would_not_read_it(tmp_path, make_driver):
    fs, binding, _ = filesystem(tmp_path, native_reads=False)
    drive = make_driver(fs)
    drive.listdir("sales/main/data")
    drive.ino("sales/main/data/a.csv")
    assert binding.branch == {} and not fs.native_branch_opens


def test_with_kernel_reads_of_branches_small_files_are_the_binding_s_and_big_ones_the_kernel_s(
        tmp_path, make_driver):
    """``--passthrough-branches``: a handle of a small file the binding opened counts as open,
    so a later open through the mount is not alone and gets no backing file (the kernel would
    refuse it beside a handle it caches); once it is released, the mount's opens are served by
    the kernel again."""
    fs, binding, _ = filesystem(tmp_path, passthrough_branches=True)
    drive = make_driver(fs)
    a, big = drive.ino("sales/main/data/a.csv"), drive.ino("sales/main/big.bin")
    assert a in binding.branch and big not in binding.branch
    first = binding.open(fs, a)
    second = fs.open(a, os.O_RDONLY)  # an open that reached the handler: it takes the binding's handle
    assert not second.backing_id
    binding.release(fs, first)
    fs.release(second.fh)
    third = fs.open(a, os.O_RDONLY)
    assert third.backing_id
    fs.release(third.fh)
    kernel = fs.open(big, os.O_RDONLY)
    assert kernel.backing_id
    fs.release(kernel.fh)


def test_a_reader_the_binding_opened_reads_a_writers_bytes(tmp_path, make_driver):
    """``tail -f``: two readers opened by the binding, then an appender through the mount: the
    mount takes the readers over (one handle standing for both) before the append, and they
    read the appended bytes through it; each release reaches the mount, the last closes it."""
    fs, binding, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    a = drive.ino("sales/main/data/a.csv")
    first, second = binding.open(fs, a), binding.open(fs, a)
    assert first == second == BIT | a
    assert binding.read(fs, first, 0, 100) == b"id,v\n1,2\n"
    appender = binding.open(fs, a, os.O_WRONLY | os.O_APPEND)  # a write: the handler's
    assert binding.held == {} and a not in binding.branch  # handed over, and no more opens
    fs.write(appender, 9, b"5,6\n")
    assert binding.read(fs, first, 9, 100) == b"5,6\n"  # through the mount now
    binding.release(fs, first)
    assert binding.read(fs, second, 0, 100) == b"id,v\n1,2\n5,6\n"
    binding.release(fs, second)
    binding.release(fs, appender)
    assert drive.read("sales/main/data/a.csv") == b"id,v\n1,2\n5,6\n"
    later = binding.open(fs, a)
    assert not later & BIT  # the binding opens this inode no more
    binding.release(fs, later)
    node = fs.table.get(a)
    assert node.open_file is None  # every handle released: nothing left open


def test_a_writer_from_empty_beside_the_binding_s_readers_is_served_by_the_mount(tmp_path, make_driver):
    """The kernel refuses a backing file for an inode other handles of which it caches: the
    binding's readers count as open handles, so a truncating writer gets no kernel writes."""
    fs, binding, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    a = drive.ino("sales/main/data/a.csv")
    reader = binding.open(fs, a)
    writer = fs.open(a, os.O_WRONLY | os.O_TRUNC)
    assert not writer.backing_id and not writer.direct_io
    fs.write(writer.fh, 0, b"new\n")
    assert binding.read(fs, reader, 0, 100) == b"new\n"
    fs.release(writer.fh)
    binding.release(fs, reader)
    assert drive.read("sales/main/data/a.csv") == b"new\n"


def test_a_truncate_by_path_takes_the_binding_s_handles_first(tmp_path, make_driver):
    fs, binding, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    a = drive.ino("sales/main/data/a.csv")
    reader = binding.open(fs, a)
    fs.setattr(a, size=3)
    assert binding.read(fs, reader, 0, 100) == b"id,"
    binding.release(fs, reader)
    assert drive.read("sales/main/data/a.csv") == b"id,"


def test_an_fsync_or_a_read_the_binding_passes_on_is_served_by_the_mount(tmp_path, make_driver):
    """The binding sends an fsync of its handle, and a read whose bytes are not cached, to the
    handlers: the mount takes the handles over then."""
    fs, binding, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    a, b = drive.ino("sales/main/data/a.csv"), drive.ino("sales/main/data/b.csv")
    fa, fb = binding.open(fs, a), binding.open(fs, b)
    fs.fsync(fa)
    assert a not in binding.held and b in binding.held
    assert fs.read(fb, 0, 100) == b"id,v\n3,4\n"  # not cached: the read handler
    assert binding.held == {}
    binding.release(fs, fa)
    binding.release(fs, fb)
    assert fs.table.get(a).open_file is None and fs.table.get(b).open_file is None
    with pytest.raises(OSError):
        fs.read(BIT | 12345, 0, 1)  # no such inode


def test_another_writer_s_change_ends_the_registration(tmp_path, make_driver):
    """A change-feed poll that reports the path, or a head moved elsewhere: the binding opens
    the file no more (the mount reads the new bytes); a reader it opened before reads what it
    opened, as the mount's own would."""
    fs, binding, backend = filesystem(tmp_path, change_feed=True)
    drive = make_driver(fs)
    drive.listdir("sales/main/data")
    a, b = drive.ino("sales/main/data/a.csv"), drive.ino("sales/main/data/b.csv")
    assert binding.branch[a][3] > time.monotonic() + 3590  # watched: the tree trusts it an hour
    reader = binding.open(fs, a)
    backend.put_object("sales", "main", "data/a.csv", b"another writer\n")
    fs.poll_changes()
    assert a not in binding.branch and b in binding.branch
    assert binding.read(fs, reader, 0, 100) == b"id,v\n1,2\n"
    later = binding.open(fs, a)
    assert fs.read(later, 0, 100) == b"another writer\n"
    fs.release(later)
    binding.release(fs, reader)
    backend.commit("sales", "main", "by another writer")
    fs.poll_changes()
    assert b not in binding.branch


def test_a_handle_taken_over_after_another_writer_s_change_reads_what_it_opened(tmp_path, make_driver):
    """The mount keeps no entry per registered file (a walk of a million files would keep a
    million): the binding hands over the descriptor its handles read, and the handle the
    mount makes of them reads on from it, also once the path names another object."""
    fs, binding, backend = filesystem(tmp_path, change_feed=True)
    drive = make_driver(fs)
    drive.listdir("sales/main/data")
    a = drive.ino("sales/main/data/a.csv")
    reader = binding.open(fs, a)
    backend.put_object("sales", "main", "data/a.csv", b"another writer\n")
    fs.poll_changes()
    assert drive.read("sales/main/data/a.csv") == b"another writer\n"  # the mount's open: hands over
    assert binding.held == {}
    assert fs.read(reader, 0, 100) == b"id,v\n1,2\n"
    fs.release(reader)
