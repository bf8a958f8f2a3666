"""Which opens the kernel serves from a local file itself (FUSE passthrough), without a kernel:
the rules of ``lakefuse.fs.passthrough`` and how ``LakeFilesystem.open``/``create``/``release``
follow them, with a recording stand-in for the kernel's backing-file registry."""

from __future__ import annotations

import errno
import fcntl
import os
import threading

import pytest

from lakefuse.checksums import content_hasher
from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.memory import MemoryBackend
from lakefuse.fs.passthrough import Passthrough, PassthroughState
from lakefuse.fs.replies import WouldBlock
from fs_staging import staged_entry


class RecordingBackings:
    """The kernel's registry of backing files, as the tests see it."""

    def __init__(self, fail: int | None = None):
        self.fail = fail
        self.open_ids: dict[int, str] = {}
        self.next_id = 1
        self.opened = 0
        self.writable: set[int] = set()
        self.read_ahead: list[int] = []  # of each open

    def open(self, path: str, size: int | None = None, read_ahead: int = 0) -> int:
        self.read_ahead.append(read_ahead)
        if self.fail is None:
            with open(path, "rb") as f:  # the kernel needs a file it can open
                if size is not None and os.fstat(f.fileno()).st_size != size:
                    raise OSError(errno.ESTALE, "not the object's size")
        return self._registered(path, writable=False)

    def register(self, fd: int) -> int:
        writable = os.O_ACCMODE & fcntl.fcntl(fd, fcntl.F_GETFL) == os.O_RDWR
        return self._registered(os.readlink(f"/proc/self/fd/{fd}"), writable)

    def _registered(self, path: str, writable: bool) -> int:
        if self.fail is not None:
            raise OSError(self.fail, os.strerror(self.fail))
        backing_id, self.next_id = self.next_id, self.next_id + 1
        self.open_ids[backing_id] = path
        self.writable.add(backing_id) if writable else None
        self.opened += 1
        return backing_id

    def kernel_write(self, backing_id: int, offset: int, data: bytes) -> None:
        """A write the kernel makes into a backing file registered writable."""
        assert backing_id in self.writable
        fd = os.open(self.open_ids[backing_id], os.O_WRONLY)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)

    def close(self, backing_id: int) -> None:
        del self.open_ids[backing_id]


class LocalFilesBackend(MemoryBackend):
    """The in-memory core whose objects are also immutable local files, like a local namespace."""

    def __init__(self, root):
        super().__init__()
        self.root = root

    def local_file(self, repo, entry):
        path = self.root / entry.physical_address.replace("/", "_")
        if not path.exists():
            path.write_bytes(self.open_reader(repo, entry).read(0, entry.size))
        return str(path)


# ---------------------------------------------------------------- the rules alone


def test_first_lone_read_registers_and_later_opens_share_the_backing_file(tmp_path):
    (tmp_path / "obj").write_bytes(b"x")
    backings = RecordingBackings()
    passthrough = Passthrough(backings)
    state = PassthroughState()
    first = passthrough.open(state, str(tmp_path / "obj"), alone=True)
    assert first.backing_id and not first.direct_io
    same = passthrough.open(state, str(tmp_path / "obj"), alone=False)
    assert same == first  # another reader of the same bytes: the kernel serves it too
    writer = passthrough.open(state, None, alone=False)
    assert writer.backing_id == first.backing_id and writer.direct_io  # the mount serves it
    for _ in range(3):
        assert backings.open_ids
        passthrough.release(state)
    assert not backings.open_ids and state.backing_id == 0


def test_no_backing_file_while_other_handles_use_the_page_cache(tmp_path):
    (tmp_path / "obj").write_bytes(b"x")
    passthrough = Passthrough(RecordingBackings())
    grant = passthrough.open(PassthroughState(), str(tmp_path / "obj"), alone=False)
    assert grant.backing_id == 0 and not grant.direct_io


