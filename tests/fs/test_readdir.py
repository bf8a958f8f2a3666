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


# ------------------------------------------------------------------ positions

def listing_from(fs, ino, offset=0) -> list[tuple[str, int]]:
    """(name, next offset) of each entry a new handle reports from ``offset`` on."""
    fh = fs.opendir(ino)
    out = []
    fs.readdir(fh, offset, lambda name, attrs, next_offset: out.append((name.decode(), next_offset)) or True)
    fs.releasedir(fh)
    return out


@pytest.mark.parametrize("ref", ["branch", "commit"])
def test_a_position_means_the_same_entry_on_a_handle_that_reported_nothing(backend, tmp_path, make_driver, ref):
    """The kernel reads a listing it keeps and, when a page of it goes missing half-way, asks
    a handle that reported nothing for the rest from where it stands: the rest must follow
    on, not start over (names read twice)."""
    for i in range(25):
        backend.put_object("sales", "main", f"big/f{i:02d}", b"x")
    backend.put_object("sales", "main", "big/sub/inner", b"x")
    backend.commit("sales", "main", "more")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), readdir_page=4)  # pages of 4 names
    ref_name = "main" if ref == "branch" else backend.branch_head("sales", "main")
    ino = make_driver(fs).ino(f"sales/{ref_name}/big")
    whole = listing_from(fs, ino)
    names = [name for name, _ in whole]
    assert names[:2] == [".", ".."] and sorted(names[2:]) == [f"f{i:02d}" for i in range(25)] + ["sub"]
    for k, (_, offset) in enumerate(whole):
        assert listing_from(fs, ino, offset) == whole[k + 1:], offset
    assert listing_from(fs, ino, whole[-1][1] + 5) == []  # past the end: nothing


def test_a_position_among_files_not_uploaded_yet_means_the_same_entry_too(fs, drive):
    """Files still being written are listed after the branch's entries, in the same order on
    every handle."""
    a = drive.ino("sales/main/a")
    opened = [fs.create(a, f"open-{i}.txt", 0o100644, os.O_WRONLY | os.O_CREAT)[0].fh for i in range(3)]
    whole = listing_from(fs, a)
    assert [name for name, _ in whole][-3:] == ["open-0.txt", "open-1.txt", "open-2.txt"]
    for k, (_, offset) in enumerate(whole):
        assert listing_from(fs, a, offset) == whole[k + 1:], offset
    for fh in opened:
        fs.release(fh)
