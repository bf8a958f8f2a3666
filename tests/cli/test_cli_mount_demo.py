"""``lakefuse demo`` and ``lakefuse commit MOUNT_PATH``: the control-file protocol on fakes, and
once for real on a FUSE mount (skipped, saying why, where FUSE cannot mount)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess

import pytest

from lakefuse.cli import delegated as cli_delegated
from lakefuse.cli.mount_control import commit_in_mount, error_for, find_branch_dir
from lakefuse.errors import (
    Conflict,
    HookFailed,
    InvalidArgument,
    NoChanges,
    ReadOnly,
    StorageError,
)


def test_demo_without_mount_creates_the_repository_once(cli, tmp_path):
    result = cli("demo", "--no-mount", "--mountpoint", tmp_path / "mnt")
    assert result.code == 0, result.err
    assert "created repository lakefs://demo" in result.out
    assert "tables/sales/2024-01.csv" in result.out and "Add sample data" in result.out
    assert not (tmp_path / "mnt").exists()
    tags = json.loads(cli("tag", "list", "lakefs://demo", "--json").out)
    assert [t["id"] for t in tags] == ["v1"]
    branches = [b["id"] for b in json.loads(cli("branch", "list", "lakefs://demo", "--json").out)]
    assert branches == ["dev", "main"]
    head = json.loads(cli("show", "lakefs://demo/main", "--json").out)["id"]

    again = cli("demo", "--no-mount")
    assert again.code == 0, again.err
    assert "nothing to create" in again.out
    assert json.loads(cli("show", "lakefs://demo/main", "--json").out)["id"] == head


def test_demo_without_a_mount_command_shows_the_repository_and_how_to_mount(cli, tmp_path, monkeypatch):
    missing = cli_delegated.Delegated(("mount", "umount"), ("m", "u"), ("lakefuse.no_such_module",),
                                     "add_mount_arguments", cli_delegated._register_mount)
    monkeypatch.setattr(cli_delegated, "DELEGATED", (missing,) + cli_delegated.DELEGATED[1:])
    result = cli("demo", "--mountpoint", tmp_path / "mnt")
    assert result.code == 0, result.err
    assert "not mounted: the mount command is not available" in result.out
    assert "README.md" in result.out and "lakefuse mount" in result.out


def test_demo_rejects_a_file_as_mountpoint_before_doing_anything(cli, tmp_path):
    file = tmp_path / "file"
    file.write_text("")
    result = cli("demo", "--mountpoint", file)
    assert result.code == 2 and len(result.err_lines) == 1
    assert cli("repo", "list", "--json").out.strip() == "[]"


# --------------------------------------------------------------------------------------------
# the control-file protocol, without FUSE


def _fake_branch(root):
    branch = root / "repo" / "dev"
    (branch / ".lakefuse").mkdir(parents=True)
    (branch / ".lakefuse" / "commit").write_text("")
    (branch / ".lakefuse" / "head").write_text("0" * 64 + "\n")
    (branch / "tables" / "t").mkdir(parents=True)
    (branch / "tables" / "t" / "x.csv").write_text("x")
    return branch


def test_find_branch_dir_walks_up_to_the_control_directory(tmp_path):
    branch = _fake_branch(tmp_path)
    assert find_branch_dir(str(branch)) == str(branch)
    assert find_branch_dir(str(branch / "tables" / "t")) == str(branch)
    assert find_branch_dir(str(branch / "tables" / "t" / "x.csv")) == str(branch)
    with pytest.raises(InvalidArgument, match="not inside a branch"):
        find_branch_dir(str(tmp_path / "repo"))
    with pytest.raises(InvalidArgument, match="no such file"):
        find_branch_dir(str(tmp_path / "missing"))


def test_an_answer_that_is_not_a_commit_id_is_a_storage_error(tmp_path):
    branch = _fake_branch(tmp_path)
    with pytest.raises(StorageError, match="lakefuse mount"):  # a plain file echoes the message back
        commit_in_mount(str(branch), "msg")


def test_errno_of_a_failed_close_maps_to_the_error_kind():
    assert isinstance(error_for(errno.ENODATA, "x"), NoChanges)
    assert isinstance(error_for(errno.EPERM, "x"), HookFailed)
    assert isinstance(error_for(errno.EBUSY, "x"), Conflict)
    assert isinstance(error_for(errno.EROFS, "x"), ReadOnly)
    assert isinstance(error_for(errno.EINVAL, "x"), InvalidArgument)
    assert isinstance(error_for(errno.EIO, "x"), StorageError)
    assert isinstance(error_for(12345, "x"), StorageError)


def test_mount_path_commit_rejects_options_the_control_file_cannot_carry(cli, tmp_path):
    branch = _fake_branch(tmp_path)
    result = cli("commit", branch, "-m", "x", "--meta", "k=v")
    assert result.code == 2 and "--meta" in result.err and len(result.err_lines) == 1


# --------------------------------------------------------------------------------------------
# a real mount


def _fuse_unavailable() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if not (shutil.which("fusermount3") or (os.geteuid() == 0 and shutil.which("umount"))):
        return "neither fusermount3 nor root umount"
    try:
        import pyfuse3  # noqa: F401
        import trio  # noqa: F401
    except ImportError as exc:
        return f"FUSE libraries missing: {exc}"
    return None


def _force_unmount(mountpoint) -> None:
    if os.path.ismount(mountpoint):
        for command in (["fusermount3", "-u", "-z", str(mountpoint)], ["umount", "-l", str(mountpoint)]):
            if shutil.which(command[0]):
                subprocess.run(command, capture_output=True, timeout=30)
                if not os.path.ismount(mountpoint):
                    return


def test_demo_mounts_and_commit_through_the_mount_path(cli, tmp_path):
    reason = _fuse_unavailable()
    if reason:
        pytest.skip(f"FUSE cannot mount here: {reason}")
    mountpoint = tmp_path / "mnt"
    try:
        result = cli("demo", "--mountpoint", mountpoint)
        assert result.code == 0, result.err
        if "not mounted" in result.out:
            pytest.skip(f"FUSE mount failed here: {result.out.splitlines()[5:6]}")
        assert "Mounted every repository" in result.out and ".lakefuse/commit" in result.out
        dev = mountpoint / "demo" / "dev"
        assert sorted(os.listdir(mountpoint / "demo")) == ["dev", "main", "v1"]

        (dev / "tables" / "sales" / "2024-03.csv").write_text("date,store\n2024-03-01,paris\n")
        result = cli("commit", dev / "tables", "-m", "Add March")
        assert result.code == 0, result.err
        commit_id = result.out.split(": ")[-1].strip()
        assert json.loads(cli("show", "lakefs://demo/dev", "--json").out)["id"] == commit_id
        assert cli("diff", "lakefs://demo/main", "lakefs://demo/dev").out == "+ tables/sales/2024-03.csv\n"

        nothing = cli("commit", dev, "-m", "again")
        assert nothing.code == 6, nothing.err
        assert len(nothing.err_lines) == 1 and "nothing to commit" in nothing.err

        again = cli("demo", "--mountpoint", mountpoint)
        assert again.code == 0 and "already mounted" in again.out

        unmounted = cli("umount", mountpoint)
        assert unmounted.code == 0, unmounted.err
        assert not os.path.ismount(mountpoint)
    finally:
        _force_unmount(mountpoint)
