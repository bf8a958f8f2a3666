"""Issue 15, "Papercuts", through a real kernel mount and the real CLI: ``cache status`` after a
mount used its caches, the same committer through the CLI and through a mount, ``commit`` of a
path in a tag or commit directory (read-only, exit 10), mount point errors (one line, their own
exit code), the demo's hint at an older commit, and storage failures under a mount: logged at
WARNING with the operation and path, counted per operation, shown by ``lakefuse mounts``."""

from __future__ import annotations

import errno
import getpass
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from lakemount import LakeHome, is_mounted, mounted, require_fuse

SEED = b"id,v\n1,2\n"


def cli(monkeypatch, capsys, home: Path, *argv) -> tuple[int, str, str]:
    """``lakefuse ARGV`` in this process on ``home``: (exit code, stdout, stderr)."""
    from lakefuse.cli.main import main

    monkeypatch.setenv("LAKEFUSE_HOME", str(home))
    capsys.readouterr()
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh home: repository sales, main with data/a.csv committed, tag v1."""
    require_fuse()
    monkeypatch.delenv("LAKEFUSE_USER", raising=False)
    lake = LakeHome(tmp_path / "home")
    lake.env.pop("LAKEFUSE_USER", None)
    lake.create_repository("sales")
    lake.catalog.upload_bytes("sales", "main", "data/a.csv", SEED)
    lake.catalog.upload_bytes("sales", "main", "readme.md", b"# sales\n")
    lake.commit_id = lake.catalog.commit("sales", "main", "seed", "tests").id
    lake.catalog.create_tag("sales", "v1", "main")
    yield lake
    lake.close()


def _storage_file(home: LakeHome, content: bytes) -> Path:
    found = [p for p in (home.path / "storage").rglob("*") if p.is_file() and p.read_bytes() == content]
    assert len(found) == 1, found
    return found[0]


# --------------------------------------------------------------------------------------------
# 1. cache status once a mount used the caches


def test_cache_status_while_and_after_a_mount_used_the_caches(home, tmp_path, monkeypatch, capsys):
    with mounted(home, tmp_path / "mnt") as lake:
        assert (lake / f"sales/{home.commit_id}/data/a.csv").read_bytes() == SEED
        assert (lake / "sales/main/readme.md").read_bytes() == b"# sales\n"
        code, out, err = cli(monkeypatch, capsys, home.path, "cache", "status")
        assert code == 0, err
        assert "graveler" in out
    code, out, err = cli(monkeypatch, capsys, home.path, "cache", "status", "--json")
    assert code == 0, err
    caches = {c["directory"]: c for c in json.loads(out)["caches"]}
    assert caches["graveler"]["hits"] + caches["graveler"]["misses"] > 0
    assert caches["blocks"]["name"] == "blocks" and caches["blocks"]["max_bytes"] > 0  # persisted at unmount
    code, out, err = cli(monkeypatch, capsys, home.path, "cache", "status")
    assert code == 0 and "blocks" in out, err


# --------------------------------------------------------------------------------------------
# 3. one committer rule for the CLI and the mount


def _committers(home: LakeHome, lake, monkeypatch, capsys, name: str) -> tuple[str, str, str]:
    """Committers of a commit through the control file, through ``lakefuse commit MOUNT_PATH``
    and through ``lakefuse commit lakefs://``."""
    catalog = home.catalog
    catalog.create_branch("sales", name, "main")
    branch = lake / f"sales/{name}"
    (branch / "one.txt").write_text("1")
    (branch / ".lakefuse/commit").write_text("through the control file\n")
    by_control_file = catalog.get_commit("sales", (branch / ".lakefuse/commit").read_text().strip()).committer

    (branch / "two.txt").write_text("2")
    code, out, err = cli(monkeypatch, capsys, home.path, "commit", branch / "two.txt", "-m", "through a path")
    assert code == 0, err
    by_mount_path = catalog.get_commit("sales", out.split(": ")[-1].strip()).committer

    code, out, err = cli(monkeypatch, capsys, home.path, "commit", f"lakefs://sales/{name}", "-m", "by uri",
                         "--allow-empty", "--json")
    assert code == 0, err
    return by_control_file, by_mount_path, json.loads(out)["committer"]