def test_a_local_file_longer_than_the_object_is_not_registered(tmp_path):
    """An append in place cut short leaves the object's file longer than its entry: the kernel
    would read past the object, so the mount serves that handle (and passthrough stays on)."""
    (tmp_path / "obj").write_bytes(b"x,y\n1,2\nappended")
    backings = RecordingBackings()
    passthrough = Passthrough(backings)
    grant = passthrough.open(PassthroughState(), str(tmp_path / "obj"), alone=True, size=8)
    assert grant.backing_id == 0 and not backings.open_ids
    assert passthrough.enabled
    assert passthrough.open(PassthroughState(), str(tmp_path / "obj"), alone=True, size=16).backing_id


@pytest.mark.parametrize("failure, stays_enabled", [(errno.EPERM, False), (errno.ENOENT, True)])
def test_registration_failures_fall_back_to_serving_reads(tmp_path, failure, stays_enabled):
    passthrough = Passthrough(RecordingBackings(fail=failure))
    grant = passthrough.open(PassthroughState(), str(tmp_path / "obj"), alone=True)
    assert grant.backing_id == 0
    assert passthrough.enabled is stays_enabled


# ---------------------------------------------------------------- through LakeFilesystem


def local_filesystem(tmp_path, *, branches: bool = False, read_only: bool = False):
    backend = LocalFilesBackend(tmp_path)
    backend.create_repository("sales")
    backend.put_object("sales", "main", "top.csv", b"x,y\n1,2\n")
    backend.commit("sales", "main", "first")
    backend.create_tag("sales", "v1", "main")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), read_only=read_only)
    backings = RecordingBackings()
    fs.enable_passthrough(backings, branches=branches)
    return fs, backings, backend


@pytest.fixture
def local_fs(tmp_path):
    """Passthrough on branches too (``--passthrough-branches``)."""
    return local_filesystem(tmp_path, branches=True)


def kernel_reads(fs, backings, ino) -> bool:
    result = fs.open(ino, os.O_RDONLY)
    try:
        if not result.backing_id:
            return False
        assert not result.keep_cache and not result.direct_io
        with open(backings.open_ids[result.backing_id], "rb") as f:
            assert f.read() == b"x,y\n1,2\n"
        return True
    finally:
        fs.release(result.fh)


def test_the_kernel_reads_commits_and_tags_and_the_mount_serves_branches(tmp_path, make_driver):
    fs, backings, backend = local_filesystem(tmp_path)
    drive = make_driver(fs)
    commit = backend.resolve_ref("sales", "main").commit_id
    assert kernel_reads(fs, backings, drive.ino(f"sales/{commit}/top.csv"))
    assert kernel_reads(fs, backings, drive.ino("sales/v1/top.csv"))
    assert kernel_reads(fs, backings, drive.ino("sales/main~0/top.csv"))
    assert not kernel_reads(fs, backings, drive.ino("sales/main/top.csv"))
    assert not backings.open_ids
    assert backings.read_ahead == [8, 8, 8]  # each registration asks for the object's first bytes


def test_the_kernel_is_asked_to_read_in_the_first_128_kib_of_a_file_it_reads(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * (1 << 20))
    backings = RecordingBackings()
    Passthrough(backings).open(PassthroughState(), str(tmp_path / "big"), alone=True, size=1 << 20,
                               read_ahead=128 * 1024)
    assert backings.read_ahead == [128 * 1024]


@pytest.mark.parametrize("option", ["branches", "read_only"])
def test_branch_files_too_when_asked_or_when_nothing_writes_them(tmp_path, make_driver, option):
    fs, backings, _ = local_filesystem(tmp_path, **{option: True})
    assert kernel_reads(fs, backings, make_driver(fs).ino("sales/main/top.csv"))
    assert not backings.open_ids


