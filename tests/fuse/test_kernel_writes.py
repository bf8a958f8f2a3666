"""Files the kernel writes itself (FUSE passthrough writes into the spool), through a real
kernel mount: a write-only open that creates or truncates a file on a branch over local
storage.  The bytes arrive whole, a reader beside the writer sees the newest of them, a
descriptor closed while a dup of it still writes (a shell's ``>``) stores everything at the
end, and a commit taken meanwhile keeps the bytes it took (no stored object changes later)."""

from __future__ import annotations

import ctypes
import errno
import hashlib
import mmap
import os
import subprocess
import time

import blake3

from lakefuse.errors import ObjectNotFound
from lakemount import MountedLake

MiB = 1024 * 1024
MS_SYNC = 4  # msync(2), Linux


def staged_bytes(lake_home, branch: str, path: str) -> bytes | None:
    """The object the branch has at ``path`` once the mount staged it (new files are staged in
    batches, a moment after they are stored), polled for at most 10 s."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return lake_home.catalog.read_object("sales", branch, path)
        except ObjectNotFound:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.02)


def checksum(path) -> str:
    return os.getxattr(path, "lakefuse.checksum").decode()


def settled_checksum(path) -> str:
    """``lakefuse.checksum`` once the file is stored: while a handle that may map its spool is
    still open (the kernel sends a reader's RELEASE after its close(2) returned, and a read
    handle beside a read-write one names the spool too) it is not known yet (ENODATA)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return checksum(path)
        except OSError as exc:
            if exc.errno != errno.ENODATA or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_dd_with_small_blocks_stores_every_byte(branch, lake_home):
    target = branch / "dd.bin"
    subprocess.run(["dd", "if=/dev/urandom", f"of={target}", "bs=4k", "count=4096", "conv=fsync"],
                   check=True, capture_output=True, timeout=120)
    data = target.read_bytes()
    assert len(data) == 16 * MiB
    assert checksum(target) == "blake3:" + blake3.blake3(data).hexdigest()
    assert lake_home.catalog.read_object("sales", branch.name, "dd.bin") == data


def test_size_and_reads_beside_the_writer_follow_its_writes(branch):
    path = branch / "growing.txt"
    with open(path, "wb", buffering=0) as writer:
        writer.write(b"first\n")
        assert path.stat().st_size == 6
        with open(path, "rb") as reader:  # served by the mount, from the spool the kernel writes
            assert reader.read() == b"first\n"
            writer.write(b"second\n")
            reader.seek(0)
            assert reader.read() == b"first\nsecond\n"
        assert path.stat().st_size == 13
    assert path.read_bytes() == b"first\nsecond\n"


def test_a_descriptor_closed_before_its_dup_writes_keeps_everything(branch, lake_home):
    path = branch / "redirected.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    dup = os.dup(fd)
    os.close(fd)  # as a shell's `cmd > file` does before cmd writes
    os.write(dup, b"written after the first close\n")
    os.close(dup)
    assert path.read_bytes() == b"written after the first close\n"
    assert staged_bytes(lake_home, branch.name, "redirected.log") == b"written after the first close\n"