@pytest.mark.parametrize("source", ["os", "env", "config"])
def test_cli_and_mount_commit_as_the_same_user(home, tmp_path, monkeypatch, capsys, source):
    expected = getpass.getuser()
    if source == "env":
        expected = "zoe from env"
        home.env["LAKEFUSE_USER"] = expected  # the mount's environment
        monkeypatch.setenv("LAKEFUSE_USER", expected)  # the CLI's
    elif source == "config":
        expected = "yan from config"
        (home.path / "config.yaml").write_text(f"user:\n  name: {expected}\n")
    with mounted(home, tmp_path / "mnt") as lake:
        assert _committers(home, lake, monkeypatch, capsys, f"c-{source}") == (expected, expected, expected)


# --------------------------------------------------------------------------------------------
# 4. commit of a path in a tag, commit or ref-expression directory


def test_commit_of_a_path_in_a_tag_or_commit_directory_is_read_only(home, tmp_path, monkeypatch, capsys):
    with mounted(home, tmp_path / "mnt") as lake:
        cases = [
            (lake / "sales/v1", "tag 'v1'"),
            (lake / "sales/v1/data", "tag 'v1'"),
            (lake / "sales/v1/data/a.csv", "tag 'v1'"),
            (lake / f"sales/{home.commit_id}/data", f"commit '{home.commit_id}'"),
            (lake / f"sales/{home.commit_id[:12]}", f"commit '{home.commit_id[:12]}'"),
            (lake / "sales/main~0/data", "ref expression 'main~0'"),
        ]
        for path, what in cases:
            code, out, err = cli(monkeypatch, capsys, home.path, "commit", path, "-m", "msg")
            assert (code, out) == (10, ""), (path, err)
            assert len(err.splitlines()) == 1 and what in err and "read-only" in err, err
        for path in (lake.mountpoint, lake / "sales"):  # not in any ref: as before
            code, _, err = cli(monkeypatch, capsys, home.path, "commit", path, "-m", "msg")
            assert code == 2 and "not inside a branch" in err, err

        # without the mount's status file: a sibling branch directory tells a ref directory
        from lakefuse.cli.mount_control import find_branch_dir
        from lakefuse.errors import InvalidArgument, ReadOnly

        with pytest.raises(ReadOnly, match="tag 'v1'"):
            find_branch_dir(str(lake / "sales/v1/data"), home=None)
        with pytest.raises(InvalidArgument):
            find_branch_dir(str(lake / "sales"), home=None)
        assert find_branch_dir(str(lake / "sales/main/data"), home=None) == str(lake / "sales/main")


def test_commit_in_a_mount_of_one_tag_is_read_only(home, tmp_path, monkeypatch, capsys):
    with mounted(home, tmp_path / "v1", uri="lakefs://sales/v1") as lake:
        assert sorted(os.listdir(lake.mountpoint)) == ["data", "readme.md"]
        code, _, err = cli(monkeypatch, capsys, home.path, "commit", lake / "data", "-m", "msg")
        assert code == 10 and "tag 'v1'" in err and len(err.splitlines()) == 1, err


# --------------------------------------------------------------------------------------------
# 5. mount point errors


def test_mount_point_errors_are_one_line_with_their_own_exit_codes(home, tmp_path, monkeypatch, capsys):
    file = tmp_path / "file"
    file.write_text("x")
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("x")
    with mounted(home, tmp_path / "mnt") as lake:
        cases = [
            (lake.mountpoint, 12, "already a mount point"),
            (tmp_path / "missing", 2, "does not exist"),
            (file, 2, "not a directory"),
            (full, 12, "not empty"),
        ]
        for target, exit_code, fragment in cases:
            code, out, err = cli(monkeypatch, capsys, home.path, "mount", target)
            assert (code, out) == (exit_code, ""), (target, err)
            assert err.startswith("lakefuse: error: ") and fragment in err and len(err.splitlines()) == 1, err
            assert "internal error" not in err
        assert is_mounted(str(lake.mountpoint)) and (lake / "sales/main/data/a.csv").read_bytes() == SEED
    assert (full / "keep.txt").read_text() == "x"


# --------------------------------------------------------------------------------------------
# 6. the demo's hint at an older commit lists files


