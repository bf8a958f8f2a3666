"""The control files merge, tag, branch and reset without a kernel (lakefuse.fs.refops through
lakefuse.fs.control): each runs when a write ends with a newline (else at close), fails that
write with the error's errno, shows its last result when read, and leaves the mount showing
the new state at once (the kernel told through the invalidator)."""

from __future__ import annotations

import errno
import os

import pytest

from lakefuse.errors import LakefuseError
from lakefuse.fs.filesystem import LakeFilesystem

ERRORS = (OSError, LakefuseError)


@pytest.fixture
def invalidated(fs):
    """The kernel invalidations the filesystem asked for, as they come."""
    calls = []
    fs.set_kernel_invalidator(calls.append)
    return calls


def control(fs, drive, branch: str, name: str, text: str, *, close: bool = True) -> None:
    """Write ``text`` to ``<branch>/.lakefuse/<name>`` in one write(2), then close."""
    result = fs.open(drive.ino(f"{branch}/.lakefuse/{name}"), os.O_WRONLY | os.O_TRUNC)
    try:
        fs.write(result.fh, 0, text.encode())
        if close:
            fs.flush(result.fh)
    finally:
        fs.release(result.fh)


def control_errno(fs, drive, branch: str, name: str, text: str) -> int:
    with pytest.raises(ERRORS) as exc:
        control(fs, drive, branch, name, text)
    return exc.value.errno


def result(drive, branch: str, name: str) -> str:
    return drive.read(f"{branch}/.lakefuse/{name}").decode()


def head(backend, branch: str) -> str:
    return backend.branch_head("sales", branch)


@pytest.fixture
def dev(fs, drive, backend):
    """A branch ``dev`` with one commit main lacks (``dev.txt``)."""
    drive.mkdir("sales/dev")
    drive.write("sales/dev/dev.txt", b"from dev")
    drive.commit("sales/dev", "add dev.txt")
    return "sales/dev"


# ------------------------------------------------------------------ merge

def test_merge_shows_the_source_in_the_branch_at_once_and_reads_back_the_commit(fs, drive, backend, dev,
                                                                                 invalidated):
    assert drive.read("sales/main/top.csv") == b"x,y\n1,2\n"  # the kernel knows main's names
    before = head(backend, "main")
    control(fs, drive, "sales/main", "merge", "dev\n")
    merged = head(backend, "main")
    assert merged != before and result(drive, "sales/main", "merge") == merged + "\n"
    assert drive.read("sales/main/dev.txt") == b"from dev"
    assert "dev.txt" in drive.listdir("sales/main")
    assert invalidated and any(name == b"top.csv" for entries in invalidated for _p, name in entries.entries)


def test_merge_runs_before_the_write_returns_and_text_without_newline_at_close(fs, drive, backend, dev):
    handle = fs.open(drive.ino("sales/main/.lakefuse/merge"), os.O_WRONLY | os.O_TRUNC)
    fs.write(handle.fh, 0, b"dev")
    assert "dev.txt" not in drive.listdir("sales/main")
    fs.flush(handle.fh)
    fs.release(handle.fh)
    assert "dev.txt" in drive.listdir("sales/main")


def test_merge_accepts_a_lakefs_uri_of_the_same_repository_only(fs, drive, backend, dev):
    assert control_errno(fs, drive, "sales/main", "merge", "lakefs://other/dev\n") == errno.EINVAL
    control(fs, drive, "sales/main", "merge", "lakefs://sales/dev\n")
    assert "dev.txt" in drive.listdir("sales/main")


@pytest.mark.parametrize("text", ["\n", "dev sideways\n", "dev source-wins extra\n", "dev\nv1\n"])
def test_bad_merge_lines_are_einval_and_change_nothing(fs, drive, backend, dev, text):
    before = head(backend, "main")
    assert control_errno(fs, drive, "sales/main", "merge", text) == errno.EINVAL
    assert head(backend, "main") == before
    assert result(drive, "sales/main", "merge").startswith("error: ")


def test_a_merge_of_nothing_new_is_enodata_and_of_a_missing_ref_enoent(fs, drive, backend, dev):
    assert control_errno(fs, drive, "sales/main", "merge", "v1\n") == errno.ENODATA
    assert control_errno(fs, drive, "sales/main", "merge", "nosuchref\n") == errno.ENOENT


