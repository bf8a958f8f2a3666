"""Branch directories without a kernel (lakefuse.fs.refdirs): mkdir in a repository directory
creates a branch from the default branch by the CLI's name rules, rmdir deletes one only when
that loses no work (never the default branch, never uncommitted changes or files being written,
never commits no other ref holds), and the mount forgets what it knew of a deleted branch."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from lakefuse.errors import LakefuseError
from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.memory import MemoryBackend

ERRORS = (OSError, LakefuseError)


def mkdir_errno(fs, drive, repo: str, name: str) -> int:
    with pytest.raises(ERRORS) as exc:
        fs.mkdir(drive.ino(repo), name, 0o755)
    return exc.value.errno


def rmdir_errno(drive, path: str) -> int:
    with pytest.raises(ERRORS) as exc:
        drive.rmdir(path)
    return exc.value.errno


def test_mkdir_in_a_repository_creates_a_writable_branch_from_the_default_branch(fs, drive, backend):
    backend.put_object("sales", "main", "staged.txt", b"not committed")  # not carried over
    attrs = fs.mkdir(drive.ino("sales"), "etl", 0o700)
    assert stat.S_ISDIR(attrs.mode) and attrs.ino == drive.ino("sales/etl")
    assert backend.resolve_ref("sales", "etl").commit_id == backend.branch_head("sales", "main")
    assert "etl" in drive.listdir("sales")
    assert drive.listdir("sales/etl") == ["a", "top.csv"]
    drive.write("sales/etl/new.txt", b"n")
    drive.commit("sales/etl", "add new.txt")
    assert backend.get_entry("sales", backend.resolve_ref("sales", "etl"), "new.txt") is not None
    assert backend.get_entry("sales", backend.resolve_ref("sales", "main"), "new.txt") is None


def test_mkdir_takes_the_repositorys_own_default_branch(tmp_path, make_driver):
    backend = MemoryBackend()
    backend.create_repository("logs", default_branch="trunk")
    backend.put_object("logs", "trunk", "x.log", b"x")
    backend.commit("logs", "trunk", "x")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.mkdir("logs/fix")
    assert d.read("logs/fix/x.log") == b"x"


@pytest.mark.parametrize("name", ["bad name", "-dash", "x.lock", "a..b", "ends.", "abcdef12", "tilde~1x"])
def test_mkdir_of_an_invalid_name_is_einval_and_creates_nothing(fs, drive, backend, name):
    assert mkdir_errno(fs, drive, "sales", name) == errno.EINVAL
    assert [ref.name for ref in backend.list_refs("sales")] == ["main", "v1"]


@pytest.mark.parametrize("name", ["main", "v1"])
def test_mkdir_of_an_existing_branch_or_tag_is_eexist(fs, drive, name):
    assert mkdir_errno(fs, drive, "sales", name) == errno.EEXIST


def test_mkdir_outside_a_repository_and_on_a_read_only_mount_is_refused(backend, tmp_path, make_driver):
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"), read_only=True)
    d = make_driver(fs)
    assert mkdir_errno(fs, d, "sales", "etl") == errno.EROFS
    with pytest.raises(ERRORS) as exc:
        d.rmdir("sales/main")
    assert exc.value.errno == errno.EROFS
    with pytest.raises(ERRORS) as exc:
        fs.mkdir(1, "newrepo", 0o755)
    assert exc.value.errno in (errno.EPERM, errno.EROFS)


def test_rmdir_deletes_a_branch_whose_commits_another_ref_holds(fs, drive, backend):
    drive.mkdir("sales/etl")
    drive.rmdir("sales/etl")  # nothing of its own: its head is main's
    assert "etl" not in drive.listdir("sales")
    with pytest.raises(ERRORS) as exc:
        drive.ino("sales/etl")
    assert exc.value.errno == errno.ENOENT
    assert "etl" not in [ref.name for ref in backend.list_refs("sales")]


def test_rmdir_never_deletes_the_default_branch_or_a_tag(drive, backend):
    assert rmdir_errno(drive, "sales/main") == errno.EPERM
    assert rmdir_errno(drive, "sales/v1") == errno.EROFS
    assert {ref.name for ref in backend.list_refs("sales")} == {"main", "v1"}


def test_rmdir_refuses_uncommitted_changes_and_files_being_written(fs, drive, backend):
    drive.mkdir("sales/etl")
    drive.write("sales/etl/closed.txt", b"c")  # closed: waits for the stager, then staged
    assert rmdir_errno(drive, "sales/etl") == errno.ENOTEMPTY
    backend.reset("sales", "etl", None)
    parent, _ = drive.parent("sales/etl/open.txt")
    result, _ = fs.create(parent, "open.txt", 0o644, os.O_WRONLY | os.O_CREAT)
    fs.write(result.fh, 0, b"in progress")
    assert rmdir_errno(drive, "sales/etl") == errno.ENOTEMPTY
    fs.flush(result.fh)
    fs.release(result.fh)
    assert rmdir_errno(drive, "sales/etl") == errno.ENOTEMPTY  # now a staged change
    assert "etl" in [ref.name for ref in backend.list_refs("sales")]


def test_rmdir_refuses_commits_no_other_ref_holds_until_they_are_merged(fs, drive, backend):
    drive.mkdir("sales/etl")
    drive.write("sales/etl/new.txt", b"n")
    drive.commit("sales/etl", "add new.txt")
    assert rmdir_errno(drive, "sales/etl") == errno.ENOTEMPTY
    backend.merge("sales", "main", "etl")
    drive.rmdir("sales/etl")
    assert "etl" not in [ref.name for ref in backend.list_refs("sales")]


def test_a_tag_holding_the_commits_is_enough(fs, drive, backend):
    drive.mkdir("sales/etl")
    drive.write("sales/etl/new.txt", b"n")
    drive.commit("sales/etl", "add new.txt")
    backend.create_tag("sales", "kept", "etl")
    drive.rmdir("sales/etl")


def test_a_branch_made_again_after_rmdir_shows_nothing_of_the_old_one(fs, drive, backend):
    drive.mkdir("sales/etl")
    drive.write("sales/etl/old.txt", b"old")
    drive.commit("sales/etl", "old")
    backend.merge("sales", "main", "etl")
    assert drive.read("sales/etl/.lakefuse/commit").decode().strip() == backend.resolve_ref("sales", "etl").commit_id
    drive.rmdir("sales/etl")
    backend.put_object("sales", "main", "old.txt", b"deleted on main", mtime=1)
    backend.delete_object("sales", "main", "old.txt")
    backend.commit("sales", "main", "drop old.txt")
    drive.mkdir("sales/etl")
    assert "old.txt" not in drive.listdir("sales/etl")
    assert drive.read("sales/etl/.lakefuse/commit") == b""  # the old branch's last result is gone


def test_a_mount_of_one_repository_makes_branches_at_its_root(backend, tmp_path, make_driver):
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"), repo="sales")
    d = make_driver(fs)
    d.mkdir("etl")
    assert "etl" in d.listdir("")
    assert d.read("etl/top.csv") == b"x,y\n1,2\n"
    d.rmdir("etl")
    assert "etl" not in d.listdir("")