def test_the_demo_hint_at_an_older_commit_lists_files(tmp_path, monkeypatch, capsys):
    require_fuse()
    demo_home = tmp_path / "demo-home"
    mountpoint = tmp_path / "mnt"
    try:
        code, out, err = cli(monkeypatch, capsys, demo_home, "demo", "--mountpoint", mountpoint)
        assert code == 0, err
        assert "Mounted every repository" in out, out
        lines = out.splitlines()
        hint = next(i for i, line in enumerate(lines) if "older commit" in line)
        command = lines[hint + 1].strip()
        assert re.fullmatch(r"ls \S+/demo/main~1/\S*", command), command
        listed = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert "2024-01.csv" in listed.stdout.split()
    finally:
        if is_mounted(str(mountpoint)):
            cli(monkeypatch, capsys, demo_home, "umount", mountpoint)
        if is_mounted(str(mountpoint)):
            subprocess.run(["fusermount3", "-uz", str(mountpoint)], capture_output=True)


# --------------------------------------------------------------------------------------------
# 7. storage failures under a mount: WARNING, counted, shown


def _wait_for(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def _warnings(log_text: str) -> list[str]:
    return [line for line in log_text.splitlines() if " WARNING " in line]


@pytest.mark.parametrize("damage, answer", [("loop", errno.EIO), ("remove", errno.ENOENT)])
def test_a_failed_storage_read_is_a_warning_and_counted(home, tmp_path, monkeypatch, capsys, damage, answer):
    stored = _storage_file(home, SEED)
    stored.unlink()
    if damage == "loop":  # opening it fails with ELOOP: a storage error (EIO)
        os.symlink(stored.name, stored)
    path = f"sales/{home.commit_id}/data/a.csv"
    with mounted(home, tmp_path / "mnt") as lake:
        with pytest.raises(OSError) as failed:
            (lake / path).read_bytes()
        assert failed.value.errno == answer
        # an ordinary ENOENT (a missing name in a branch is a negative entry, not an error)
        assert not (lake / "no-such-repository").exists()

        code, out, err = cli(monkeypatch, capsys, home.path, "mounts", lake.mountpoint, "--json")
        assert code == 0, err
        [status] = json.loads(out)
        assert status["state"] == "mounted" and status["pid"] == lake.proc.pid and status["layout"] == "all"

        def counted():
            code, out, _ = cli(monkeypatch, capsys, home.path, "mounts", "--json")
            errors = json.loads(out)[0]["errors"] if code == 0 else {}
            return errors if errors.get("read", {}).get(errno.errorcode[answer]) else None

        errors = _wait_for(counted)
        assert errors and errors["read"][errno.errorcode[answer]] >= 1, errors
        assert errors["lookup"]["ENOENT"] >= 1
        code, out, err = cli(monkeypatch, capsys, home.path, "mounts")
        assert code == 0 and f"read: {errno.errorcode[answer]}" in out and str(lake.mountpoint) in out, err

        warnings = _warnings(lake.log_path.read_text())
        assert any("read (handle " in w and f"lakefs://{path}" in w and errno.errorcode[answer] in w
                   for w in warnings), warnings
        assert not [w for w in warnings if "lookup" in w]  # ENOENT of a lookup stays at DEBUG
    log_text = lake.log_path.read_text()
    final = [w for w in _warnings(log_text) if "errors answered, per operation" in w]
    assert final and f"read: {errno.errorcode[answer]}" in final[0], log_text[-2000:]
    code, out, _ = cli(monkeypatch, capsys, home.path, "mounts", "--json")
    [status] = json.loads(out)
    assert status["state"] == "unmounted" and status["errors"]["read"][errno.errorcode[answer]] >= 1


def test_a_mount_without_errors_says_so_at_unmount_at_info(home, tmp_path):
    with mounted(home, tmp_path / "mnt", args=("--log-level", "INFO")) as lake:
        assert (lake / "sales/main/data/a.csv").read_bytes() == SEED
    log_text = lake.log_path.read_text()
    assert "INFO lakefuse.fuse.runner: errors answered, per operation: none" in log_text, log_text[-2000:]
    assert [w for w in _warnings(log_text) if "sd_notify" not in w] == []  # (the test's notify socket is gone)