def conflicting(fs, drive, backend):
    """main and dev both changed top.csv since they parted."""
    drive.mkdir("sales/dev")
    drive.write("sales/dev/top.csv", b"dev's version")
    drive.commit("sales/dev", "dev changes top.csv")
    drive.write("sales/main/top.csv", b"main's version")
    drive.commit("sales/main", "main changes top.csv")


def test_a_conflict_fails_with_ebusy_writes_nothing_and_lists_the_paths(fs, drive, backend):
    conflicting(fs, drive, backend)
    before = head(backend, "main")
    assert control_errno(fs, drive, "sales/main", "merge", "dev\n") == errno.EBUSY
    assert head(backend, "main") == before
    text = result(drive, "sales/main", "merge")
    assert text.startswith("error: ") and text.endswith("\nconflict: top.csv\n")
    assert drive.read("sales/main/top.csv") == b"main's version"


@pytest.mark.parametrize("strategy, expected", [("source-wins", b"dev's version"), ("dest-wins", b"main's version")])
def test_a_strategy_resolves_the_conflict(fs, drive, backend, strategy, expected):
    conflicting(fs, drive, backend)
    control(fs, drive, "sales/main", "merge", f"dev {strategy}\n")
    assert drive.read("sales/main/top.csv") == expected


def test_a_destination_with_uncommitted_changes_or_files_being_written_is_ebusy(fs, drive, backend, dev):
    before = head(backend, "main")
    parent, _ = drive.parent("sales/main/open.txt")
    opened, _ = fs.create(parent, "open.txt", 0o644, os.O_WRONLY | os.O_CREAT)
    fs.write(opened.fh, 0, b"in progress")
    assert control_errno(fs, drive, "sales/main", "merge", "dev\n") == errno.EBUSY
    assert "open.txt" in result(drive, "sales/main", "merge")
    fs.flush(opened.fh)
    fs.release(opened.fh)  # closed: waits for the stager, then a staged change
    assert control_errno(fs, drive, "sales/main", "merge", "dev\n") == errno.EBUSY
    assert "uncommitted changes" in result(drive, "sales/main", "merge")
    assert head(backend, "main") == before
    assert drive.read("sales/main/open.txt") == b"in progress"


# ------------------------------------------------------------------ tag and branch

def test_tag_names_the_head_and_its_directory_shows_at_once(fs, drive, backend, dev):
    control(fs, drive, "sales/dev", "tag", "dev-1\n")
    assert result(drive, "sales/dev", "tag") == head(backend, "dev") + "\n"
    assert "dev-1" in drive.listdir("sales")
    assert drive.read("sales/dev-1/dev.txt") == b"from dev"
    assert control_errno(fs, drive, "sales/dev", "tag", "dev-1\n") == errno.EEXIST
    assert control_errno(fs, drive, "sales/dev", "tag", "main\n") == errno.EEXIST
    assert control_errno(fs, drive, "sales/dev", "tag", "bad name\n") == errno.EINVAL
    assert result(drive, "sales/dev", "tag").startswith("error: ")


def test_branch_starts_a_branch_at_the_head(fs, drive, backend, dev):
    drive.write("sales/dev/uncommitted.txt", b"u")  # not carried over: the head commit is
    control(fs, drive, "sales/dev", "branch", "dev2\n")
    assert head(backend, "dev2") == head(backend, "dev")
    assert result(drive, "sales/dev", "branch") == head(backend, "dev") + "\n"
    assert sorted(drive.listdir("sales/dev2")) == ["a", "dev.txt", "top.csv"]
    drive.write("sales/dev2/more.txt", b"m")  # writable at once
    assert control_errno(fs, drive, "sales/dev", "branch", "dev2\n") == errno.EEXIST
    assert control_errno(fs, drive, "sales/dev", "branch", "v1\n") == errno.EEXIST
    assert control_errno(fs, drive, "sales/dev", "branch", "a/b\n") == errno.EINVAL


def test_operations_refused_on_tags_and_read_only_mounts(fs, drive, backend, tmp_path, make_driver):
    with pytest.raises(ERRORS):
        drive.ino("sales/v1/.lakefuse/merge")  # a tag has no control directory
    ro = LakeFilesystem(backend, spool_dir=str(tmp_path / "ro"), read_only=True)
    d = make_driver(ro)
    with pytest.raises(ERRORS) as exc:
        ro.open(d.ino("sales/main/.lakefuse/tag"), os.O_WRONLY)
    assert exc.value.errno == errno.EROFS


