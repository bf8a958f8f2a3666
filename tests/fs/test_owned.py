"""Objects the mount owns (lakefuse.fs.owned), over the real core: SQLite and a local storage
namespace, driven without a kernel.  Appends to a big file the mount wrote and nobody committed
go into its object's own file and cost the bytes appended; a commit, or another writer, ends
that; the object a rewrite or an unlink supersedes is deleted soon after, never one a commit
or an open handle still uses."""

from __future__ import annotations

import os
import time

import pytest

import lakefuse.fs.owned as owned_module
from lakefuse.app import App
from lakefuse.checksums import content_hasher
from lakefuse.config import load_config
from lakefuse.fs.app_backend import AppBackend
from lakefuse.fs.filesystem import LakeFilesystem

MiB = 1024 * 1024


@pytest.fixture
def app(core):
    core.catalog.upload_bytes("sales", "main", "seed.txt", b"seed")
    core.catalog.commit("sales", "main", "seed", "tests")
    return core


@pytest.fixture
def fs(app, tmp_path, monkeypatch):
    monkeypatch.setattr(owned_module, "RECLAIM_DELAY", 0.05)
    fs = LakeFilesystem(AppBackend(app), spool_dir=str(tmp_path / "spool"), change_feed=True)
    yield fs
    fs.close()


@pytest.fixture
def drive(fs, make_driver):
    return make_driver(fs)


def object_files(namespace: str) -> dict[str, int]:
    """Data objects in the namespace holding bytes: path -> allocated bytes (not the empty files
    that wait there to become the next spools, see ``SpoolReserve``)."""
    out = {}
    for directory, _dirs, names in os.walk(namespace):
        for name in names:
            path = os.path.join(directory, name)
            if "/data/" in path:
                try:
                    st = os.lstat(path)
                except FileNotFoundError:
                    continue  # reclaimed meanwhile
                if st.st_size > 0:
                    out[path] = st.st_blocks * 512
    return out


def write(drive, path: str, data: bytes) -> None:
    """Write a whole file and stage it (a new file's entry waits for the stager's next batch)."""
    drive.write(path, data)
    drive.fs.state.stager.flush_all()


def append(drive, path: str, data: bytes) -> None:
    """What ``>>`` does: open without truncating, write at the end, close."""
    ino = drive.ino(path)
    size = drive.fs.getattr(ino).size
    result = drive.fs.open(ino, os.O_WRONLY | os.O_APPEND)
    try:
        drive.fs.write(result.fh, size, data)
        drive.fs.flush(result.fh)
    finally:
        drive.fs.release(result.fh)


def checksum(data: bytes) -> str:
    hasher = content_hasher()
    hasher.update(data)
    return hasher.hexdigest()