def test_a_writer_beside_kernel_readers_is_served_by_the_mount(local_fs, make_driver):
    fs, backings, backend = local_fs
    drive = make_driver(fs)
    ino = drive.ino("sales/main/top.csv")
    reader = fs.open(ino, os.O_RDONLY)
    writer = fs.open(ino, os.O_RDWR)
    assert writer.backing_id == reader.backing_id and writer.direct_io
    fs.write(writer.fh, 0, b"Z")
    assert fs.read(writer.fh, 0, 3) == b"Z,y"  # the writer reads its own bytes through the mount
    late = fs.open(ino, os.O_RDONLY)  # the file is modified: this reader is served by the mount too
    assert late.backing_id == reader.backing_id and late.direct_io
    assert fs.read(late.fh, 0, 3) == b"Z,y"
    for result in (writer, late, reader):
        fs.release(result.fh)
    assert not backings.open_ids
    assert drive.read("sales/main/top.csv") == b"Z,y\n1,2\n"
    after = fs.open(ino, os.O_RDONLY)  # uploaded and unmodified again: the new object's file
    assert after.backing_id and not after.direct_io
    with open(backings.open_ids[after.backing_id], "rb") as f:
        assert f.read() == b"Z,y\n1,2\n"
    fs.release(after.fh)


def test_only_lone_opens_from_empty_are_written_by_the_kernel(local_fs, make_driver):
    fs, backings, backend = local_fs
    drive = make_driver(fs)
    parent = drive.ino("sales/main")
    created, _ = fs.create(parent, "new.txt", 0o644, os.O_RDWR | os.O_CREAT | os.O_EXCL)  # mkstemp
    assert created.backing_id in backings.writable and not created.direct_io
    backings.kernel_write(created.backing_id, 0, b"temp")
    reader = fs.open(drive.ino("sales/main/new.txt"), os.O_RDONLY)
    # beside it: the same backing file (the kernel allows no other), served by the mount
    assert reader.backing_id == created.backing_id and reader.direct_io
    assert fs.read(reader.fh, 0, 10) == b"temp"
    appending = fs.open(drive.ino("sales/main/top.csv"), os.O_WRONLY | os.O_APPEND)
    assert appending.backing_id == 0  # not from empty
    for result in (created, reader, appending):
        fs.release(result.fh)
    assert backings.opened == 1 and not backings.open_ids
    assert drive.read("sales/main/new.txt") == b"temp"
    truncating = fs.open(drive.ino("sales/main/top.csv"), os.O_WRONLY | os.O_TRUNC)
    assert truncating.backing_id and not truncating.direct_io
    assert truncating.backing_id in backings.writable
    assert backings.open_ids[truncating.backing_id].startswith(str(fs_spool_dir(fs)))
    fs.release(truncating.fh)
    assert not backings.open_ids
    assert drive.read("sales/main/top.csv") == b""


def fs_spool_dir(fs):
    return fs.state.spool_dir


