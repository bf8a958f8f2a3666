"""Which listings the kernel may keep (``LakeFilesystem.open_dir``: FUSE's readdir cache): a
tag's or commit's always; a branch directory's once it was listed whole with nothing changed
in it since, until this mount changes it, another writer's change is polled, or the branch's
timeout passes; repositories, refs and the control directory never."""

from __future__ import annotations

import os
import time

import pytest

from lakefuse.fs.filesystem import LakeFilesystem


def opened(fs, ino):
    result = fs.open_dir(ino)
    fs.releasedir(result.fh)
    return result.cache_readdir, result.keep_cache


def list_whole(fs, ino) -> list[str]:
    fh = fs.opendir(ino)
    names = []
    fs.readdir(fh, 0, lambda name, attrs, offset: names.append(name.decode()) or True)
    fs.releasedir(fh)
    return names


def test_tag_and_commit_listings_are_kept_from_the_first_opendir(fs, drive, backend):
    assert opened(fs, drive.ino("sales/v1")) == (True, True)
    assert opened(fs, drive.ino("sales/v1/a")) == (True, True)
    commit = backend.branch_head("sales", "main")
    assert opened(fs, drive.ino(f"sales/{commit}/a")) == (True, True)


def test_repositories_refs_and_the_control_directory_are_listed_anew(fs, drive):
    for path in ("", "sales", "sales/main/.lakefuse"):
        assert opened(fs, drive.ino(path)) == (False, False)


def test_a_branch_listing_is_kept_once_listed_whole(fs, drive):
    a = drive.ino("sales/main/a")
    assert opened(fs, a) == (True, False)  # nothing listed yet: the kernel drops what it has
    assert "b.txt" in list_whole(fs, a)
    assert opened(fs, a) == (True, True)
    assert opened(fs, a) == (True, True)  # an opendir without a listing changes nothing


def test_a_listing_left_unfinished_is_not_kept(fs, drive):
    for name in ("x1", "x2", "x3"):
        drive.write(f"sales/main/a/{name}", b"x")
    a = drive.ino("sales/main/a")
    fh = fs.opendir(a)
    seen = []
    fs.readdir(fh, 0, lambda name, attrs, offset: len(seen) < 3 and (seen.append(name) or True))
    fs.releasedir(fh)
    assert opened(fs, a) == (True, False)


def test_a_change_through_the_mount_drops_the_kept_listing(fs, drive):
    a = drive.ino("sales/main/a")
    list_whole(fs, a)
    drive.write("sales/main/a/new.txt", b"new")
    assert opened(fs, a) == (True, False)
    assert "new.txt" in list_whole(fs, a)
    assert opened(fs, a) == (True, False)  # listed before its entry was staged
    fh = fs.opendir(a)
    fs.fsyncdir(fh)  # staged now
    fs.releasedir(fh)
    assert "new.txt" in list_whole(fs, a)
    assert opened(fs, a) == (True, True)
    drive.unlink("sales/main/a/new.txt")
    assert opened(fs, a) == (True, False)


def test_a_change_during_the_listing_keeps_it_from_the_kernel(fs, drive):
    a = drive.ino("sales/main/a")
    fh = fs.opendir(a)
    names = []

    def add(name, attrs, offset):
        if name == b"b.txt":
            drive.write("sales/main/a/during.txt", b"d")
        names.append(name)
        return True

    fs.readdir(fh, 0, add)
    fs.releasedir(fh)
    assert opened(fs, a) == (True, False)


@pytest.fixture
def watched(backend, tmp_path):
    return LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), change_feed=True)


def test_another_writers_change_drops_the_kept_listing_at_the_next_poll(watched, make_driver, backend):
    d = make_driver(watched)
    a, root = d.ino("sales/main/a"), d.ino("sales/main")
    list_whole(watched, a)
    list_whole(watched, root)
    assert opened(watched, a) == (True, True)
    backend.put_object("sales", "main", "a/elsewhere.txt", b"e")
    watched.poll_changes()
    assert opened(watched, a) == (True, False)
    assert "elsewhere.txt" in list_whole(watched, a)
    assert opened(watched, a) == (True, True)
    list_whole(watched, root)
    backend.put_object("sales", "main", "other/x.txt", b"o")  # a new name in the root
    watched.poll_changes()
    assert opened(watched, root) == (True, False)
    assert "other" in list_whole(watched, root)


def test_a_moved_head_drops_every_kept_listing(watched, make_driver, backend):
    d = make_driver(watched)
    a = d.ino("sales/main/a")
    list_whole(watched, a)
    backend.put_object("sales", "main", "a/c.txt", b"c")
    backend.commit("sales", "main", "elsewhere")
    watched.poll_changes()
    assert opened(watched, a) == (True, False)


def test_a_kept_branch_listing_expires_with_the_branch_timeout(fs, drive, monkeypatch):
    a = drive.ino("sales/main/a")
    list_whole(fs, a)
    assert opened(fs, a) == (True, True)
    later = time.monotonic() + fs.state.branch_ttl + 1
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert opened(fs, a) == (True, False)


def test_a_watched_branch_keeps_a_listing_in_use_beyond_the_timeout(watched, make_driver, monkeypatch, backend):
    d = make_driver(watched)
    a = d.ino("sales/main/a")
    list_whole(watched, a)
    now = time.monotonic()
    for step in range(1, 4):  # each opendir within the timeout of the last one keeps it
        monkeypatch.setattr(time, "monotonic", lambda: now + step * 0.8 * watched.watched_branch_ttl)
        assert opened(watched, a) == (True, True)
    monkeypatch.setattr(time, "monotonic", lambda: now + 5 * watched.watched_branch_ttl)
    assert opened(watched, a) == (True, False)  # unused for longer than the timeout


def test_a_listing_with_files_not_uploaded_yet_is_not_kept(fs, drive):
    a = drive.ino("sales/main/a")
    list_whole(fs, a)
    assert opened(fs, a) == (True, True)
    parent, name = drive.parent("sales/main/a/open.txt")
    created, _attrs = fs.create(parent, name, 0o100644, os.O_WRONLY | os.O_CREAT)
    fs.write(created.fh, 0, b"not uploaded")
    assert "open.txt" in list_whole(fs, a)
    assert opened(fs, a) == (True, False)  # the file may still go (a failed write)
    fs.release(created.fh)