def wait_for(condition, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_appends_to_an_uncommitted_file_go_into_its_object_in_place(app, fs, drive, namespace):
    body = os.urandom(2 * MiB)
    write(drive, "sales/main/log.bin", body)
    before = app.catalog.stat("sales", "main", "log.bin")
    objects = object_files(namespace)
    expected = body
    for i in range(5):
        line = b"line %d\n" % i
        append(drive, "sales/main/log.bin", line)
        expected += line
    after = app.catalog.stat("sales", "main", "log.bin")
    assert after.physical_address == before.physical_address  # the same object, grown
    assert after.size == len(expected) and after.checksum == checksum(expected)
    assert app.catalog.read_object("sales", "main", "log.bin") == expected  # verified against the checksum
    assert drive.read("sales/main/log.bin") == expected
    assert set(object_files(namespace)) == set(objects)  # no copy


def test_a_commit_ends_appends_in_place_and_the_committed_bytes_stay(app, fs, drive, namespace):
    body = os.urandom(MiB)
    write(drive, "sales/main/log.bin", body)
    drive.stat("sales/main/log.bin")
    fs.poll_changes()  # the mount's own cursor moves on
    commit = app.catalog.commit("sales", "main", "take it", "someone else")
    fs.poll_changes()
    append(drive, "sales/main/log.bin", b"more\n")
    committed = app.catalog.stat("sales", commit.id, "log.bin")
    now = app.catalog.stat("sales", "main", "log.bin")
    assert now.physical_address != committed.physical_address  # copied once
    assert app.catalog.read_object("sales", commit.id, "log.bin") == body
    assert app.catalog.read_object("sales", "main", "log.bin") == body + b"more\n"
    # the copy is the mount's own: the next append goes into it in place
    append(drive, "sales/main/log.bin", b"again\n")
    assert app.catalog.stat("sales", "main", "log.bin").physical_address == now.physical_address
    assert app.catalog.read_object("sales", "main", "log.bin") == body + b"more\nagain\n"


def test_another_writer_on_the_branch_ends_appends_in_place(app, fs, drive, tmp_path):
    body = os.urandom(MiB)
    write(drive, "sales/main/log.bin", body)
    first = app.catalog.stat("sales", "main", "log.bin")
    other = App(load_config(environ={"LAKEFUSE_HOME": str(tmp_path / "home")}))  # another database origin
    try:
        other.catalog.upload_bytes("sales", "main", "elsewhere.txt", b"from another process")
    finally:
        other.close()
    append(drive, "sales/main/log.bin", b"x")
    assert app.catalog.stat("sales", "main", "log.bin").physical_address != first.physical_address
    assert app.catalog.read_object("sales", "main", "log.bin") == body + b"x"
    assert app.catalog.read_entry("sales", first) == body


def test_a_write_below_the_end_copies_and_leaves_the_object_as_staged(app, fs, drive, namespace):
    body = os.urandom(MiB)
    write(drive, "sales/main/f.bin", body)
    staged = app.catalog.stat("sales", "main", "f.bin")
    ino = drive.ino("sales/main/f.bin")
    result = fs.open(ino, os.O_RDWR)
    fs.write(result.fh, len(body), b"tail")  # in place
    fs.write(result.fh, 10, b"middle")  # below the staged size: copied out first
    fs.flush(result.fh)
    fs.release(result.fh)
    expected = bytearray(body + b"tail")
    expected[10:16] = b"middle"
    assert app.catalog.read_object("sales", "main", "f.bin") == bytes(expected)
    assert app.catalog.stat("sales", "main", "f.bin").physical_address != staged.physical_address
    old_file = os.path.join(namespace, staged.physical_address)
    # the old object is as its entry says (the in-place tail cut off), then reclaimed
    wait_for(lambda: not os.path.exists(old_file), "the superseded object was not reclaimed")


def test_rewrites_and_an_unlink_leave_no_objects_behind(app, fs, drive, namespace):
    objects = object_files(namespace)
    for _ in range(10):
        write(drive, "sales/main/r.bin", os.urandom(MiB))
    wait_for(lambda: len(object_files(namespace)) == len(objects) + 1, "rewritten objects left behind")
    drive.unlink("sales/main/r.bin")
    wait_for(lambda: object_files(namespace) == objects, "the unlinked file's object left behind")


def test_committed_objects_are_never_reclaimed(app, fs, drive, namespace):
    write(drive, "sales/main/c.bin", b"committed bytes")
    drive.commit("sales/main", "keep it")
    committed = app.catalog.stat("sales", "main", "c.bin")
    write(drive, "sales/main/c.bin", b"newer bytes")
    drive.unlink("sales/main/c.bin")
    time.sleep(0.5)
    assert app.catalog.read_entry("sales", committed) == b"committed bytes"


def test_an_object_an_open_handle_reads_is_not_reclaimed(app, fs, drive, namespace):
    write(drive, "sales/main/held.bin", b"old bytes")
    old = app.catalog.stat("sales", "main", "held.bin")
    reader = fs.open(drive.ino("sales/main/held.bin"), os.O_RDONLY)
    write(drive, "sales/main/held.bin", b"new bytes")
    time.sleep(0.5)
    assert app.catalog.read_entry("sales", old) == b"old bytes"  # a handle was open at the rewrite: kept
    fs.release(reader.fh)


def test_sparse_files_stay_sparse_when_rewritten_in_the_middle(app, fs, drive, namespace):
    size = 256 * MiB
    parent, name = drive.parent("sales/main/sparse.bin")
    result, _ = fs.create(parent, name, 0o100644, os.O_RDWR | os.O_CREAT)
    fs.write(result.fh, 0, b"head")
    fs.setattr(drive.ino("sales/main/sparse.bin"), size=size)
    fs.release(result.fh)
    before = sum(object_files(namespace).values())
    result = fs.open(drive.ino("sales/main/sparse.bin"), os.O_WRONLY)
    fs.write(result.fh, size // 2, b"x" * 4096)
    fs.release(result.fh)
    fs.state.stager.flush_all()
    wait_for(lambda: sum(object_files(namespace).values()) - before < MiB, "the rewrite filled the holes")
    assert drive.stat("sales/main/sparse.bin").size == size
    data = app.catalog.read_range("sales", "main", "sparse.bin", size // 2 - 2, 8)
    assert data == b"\0\0xxxxxx"


def test_a_whole_page_written_back_over_the_end_is_still_an_append_in_place(app, fs, drive):
    body = os.urandom(MiB + 1000)  # the last page holds 1000 bytes of the file
    write(drive, "sales/main/paged.bin", body)
    before = app.catalog.stat("sales", "main", "paged.bin")
    page_start = MiB  # what the kernel's writeback cache sends: the whole last page, appended to
    result = fs.open(drive.ino("sales/main/paged.bin"), os.O_WRONLY)
    fs.write(result.fh, page_start, body[page_start:] + b"appended\n")
    fs.flush(result.fh)
    fs.release(result.fh)
    after = app.catalog.stat("sales", "main", "paged.bin")
    assert after.physical_address == before.physical_address
    assert app.catalog.read_object("sales", "main", "paged.bin") == body + b"appended\n"
    # a page that changes a byte below the end is a real change: copied, the old object kept as staged
    result = fs.open(drive.ino("sales/main/paged.bin"), os.O_WRONLY)
    fs.write(result.fh, page_start, b"X" + body[page_start + 1:] + b"appended\nmore\n")
    fs.release(result.fh)
    fs.state.stager.flush_all()
    assert app.catalog.stat("sales", "main", "paged.bin").physical_address != before.physical_address
    expected = body[:page_start] + b"X" + body[page_start + 1:] + b"appended\nmore\n"
    assert app.catalog.read_object("sales", "main", "paged.bin") == expected


def test_renamed_files_stay_the_mounts_own_and_a_file_renamed_over_is_reclaimed(app, fs, drive, namespace):
    drive.mkdir("sales/main/_temporary")
    drive.mkdir("sales/main/dir")
    before = sum(object_files(namespace).values())  # bytes: empty directory markers may come and go
    body = os.urandom(MiB)
    write(drive, "sales/main/_temporary/part-0.bin", body)
    write(drive, "sales/main/part-0.bin", b"an older output")
    older = os.path.join(namespace, app.catalog.stat("sales", "main", "part-0.bin").physical_address)
    drive.rename("sales/main/_temporary/part-0.bin", "sales/main/part-0.bin")  # over the older one
    moved = app.catalog.stat("sales", "main", "part-0.bin")
    append(drive, "sales/main/part-0.bin", b"appended after the rename\n")
    assert app.catalog.stat("sales", "main", "part-0.bin").physical_address == moved.physical_address
    wait_for(lambda: not os.path.exists(older), "the file renamed over was not reclaimed")
    write(drive, "sales/main/dir/inner.bin", body)
    drive.rename("sales/main/dir", "sales/main/moved-dir")
    drive.unlink("sales/main/moved-dir/inner.bin")
    drive.unlink("sales/main/part-0.bin")
    wait_for(lambda: sum(object_files(namespace).values()) == before, "objects of renamed files were not reclaimed")
