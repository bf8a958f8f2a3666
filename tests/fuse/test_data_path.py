"""The data path through a real kernel mount: appends to a big file cost the bytes appended
(the object grows in place, no copy stays behind), a rewritten or removed file leaves no
object behind, sparse files stay sparse, writes clear the set-user-ID bit, and a mount with
``--writeback-cache`` (the kernel keeps written pages) behaves the same for shell tools."""

from __future__ import annotations

import os
import stat
import subprocess
import time

import pytest

from lakemount import MountedLake

MiB = 1024 * 1024


def allocated(root) -> int:
    total = 0
    for directory, _dirs, names in os.walk(root):
        for name in names:
            try:
                total += os.lstat(os.path.join(directory, name)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def wait_for(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def namespace(lake_home):
    return lake_home.app.default_namespace("sales")[len("local://"):]


def test_appends_with_the_shell_grow_the_object_in_place(branch, lake_home, namespace):
    body = os.urandom(4 * MiB)
    (branch / "app.log").write_bytes(body)
    os.getxattr(branch / "app.log", "lakefuse.checksum")  # stored (the kernel wrote it: at its release)
    os.sync()
    before = allocated(namespace)
    for i in range(5):
        subprocess.run(["sh", "-c", f'echo "line {i}" >> "$0"', str(branch / "app.log")], check=True, timeout=60)
    expected = body + b"".join(b"line %d\n" % i for i in range(5))
    assert (branch / "app.log").read_bytes() == expected
    with open(branch / "app.log", "rb") as f:
        os.fsync(f.fileno())  # staged now
    assert lake_home.catalog.read_object("sales", branch.name, "app.log") == expected
    os.sync()
    assert allocated(namespace) - before < MiB  # no copy of the 4 MiB file


def test_rewrites_then_rm_leave_no_objects_behind(branch, namespace):
    block = os.urandom(MiB)
    (branch / "warmup").write_bytes(b"x")
    os.sync()
    before = allocated(namespace)
    for _ in range(20):
        (branch / "rewritten.bin").write_bytes(block)
    os.unlink(branch / "rewritten.bin")

    def left() -> int:
        os.sync()
        return allocated(namespace) - before

    wait_for(lambda: left() < 2 * MiB, "superseded objects were not reclaimed")


def test_a_sparse_file_stays_sparse_when_written_into(branch, namespace):
    path = branch / "sparse.bin"
    with open(path, "wb") as f:
        f.write(b"head")
        f.truncate(512 * MiB)
    os.sync()
    before = allocated(namespace)
    with open(path, "r+b") as f:
        f.seek(256 * MiB)
        f.write(b"x" * 4096)
    os.sync()
    assert allocated(namespace) - before < 4 * MiB
    with open(path, "rb") as f:
        f.seek(256 * MiB - 2)
        assert f.read(6) == b"\0\0xxxx"


def test_a_write_clears_the_set_user_id_bit(branch):
    path = branch / "tool"
    path.write_bytes(b"#!/bin/sh\n")
    os.chmod(path, 0o4755)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o4755
    with open(path, "ab") as f:
        f.write(b"echo hi\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755


@pytest.fixture(scope="module")
def writeback_lake(lake_home, tmp_path_factory):
    mount = MountedLake(lake_home, tmp_path_factory.mktemp("wb") / "lake", args=("--writeback-cache",))
    mount.start()
    yield mount
    mount.stop()


def test_a_writeback_cache_mount_writes_small_pieces_and_keeps_every_byte(writeback_lake, lake_home):
    lake_home.catalog.create_branch("sales", "writeback", "main")
    branch = writeback_lake / "sales/writeback"
    subprocess.run(["dd", "if=/dev/urandom", f"of={branch / 'dd.bin'}", "bs=4k", "count=2048", "conv=fsync"],
                   check=True, capture_output=True, timeout=120)
    data = (branch / "dd.bin").read_bytes()
    assert len(data) == 8 * MiB
    assert lake_home.catalog.read_object("sales", "writeback", "dd.bin") == data
    # shell tools: copy, rename out of a directory, remove the rest (no file comes back)
    (branch / "src").mkdir()
    for i in range(10):
        (branch / f"src/f{i}.txt").write_text(f"file {i}\n")
    subprocess.run(["cp", "-r", str(branch / "src"), str(branch / "copied")], check=True, timeout=60)
    os.rename(branch / "copied/f3.txt", branch / "moved.txt")
    subprocess.run(["rm", "-r", str(branch / "copied")], check=True, timeout=60)
    assert not (branch / "copied").exists()
    assert (branch / "moved.txt").read_text() == "file 3\n"
    os.utime(branch / "moved.txt", (1_500_000_000, 1_500_000_000))
    assert os.stat(branch / "moved.txt").st_mtime == 1_500_000_000
    with open(branch / "moved.txt", "a") as f:
        f.write("appended\n")
    assert (branch / "moved.txt").read_text() == "file 3\nappended\n"
    assert os.stat(branch / "moved.txt").st_mtime > 1_500_000_000


def test_appends_through_the_writeback_cache_stay_in_place(writeback_lake, lake_home, namespace):
    lake_home.catalog.create_branch("sales", "writeback-appends", "main")
    branch = writeback_lake / "sales/writeback-appends"
    body = os.urandom(4 * MiB + 100)  # a partial last page: the kernel writes it back whole
    (branch / "app.log").write_bytes(body)
    os.sync()
    before = allocated(namespace)
    for i in range(5):
        subprocess.run(["sh", "-c", f'echo "line {i}" >> "$0"', str(branch / "app.log")], check=True, timeout=60)
    expected = body + b"".join(b"line %d\n" % i for i in range(5))
    assert (branch / "app.log").read_bytes() == expected
    with open(branch / "app.log", "rb") as f:
        os.fsync(f.fileno())
    assert lake_home.catalog.read_object("sales", "writeback-appends", "app.log") == expected
    os.sync()
    assert allocated(namespace) - before < MiB