def test_a_commit_while_the_kernel_writes_keeps_what_it_took(branch, lake_home, lake):
    path = branch / "open.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"one\n")
        with open(branch / ".lakefuse/commit", "w") as control:
            control.write("while open\n")
        commit_id = (branch / ".lakefuse/commit").read_text().strip()
        os.write(fd, b"two\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    committed = lake / "sales" / commit_id / "open.log"
    assert committed.read_bytes() == b"one\n"  # the copy the commit took does not grow
    assert path.read_bytes() == b"one\ntwo\n"
    assert lake_home.catalog.read_object("sales", commit_id, "open.log") == b"one\n"
    assert lake_home.catalog.read_object("sales", branch.name, "open.log") == b"one\ntwo\n"


def test_a_rename_right_after_close_moves_the_whole_file(branch, lake_home):
    """Spark's committer: write a part file, close it, rename it into place."""
    temporary = branch / "_temporary"
    temporary.mkdir()
    payloads = {}
    for i in range(20):
        data = os.urandom(64 * 1024 + i)
        (temporary / f"part-{i:05d}").write_bytes(data)
        os.rename(temporary / f"part-{i:05d}", branch / f"part-{i:05d}")
        payloads[f"part-{i:05d}"] = hashlib.sha256(data).hexdigest()
    for name, digest in payloads.items():
        assert hashlib.sha256((branch / name).read_bytes()).hexdigest() == digest
        stored = staged_bytes(lake_home, branch.name, name)  # the rename waits for the stager's batch too
        assert stored is not None and hashlib.sha256(stored).hexdigest() == digest
        try:  # both halves of a rename are staged in one transaction
            lake_home.catalog.read_object("sales", branch.name, f"_temporary/{name}")
            raise AssertionError(f"_temporary/{name} is still staged beside {name}")
        except ObjectNotFound:
            pass
    assert os.listdir(temporary) == []


def test_stat_and_chmod_right_after_closing_a_big_temporary_file_never_fail(branch):
    """rsync's pattern: write a temporary file, close it, stat and chmod it, rename it.  A file
    bigger than what the event loop stores itself is stored on a worker thread at its RELEASE,
    which closes its spool while the event loop may be reading the file's size from it (that
    answered EBADF about once in a hundred files)."""
    data = os.urandom(300_000)
    for i in range(200):
        temporary = branch / f".x{i}.bin.tmp"
        with open(temporary, "wb") as f:
            f.write(data)
        assert temporary.stat().st_size == len(data)
        os.chmod(temporary, 0o644)
        assert temporary.stat().st_size == len(data)
        temporary.rename(branch / f"x{i}.bin")
    assert (branch / "x199.bin").read_bytes() == data


def test_without_passthrough_the_mount_serves_the_same_writes(lake_home, tmp_path):
    lake_home.catalog.create_branch("sales", "no-passthrough-writes", "main")
    mount = MountedLake(lake_home, tmp_path / "mnt", args=("--no-passthrough",))
    mount.start()
    try:
        target = mount / "sales/no-passthrough-writes/dd.bin"
        subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=4k", "count=256"], check=True,
                       capture_output=True, timeout=60)
        assert target.read_bytes() == bytes(MiB)
        assert "passthrough reads of local objects: off" in mount.logs()
    finally:
        mount.stop()


def daemon_bytes_written(mount: MountedLake) -> int:
    with open(f"/proc/{mount.proc.pid}/io") as f:
        return int(next(line for line in f if line.startswith("wchar:")).split()[1])


def test_the_daemon_writes_none_of_the_bytes_itself(branch, lake):
    """The point of it: `dd` of 32 MiB in 4 KiB writes reaches the spool without the mount
    writing them (a mount serving them would write every byte into the spool)."""
    (branch / "warm").write_bytes(b"x")  # the repository's storage is known to be local
    before = daemon_bytes_written(lake)
    subprocess.run(["dd", "if=/dev/zero", f"of={branch / 'quiet.bin'}", "bs=4k", "count=8192"], check=True,
                   capture_output=True, timeout=120)
    assert os.getxattr(branch / "quiet.bin", "lakefuse.size") == str(32 * MiB).encode()
    assert daemon_bytes_written(lake) - before < 4 * MiB


def test_pages_cached_before_a_rewrite_by_the_kernel_are_not_read_after_it(branch):
    path = branch / "rewritten.txt"
    path.write_bytes(b"old content\n")
    for _ in range(3):  # read through the kernel's page cache of the file, kept between opens
        assert path.read_bytes() == b"old content\n"
    for version in (b"new content\n", b"3rd content\n"):  # the same size: only the bytes tell
        path.write_bytes(version)
        assert path.read_bytes() == version
        assert path.read_bytes() == version


