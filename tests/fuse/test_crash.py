"""Crashes: ``kill -9`` of the mount daemon and of a committing process lose nothing promised.

- What fsync(2) returned for (a file, or a directory after files in it were closed) is there
  after the daemon is killed and the repository mounted again, byte for byte; so is a file
  that was closed (its entry is staged at close).
- A commit killed at any point leaves the branch either committed (everything in the commit,
  nothing left staged) or not (everything still staged, and the next commit takes it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from lakemount import LakeHome, MountedLake, is_mounted, mounted, require_fuse


@pytest.fixture
def home(tmp_path):
    require_fuse()
    lake_home = LakeHome(tmp_path / "home")
    lake_home.create_repository("crash")
    yield lake_home
    lake_home.close()


def _kill_mount(mount: MountedLake) -> None:
    mount.proc.send_signal(signal.SIGKILL)
    mount.proc.wait(10)
    if is_mounted(str(mount.mountpoint)):
        subprocess.run(["fusermount3", "-uz", str(mount.mountpoint)], capture_output=True, timeout=30)
    mount.stop()


def test_what_fsync_and_close_returned_for_survives_kill_9_of_the_daemon(home, tmp_path):
    payload = os.urandom(300_000)
    mount = MountedLake(home, tmp_path / "mnt").start()
    try:
        main = mount / "crash/main"
        # fsynced, and still open when the daemon dies: no close ever reaches it
        synced = os.open(main / "synced.bin", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(synced, payload)
        os.fsync(synced)
        # closed, never fsynced: staged at close
        (main / "closed.txt").write_bytes(b"closed before the crash\n")
        # many small files in a new directory, then fsync of the directory
        (main / "tree").mkdir()
        for i in range(50):
            (main / f"tree/f{i:02d}").write_bytes(f"file {i}\n".encode())
        directory = os.open(main / "tree", os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(directory)
        os.close(directory)
        _kill_mount(mount)
        # the kernel writes this file itself and sends no FLUSH at close(2) (noflush), so close
        # asks nothing of the daemon that is gone, and its RELEASE finds nobody to store it
        with contextlib.suppress(OSError):
            os.close(synced)
    finally:
        mount.stop()

    with mounted(home, tmp_path / "mnt2") as again:
        main = again / "crash/main"
        assert (main / "synced.bin").read_bytes() == payload
        assert (main / "closed.txt").read_bytes() == b"closed before the crash\n"
        assert sorted(os.listdir(main / "tree")) == [f"f{i:02d}" for i in range(50)]
        assert all((main / f"tree/f{i:02d}").read_bytes() == f"file {i}\n".encode() for i in range(50))
    commit = home.catalog.commit("crash", "main", "after the crash", "tests")
    assert commit.id
    assert home.catalog.read_object("crash", commit.id, "synced.bin") == payload


def test_appends_in_place_survive_kill_9_as_fsynced_or_as_staged_before(home, tmp_path):
    """A big file the mount wrote is appended to in its object's own file (lakefuse.fs.owned):
    an fsynced append survives the daemon's kill; one not fsynced may be lost, but the file
    then reads as staged before, never with stray bytes."""
    body = os.urandom(2 * 1024 * 1024)
    mount = MountedLake(home, tmp_path / "mnt").start()
    try:
        log = mount / "crash/main/app.log"
        log.write_bytes(body)
        with open(log, "ab") as f:
            f.write(b"fsynced line\n")
            f.flush()
            os.fsync(f.fileno())
        unsynced = os.open(log, os.O_WRONLY | os.O_APPEND)
        os.write(unsynced, b"a line never fsynced or closed\n")
        _kill_mount(mount)
        with pytest.raises(OSError):
            os.close(unsynced)
    finally:
        mount.stop()

    expected = body + b"fsynced line\n"
    assert home.catalog.read_object("crash", "main", "app.log") == expected  # bytes past the entry ignored
    commit = home.catalog.commit("crash", "main", "after the crash", "tests")
    assert home.catalog.read_object("crash", commit.id, "app.log") == expected
    with mounted(home, tmp_path / "mnt2") as again:  # the commit's file is read by the kernel where it can
        for ref in ("main", commit.id):
            assert (again / "crash" / ref / "app.log").read_bytes() == expected


STAGED = 3000
#: when the committing process is killed (s after it starts): before, during and after its work
KILL_AFTER = (0.3, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0, 3.0)


def test_a_commit_killed_at_any_point_leaves_the_branch_committed_or_fully_staged(home):
    catalog = home.catalog
    entry = catalog.upload_bytes("crash", "main", "seed.txt", b"seed")
    catalog.commit("crash", "main", "seed", "tests")
    cli = os.path.join(os.path.dirname(sys.executable), "lakefuse")
    outcomes = []
    for round_number, delay in enumerate(KILL_AFTER):
        branch = f"kill{round_number}"
        catalog.create_branch("crash", branch, "main")
        paths = [f"round{round_number}/f{i:05d}" for i in range(STAGED)]
        catalog.stage_entries("crash", branch, [(path, entry) for path in paths])
        head_before = catalog.get_branch("crash", branch).commit_id
        proc = subprocess.Popen([cli, "commit", f"lakefs://crash/{branch}", "-m", "killed?"], env=home.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        head = catalog.get_branch("crash", branch).commit_id
        uncommitted = sorted(d.path for d in catalog.diff_uncommitted("crash", branch))
        committed = sorted(o.path for o in catalog.iter_objects("crash", head, "round"))
        if head == head_before:
            outcomes.append("staged")
            assert uncommitted == paths and committed == []
            catalog.commit("crash", branch, "after the kill", "tests")  # the next commit takes it all
            head = catalog.get_branch("crash", branch).commit_id
            committed = sorted(o.path for o in catalog.iter_objects("crash", head, "round"))
            assert committed == paths
        else:
            outcomes.append("committed")
            assert committed == paths and uncommitted == []
        assert list(catalog.diff_uncommitted("crash", branch)) == []
    print("kill -9 of a commit after", KILL_AFTER, "s:", outcomes)