# ------------------------------------------------------------------ reset

def test_reset_of_everything_leaves_the_branch_as_its_last_commit(fs, drive, backend, dev, invalidated):
    drive.write("sales/dev/dev.txt", b"changed")
    drive.write("sales/dev/added.txt", b"added")
    drive.unlink("sales/dev/top.csv")
    assert drive.read("sales/dev/.lakefuse/status") != b""
    control(fs, drive, "sales/dev", "reset", ".\n")
    assert result(drive, "sales/dev", "reset") == head(backend, "dev") + "\n"
    assert drive.read("sales/dev/.lakefuse/status") == b""
    assert sorted(drive.listdir("sales/dev")) == ["a", "dev.txt", "top.csv"]
    assert drive.read("sales/dev/dev.txt") == b"from dev"
    assert invalidated


def test_reset_of_a_prefix_keeps_the_rest(fs, drive, backend, dev):
    for directory in ("tables", "tables/t1", "tables/t2"):
        drive.mkdir(f"sales/dev/{directory}")
    drive.write("sales/dev/tables/t1/part-0", b"0")
    drive.write("sales/dev/tables/t2/part-0", b"0")
    drive.write("sales/dev/notes.txt", b"n")
    control(fs, drive, "sales/dev", "reset", "tables/t1/\n")
    status = drive.read("sales/dev/.lakefuse/status").decode().splitlines()
    assert status == ["+ notes.txt", "+ tables/", "+ tables/t2/", "+ tables/t2/part-0"]
    assert drive.listdir("sales/dev/tables") == ["t2"]


@pytest.mark.parametrize("text", ["\n", "/tables\n", "a\nb\n"])
def test_bad_reset_lines_are_einval_and_drop_nothing(fs, drive, backend, dev, text):
    drive.write("sales/dev/kept.txt", b"k")
    assert control_errno(fs, drive, "sales/dev", "reset", text) == errno.EINVAL
    assert "+ kept.txt" in drive.read("sales/dev/.lakefuse/status").decode()


def test_reset_makes_handles_writing_under_it_estale_and_leaves_readers_be(fs, drive, backend, dev):
    drive.mkdir("sales/dev/out")
    parent = drive.ino("sales/dev/out")
    writer, _ = fs.create(parent, "part-0", 0o644, os.O_WRONLY | os.O_CREAT)
    fs.write(writer.fh, 0, b"half of a part")
    outside, _ = fs.create(drive.ino("sales/dev"), "outside.txt", 0o644, os.O_WRONLY | os.O_CREAT)
    fs.write(outside.fh, 0, b"kept")
    reader = fs.open(drive.ino("sales/dev/dev.txt"), os.O_RDONLY)

    control(fs, drive, "sales/dev", "reset", "out/\n")

    for call in (lambda: fs.write(writer.fh, 14, b" more"), lambda: fs.read(writer.fh, 0, 10),
                 lambda: fs.fsync(writer.fh), lambda: fs.flush(writer.fh)):
        with pytest.raises(OSError) as exc:
            call()
        assert exc.value.errno == errno.ESTALE
    fs.release(writer.fh)
    assert fs.read(reader.fh, 0, 100) == b"from dev"
    fs.flush(reader.fh)
    fs.release(reader.fh)
    fs.flush(outside.fh)
    fs.release(outside.fh)
    status = drive.read("sales/dev/.lakefuse/status").decode().splitlines()
    assert status == ["+ outside.txt"]  # the directory marker out/ was dropped too
    assert "out" not in drive.listdir("sales/dev")
    with pytest.raises(ERRORS):
        drive.ino("sales/dev/out/part-0")


def test_a_late_write_to_a_reset_file_is_never_staged(fs, drive, backend, dev):
    """The handle was looked up before the reset swapped its operations: its write lands in a
    detached file, which is never uploaded."""
    writer, _ = fs.create(drive.ino("sales/dev"), "late.txt", 0o644, os.O_WRONLY | os.O_CREAT)
    fs.write(writer.fh, 0, b"early")
    handle = fs.state.handles.get(writer.fh)
    files_ops = handle.ops
    control(fs, drive, "sales/dev", "reset", ".\n")
    files_ops.write(handle, 5, b" late")  # as if already on its way
    fs.release(writer.fh)
    assert drive.read("sales/dev/.lakefuse/status") == b""