def test_kernel_written_files_are_stored_at_release_with_their_bytes(local_fs, make_driver):
    fs, backings, backend = local_fs
    drive = make_driver(fs)
    parent = drive.ino("sales/main")
    result, attrs = fs.create(parent, "new.txt", 0o644, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    assert result.backing_id in backings.writable
    backings.kernel_write(result.backing_id, 0, b"hello ")
    backings.kernel_write(result.backing_id, 6, b"world\n")
    assert fs.getattr(attrs.ino).size == 12  # the spool's size, though no write reached the mount
    fs.flush(result.fh)  # close(2): a dup of the descriptor may still write
    backings.kernel_write(result.backing_id, 12, b"more\n")
    fs.release(result.fh)
    assert not backings.open_ids
    assert drive.read("sales/main/new.txt") == b"hello world\nmore\n"
    entry = staged_entry(backend, "sales", "main", "new.txt")
    assert entry is not None and entry.size == 17


def test_an_fsync_through_another_descriptor_before_the_release_is_durable(local_fs, make_driver):
    """A file the kernel wrote was closed; its RELEASE, which stores it, is still on its way
    when an appender opens it, writes and fsyncs (``tests/fuse/test_crash.py`` hit this): the
    fsync waits for that release, and what the release stored is staged before fsync returns,
    not with the stager's next batch."""
    fs, backings, backend = local_fs
    drive = make_driver(fs)
    result, attrs = fs.create(drive.ino("sales/main"), "app.log", 0o644, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    backings.kernel_write(result.backing_id, 0, b"body\n")
    fs.flush(result.fh)  # close(2): the RELEASE comes later
    appender = fs.open(attrs.ino, os.O_WRONLY | os.O_APPEND)
    fs.write(appender.fh, 5, b"line\n")
    release = threading.Timer(0.05, fs.release, args=(result.fh,))
    release.start()
    try:
        fs.fsync(appender.fh)
    finally:
        release.join()
    entry = backend.get_entry("sales", backend.resolve_ref("sales", "main"), "app.log")  # no waiting
    assert entry is not None and entry.size == len(b"body\nline\n")
    fs.release(appender.fh)
    assert drive.read("sales/main/app.log") == b"body\nline\n"


def test_a_handle_the_kernel_writes_asks_for_no_flush(local_fs, make_driver):
    """close(2) of such a descriptor costs no round trip (FOPEN_NOFLUSH): the file is stored at
    its release; a handle the mount writes (appending) still gets its FLUSH."""
    fs, backings, _ = local_fs
    drive = make_driver(fs)
    branch = drive.ino("sales/main")
    created, attrs = fs.create(branch, "new.txt", 0o644, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    assert created.backing_id in backings.writable and created.noflush
    backings.kernel_write(created.backing_id, 0, b"bytes\n")
    fs.release(created.fh)
    rewritten = fs.open(attrs.ino, os.O_RDWR | os.O_TRUNC)
    assert rewritten.backing_id in backings.writable and rewritten.noflush
    fs.release(rewritten.fh)
    appender = fs.open(attrs.ino, os.O_WRONLY | os.O_APPEND)
    assert appender.backing_id == 0 and not appender.noflush
    fs.release(appender.fh)


def test_a_release_that_hops_to_a_worker_tells_a_checksum_read_meanwhile_to_wait_for_it(local_fs, make_driver):
    """No FLUSH comes for a handle the kernel writes: its RELEASE, as the event loop takes it,
    says that its descriptors are closed, before the hop to the worker thread that stores a
    big file.  A read of ``lakefuse.checksum`` meanwhile (``cp`` then ``getfattr``) waits for
    that store: the spool itself, moved into storage, not a copy of it."""
    fs, backings, backend = local_fs
    drive = make_driver(fs)
    result, attrs = fs.create(drive.ino("sales/main"), "big.bin", 0o644, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    data = os.urandom(300_000)  # above what the event loop stores itself
    backings.kernel_write(result.backing_id, 0, data)
    spool_path = backings.open_ids[result.backing_id]
    stored = []
    store_file = backend.store_file
    backend.store_file = lambda repo, path, **options: stored.append(path) or store_file(repo, path, **options)
    with pytest.raises(WouldBlock):
        fs.release_nowait(result.fh)
    release = threading.Timer(0.05, fs.release, args=(result.fh,))
    release.start()
    try:
        checksum = fs.getxattr(attrs.ino, "lakefuse.checksum")
    finally:
        release.join()
    assert stored == [spool_path]
    hasher = content_hasher()
    hasher.update(data)
    assert checksum.decode() == hasher.hexdigest()
    assert drive.read("sales/main/big.bin") == data


def test_a_reader_beside_the_kernel_writer_reads_the_spool(local_fs, make_driver):
    fs, backings, _ = local_fs
    drive = make_driver(fs)
    result, attrs = fs.create(drive.ino("sales/main"), "new.txt", 0o644, os.O_WRONLY | os.O_CREAT)
    backings.kernel_write(result.backing_id, 0, b"abc")
    reader = fs.open(attrs.ino, os.O_RDONLY)
    assert reader.backing_id == result.backing_id and reader.direct_io  # the kernel's rule: the same file
    assert fs.read(reader.fh, 0, 10) == b"abc"
    backings.kernel_write(result.backing_id, 3, b"def")
    assert fs.read(reader.fh, 0, 10) == b"abcdef"
    fs.release(result.fh)  # the writer is done: the file is stored though the reader stays
    assert drive.read("sales/main/new.txt") == b"abcdef"
    fs.release(reader.fh)
    assert not backings.open_ids


def test_fsync_and_commit_store_a_copy_while_the_kernel_may_still_write(local_fs, make_driver):
    fs, backings, backend = local_fs
    drive = make_driver(fs)
    result, _ = fs.create(drive.ino("sales/main"), "log.txt", 0o644, os.O_WRONLY | os.O_CREAT)
    backings.kernel_write(result.backing_id, 0, b"one\n")
    fs.fsync(result.fh)
    first = backend.get_entry("sales", backend.resolve_ref("sales", "main"), "log.txt")  # fsync stages it
    assert first.size == 4
    backings.kernel_write(result.backing_id, 4, b"two\n")
    backend.calls.clear()
    fs.fsync(result.fh)  # changed since: stored again
    fs.fsync(result.fh)  # unchanged: nothing stored
    assert backend.calls["store_file"] == 1
    second = backend.get_entry("sales", backend.resolve_ref("sales", "main"), "log.txt")
    assert second.size == 8 and second.physical_address != first.physical_address
    assert backend.open_reader("sales", first).read(0, 100) == b"one\n"  # what was stored stays
    fs.release(result.fh)
    assert backend.calls["store_file"] == 1  # unchanged since the fsync: the copy stands
    assert drive.read("sales/main/log.txt") == b"one\ntwo\n"


def test_without_local_files_nothing_is_registered(tmp_path, make_driver):
    backend = MemoryBackend()  # no local_file: e.g. objects in S3
    backend.create_repository("sales")
    backend.put_object("sales", "main", "top.csv", b"x")
    backend.commit("sales", "main", "first")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"))
    fs.enable_passthrough(RecordingBackings(), branches=True)
    assert fs.passthrough is None
    result = fs.open(make_driver(fs).ino("sales/main~0/top.csv"), os.O_RDONLY)
    assert result.backing_id == 0


# ---------------------------------------------------------------- RELEASE after the next OPEN


class KernelInode:
    """One inode's io mode as Linux keeps it (``fs/fuse/iomode.c``), to check the replies the
    mount gives: cached opens count up; passthrough opens count down and hold one backing file,
    which every open must then name; a direct-I/O open without passthrough takes no mode, but
    is refused while a backing file is held.  A refused open is EIO, as from the kernel."""

    def __init__(self, backings: RecordingBackings):
        self._backings = backings
        self.counter = 0  # > 0: cached opens; < 0: passthrough opens
        self.backing_id = 0  # the backing file the inode holds (ids are never reused here)

    def open(self, result) -> str:
        if self.backing_id and not result.backing_id:
            raise OSError(errno.EIO, "FOPEN_PASSTHROUGH expected")
        if result.backing_id:
            if result.backing_id not in self._backings.open_ids or self.counter > 0 or \
                    self.backing_id not in (0, result.backing_id):
                raise OSError(errno.EIO, f"backing file {result.backing_id} refused")
            self.counter -= 1
            self.backing_id = result.backing_id
            return "passthrough"
        if result.direct_io:
            return "direct"
        if self.counter < 0:
            raise OSError(errno.EIO, "cached open of an inode in passthrough mode")
        self.counter += 1
        return "cached"

    def close(self, mode: str) -> None:
        """close(2): the kernel leaves the mode at once; its RELEASE reaches the mount later."""
        if mode == "passthrough":
            self.counter += 1
            if self.counter == 0:
                self.backing_id = 0
        elif mode == "cached":
            self.counter -= 1


def test_a_release_arriving_after_the_next_open(local_fs, make_driver):
    """The kernel closed the file; its RELEASE reaches the mount after the next OPEN: that open
    still names the backing file the kernel may hold, and so do the opens after it."""
    fs, backings, _ = local_fs
    drive = make_driver(fs)
    ino = drive.ino("sales/main/top.csv")
    kernel = KernelInode(backings)
    first = fs.open(ino, os.O_RDONLY)
    kernel.close(kernel.open(first))
    again = fs.open(ino, os.O_RDONLY)  # the first handle's RELEASE is still on its way
    assert again.backing_id == first.backing_id and not again.direct_io
    modes = [kernel.open(again)]
    fs.release(first.fh)
    appender = fs.open(ino, os.O_WRONLY | os.O_APPEND)
    assert appender.backing_id == first.backing_id and appender.direct_io
    modes.append(kernel.open(appender))
    for result, mode in zip((again, appender), modes):
        kernel.close(mode)
        fs.release(result.fh)
    assert not backings.open_ids and kernel.counter == 0


def test_a_release_served_while_the_next_open_is(local_fs, make_driver, monkeypatch):
    """The interleaving of the flaky real-mount test (``test_a_writer_beside_a_kernel_reader``):
    the next OPEN finds the file's open state, then the RELEASE of its last handle (served on
    another worker thread meanwhile) releases the backing file and drops that state, then the
    OPEN counts itself in.  It must not register a backing file in the dropped state, where
    the open after it would not see it: that open, answered without passthrough while the
    kernel holds the backing file, failed with EIO."""
    fs, backings, _ = local_fs
    drive = make_driver(fs)
    ino = drive.ino("sales/main/top.csv")
    kernel = KernelInode(backings)
    first = fs.open(ino, os.O_RDONLY)
    kernel.close(kernel.open(first))

    files = fs._files
    find_open_file = files._open_file

    def release_meanwhile(node):
        found = find_open_file(node)
        monkeypatch.setattr(files, "_open_file", find_open_file)  # once
        fs.release(first.fh)
        return found

    monkeypatch.setattr(files, "_open_file", release_meanwhile)
    again = fs.open(ino, os.O_RDONLY)
    assert again.backing_id and not again.direct_io and first.fh not in fs.state.handles._handles
    modes = [kernel.open(again)]
    appender = fs.open(ino, os.O_WRONLY | os.O_APPEND)  # EIO from the kernel before the fix
    assert appender.backing_id == again.backing_id and appender.direct_io
    modes.append(kernel.open(appender))
    fs.write(appender.fh, 8, b"3,4\n")
    for result, mode in zip((appender, again), modes):
        kernel.close(mode)
        fs.release(result.fh)
    assert not backings.open_ids and kernel.counter == 0 and kernel.backing_id == 0
    assert drive.read("sales/main/top.csv") == b"x,y\n1,2\n3,4\n"
    later = fs.open(ino, os.O_RDONLY)  # alone again: the new object's file
    assert later.backing_id and kernel.open(later) == "passthrough"
    fs.release(later.fh)


def test_a_directory_renamed_before_the_release_of_its_closed_file_takes_it(local_fs, make_driver):
    """A task commit renames its attempt directory as soon as its files are closed; the release
    of a file the kernel wrote may come later (here: after the rename)."""
    fs, backings, backend = local_fs
    drive = make_driver(fs)
    branch = drive.ino("sales/main")
    attempt = fs.mkdir(branch, "attempt", 0o755).ino
    result, _ = fs.create(attempt, "part-0", 0o644, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    backings.kernel_write(result.backing_id, 0, b"rows\n")
    fs.flush(result.fh)  # close(2); its release is on its way
    fs.rename(branch, "attempt", branch, "task")
    fs.release(result.fh)
    assert drive.read("sales/main/task/part-0") == b"rows\n"
    entry = staged_entry(backend, "sales", "main", "task/part-0")
    assert entry is not None and entry.size == 5
    assert backend.get_entry("sales", backend.resolve_ref("sales", "main"), "attempt/part-0") is None


def test_a_file_opened_for_appending_is_written_by_the_mount_even_when_created(local_fs, make_driver):
    fs, backings, _ = local_fs
    drive = make_driver(fs)
    result, _ = fs.create(drive.ino("sales/main"), "app.log", 0o644, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    assert result.backing_id == 0  # a log fsynced as it grows: appends in place, not a copy per fsync
    fs.release(result.fh)
    assert backings.opened == 0
