"""Files the kernel writes itself (FUSE passthrough writes into the spool), through a real
kernel mount: a write-only open that creates or truncates a file on a branch over local
storage.  The bytes arrive whole, a reader beside the writer sees the newest of them, a
descriptor closed while a dup of it still writes (a shell's ``>``) stores everything at the
end, and a commit taken meanwhile keeps the bytes it took (no stored object changes later)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time

import blake3

from lakefuse.errors import ObjectNotFound
from lakemount import MountedLake

MiB = 1024 * 1024


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