def test_a_directory_renamed_right_after_its_files_were_closed_takes_them_all(branch, lake_home):
    """FileOutputCommitter's task commit: part files written and closed, then their attempt
    directory renamed at once (the files' releases may still be on their way)."""
    for attempt in range(6):
        source = branch / f"_temporary/attempt_{attempt}"
        source.mkdir(parents=True)
        expected = {}
        for i in range(4):
            data = os.urandom(200_000 + i)
            (source / f"part-{i}").write_bytes(data)
            (source / f".part-{i}.crc").write_bytes(data[:16])
            expected[f"part-{i}"], expected[f".part-{i}.crc"] = data, data[:16]
        target = branch / f"task_{attempt}"
        os.rename(source, target)
        assert sorted(os.listdir(target)) == sorted(expected)
        for name, data in expected.items():
            assert (target / name).read_bytes() == data
            assert lake_home.catalog.read_object("sales", branch.name, f"task_{attempt}/{name}") == data


def test_a_mapping_through_a_second_descriptor_sees_writes_after_the_writer_closed(branch, lake_home):
    """The kernel maps a file through the backing file every open names (the writer's spool).
    That spool must stay the file's while any handle names it: stored away at the writer's
    close, the mapping would show (and write into) the stored object, and fault past its end."""
    path = branch / "mapped.bin"
    writer = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(writer, b"a" * 8192)
    second = os.open(path, os.O_RDWR)
    try:
        os.close(writer)
        time.sleep(0.5)
        os.pwrite(second, b"b" * 16384, 8192)  # the file grows after the writer's close
        with mmap.mmap(second, 24576, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE) as m:
            assert m[8192:8196] == b"bbbb"
            m[0:4] = b"MMAP"
            m.flush()
    finally:
        os.close(second)
    expected = b"MMAP" + b"a" * 8188 + b"b" * 16384
    assert path.read_bytes() == expected
    assert staged_bytes(lake_home, branch.name, "mapped.bin") == expected
    assert settled_checksum(path) == "blake3:" + blake3.blake3(expected).hexdigest()


def test_a_mapping_that_outlives_its_descriptor_keeps_its_writes(branch, lake_home):
    """A program may close a file right after mapping it and write through the mapping later
    (as linkers do with their output).  The kernel maps a passthrough file through its backing
    file, not through the descriptor, so the file's RELEASE reaches the mount while the mapping
    still writes: the mount must neither store the spool away under it (the stored object
    would change, its checksum no longer its bytes) nor forget what it writes."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    path = branch / "linked.out"
    size = 16384
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(fd, size)
    address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    assert address not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
    os.close(fd)
    time.sleep(0.3)  # the RELEASE reaches the mount
    try:
        ctypes.memmove(address, b"written through the mapping", 27)
        ctypes.memmove(address + size - 4, b"last", 4)
        assert libc.msync(address, size, MS_SYNC) == 0
    finally:
        libc.munmap(address, size)
    expected = b"written through the mapping" + bytes(size - 31) + b"last"
    deadline = time.monotonic() + 10
    while path.read_bytes() != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.read_bytes() == expected
    assert settled_checksum(path) == "blake3:" + blake3.blake3(expected).hexdigest()
    deadline = time.monotonic() + 10
    while staged_bytes(lake_home, branch.name, "linked.out") != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert staged_bytes(lake_home, branch.name, "linked.out") == expected


def test_metadata_set_after_an_fsync_is_stored_though_no_byte_changed(branch, lake_home):
    """An fsync stores a copy of the spool the kernel writes; a later change of metadata alone
    (no byte written since) must still be stored at the close."""
    path = branch / "tagged.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b"payload")
        os.fsync(fd)
        os.setxattr(path, "user.origin", b"sensor-7")
        os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    finally:
        os.close(fd)
    assert staged_bytes(lake_home, branch.name, "tagged.bin") == b"payload"
    deadline = time.monotonic() + 10
    while True:
        entry = lake_home.catalog.stat("sales", branch.name, "tagged.bin")
        if entry.metadata.get("origin") == "sensor-7" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert entry.metadata.get("origin") == "sensor-7"
    assert os.getxattr(path, "user.origin") == b"sensor-7"
    assert os.stat(path).st_mtime_ns == 1_600_000_000_000_000_000
