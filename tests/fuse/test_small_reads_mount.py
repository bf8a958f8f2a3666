"""Reading many small files through a real kernel mount (issue 18, read side): closing a
read-only descriptor, or one the kernel writes through, costs no round trip to the daemon
(FOPEN_NOFLUSH), while closing one the mount writes through still waits for the daemon (its
close reports upload errors); and the probe-and-read
pattern of Hadoop's checksum filesystem returns every file's bytes on a branch and a commit;
reads of branch files are answered by lakefuse's pyfuse3 itself, and a reader still sees what a
writer changes after it opened."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from lakefuse.fuse.operations import FILE_INFO_TAKES_NOFLUSH
from lakemount import MountedLake, mounted

pyfuse3 = pytest.importorskip("pyfuse3")
needs_native_reads = pytest.mark.skipif(
    not hasattr(pyfuse3, "native_read_add"), reason="a stock pyfuse3 sends every READ to the handler")
needs_noflush = pytest.mark.skipif(
    not FILE_INFO_TAKES_NOFLUSH, reason="a stock pyfuse3 cannot tell the kernel to skip FLUSH")


@pytest.fixture(scope="module")
def small_files(lake_home, tmp_path_factory):
    """200 small files on a branch, committed; and a mount of its own (the tests stop and
    continue its daemon)."""
    catalog = lake_home.catalog
    catalog.create_branch("sales", "small-reads", "main")
    for i in range(200):
        catalog.upload_bytes("sales", "small-reads", f"parts/part-{i:05d}.csv", f"id\n{i}\n".encode())
    commit = catalog.commit("sales", "small-reads", "small files", "tests").id
    mount = MountedLake(lake_home, tmp_path_factory.mktemp("mnt") / "small")
    mount.start()
    yield mount, commit
    mount.stop()


def closes_while_stopped(mount: MountedLake, fd: int) -> bool:
    """Whether close(fd) returns while the daemon is stopped (it would wait for a FLUSH)."""
    os.kill(mount.proc.pid, signal.SIGSTOP)
    closer = threading.Thread(target=os.close, args=(fd,), daemon=True)
    try:
        closer.start()
        closer.join(2.0)
        return not closer.is_alive()
    finally:
        os.kill(mount.proc.pid, signal.SIGCONT)
        closer.join(30)


@needs_noflush
@pytest.mark.parametrize("ref", ["small-reads", "commit"])
def test_closing_a_read_only_descriptor_does_not_wait_for_the_daemon(small_files, ref):
    mount, commit = small_files
    path = mount.mountpoint / "sales" / (commit if ref == "commit" else ref) / "parts/part-00007.csv"
    fd = os.open(path, os.O_RDONLY)
    assert os.read(fd, 100) == b"id\n7\n"
    assert closes_while_stopped(mount, fd)


@needs_noflush
def test_closing_a_descriptor_the_mount_writes_still_waits_for_the_daemon(small_files):
    """The other half: a file written through the mount (appending) is stored at close, and
    its close reports the upload's errors, so it waits."""
    mount, _ = small_files
    fd = os.open(mount.mountpoint / "sales/small-reads/parts/appended.csv", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                 0o644)
    os.write(fd, b"id\n1\n")
    assert not closes_while_stopped(mount, fd)
    assert (mount.mountpoint / "sales/small-reads/parts/appended.csv").read_bytes() == b"id\n1\n"


@needs_noflush
def test_closing_a_descriptor_the_kernel_writes_does_not_wait_for_the_daemon(small_files):
    """A file the kernel writes itself (created, not for appending) is stored at its release,
    which the kernel sends after close(2) returns: the close asks the daemon nothing (one round
    trip less per file created), and the file is there once the daemon runs again."""
    mount, _ = small_files
    fd = os.open(mount.mountpoint / "sales/small-reads/parts/written.csv", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"id\n1\n")
    assert closes_while_stopped(mount, fd)
    assert (mount.mountpoint / "sales/small-reads/parts/written.csv").read_bytes() == b"id\n1\n"


@pytest.mark.parametrize("ref", ["small-reads", "commit"])
def test_probe_for_a_checksum_file_then_read_every_file(small_files, ref):
    """Hadoop's checksum filesystem: stat ``.<name>.crc`` (missing), then read the file, for
    names never listed before; every byte comes back, on the branch and in the commit."""
    mount, commit = small_files
    root = mount.mountpoint / "sales" / (commit if ref == "commit" else ref) / "parts"
    for i in range(200):
        name = f"part-{i:05d}.csv"
        with pytest.raises(FileNotFoundError):
            os.stat(root / f".{name}.crc")
        assert (root / name).read_bytes() == f"id\n{i}\n".encode()


def uncache(fd: int) -> None:
    """Drop the kernel's pages of the file open as ``fd``: its next read is a READ."""
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


@needs_native_reads
def test_reads_of_branch_files_are_answered_by_the_binding_and_follow_writes(lake_home, tmp_path):
    lake_home.catalog.create_branch("sales", "native-reads", "main")
    contents = {f"n/{i:03d}.txt": os.urandom(100 + 37 * i) for i in range(40)}
    with mounted(lake_home, tmp_path / "mnt", "lakefs://sales/native-reads") as mount:
        for name, data in contents.items():
            (mount / name).parent.mkdir(exist_ok=True)
            (mount / name).write_bytes(data)
        for name, data in contents.items():
            assert (mount / name).read_bytes() == data
        path = mount / "n/000.txt"
        original = contents["n/000.txt"]
        reader = os.open(path, os.O_RDONLY)
        try:
            uncache(reader)
            assert os.pread(reader, 10, 0) == original[:10]  # the handler opens the object...
            uncache(reader)
            assert os.pread(reader, 10, 0) == original[:10]  # ...the binding reads it
            with open(path, "r+b", buffering=0) as writer:  # writes after the reader opened...
                writer.write(b"CHANGED")
                uncache(reader)
                assert os.pread(reader, 10, 0) == b"CHANGED" + original[7:10]  # ...are what it reads
                writer.seek(0, os.SEEK_END)
                writer.write(b"+tail")
            uncache(reader)
            assert os.pread(reader, 4096, 0) == b"CHANGED" + original[7:] + b"+tail"
            os.truncate(path, 2)
            uncache(reader)
            assert os.pread(reader, 4096, 0) == b"CH"
        finally:
            os.close(reader)
    log = mount.log_path.read_text()
    assert "answered in the binding when cached: on" in log
    answered = int(log.split("reads answered in the binding: ")[1].split()[0])
    assert answered >= len(contents) - 5  # one READ per file, give or take a page still being read in
