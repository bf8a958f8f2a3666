"""A watched filesystem (``change_feed=True``): branch metadata is kept long, and
``poll_changes`` forgets exactly what other writers changed and names the kernel entries to
invalidate.  ``MemoryBackend``'s test helpers (``put_object``, ``delete_object``) play the
other process; the filesystem's own writes go through the ``LakeBackend`` methods."""

from __future__ import annotations

import errno
import os

import pytest

from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.state import WATCHED_BRANCH_TTL

ERRORS = (OSError,)


@pytest.fixture
def watched(backend, tmp_path):
    return LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), change_feed=True)


@pytest.fixture
def d(watched, make_driver):
    return make_driver(watched)


def entry_names(stale) -> set[bytes]:
    return {name for _parent, name in stale.entries}


def test_branch_metadata_is_kept_long_when_watched(watched, d):
    assert d.stat("sales/main/top.csv").attr_timeout == watched.watched_branch_ttl == WATCHED_BRANCH_TTL == 3600.0
    assert d.stat("sales/main/a").entry_timeout == 3600.0
    assert d.stat("sales/v1/top.csv").attr_timeout >= 3600  # tags as before
    assert watched.watched


def test_unwatched_filesystems_keep_the_short_branch_timeout(fs, drive):
    assert not fs.watched
    assert drive.stat("sales/main/top.csv").attr_timeout == 1.0
    assert not fs.poll_changes()


def test_nothing_changed_nothing_to_invalidate(watched, d, backend):
    d.stat("sales/main/top.csv")
    assert not watched.poll_changes()
    calls = backend.calls["branch_changes"]
    assert not watched.poll_changes()
    assert backend.calls["branch_changes"] == calls + 1  # one question per branch and poll


def test_another_writers_overwrite_is_invalidated_and_then_seen(watched, d, backend):
    top = d.ino("sales/main/top.csv")
    assert d.read("sales/main/top.csv") == b"x,y\n1,2\n"
    backend.put_object("sales", "main", "top.csv", b"updated elsewhere")
    assert d.stat("sales/main/top.csv").size == 8  # still the kept metadata: the kernel would say the same
    stale = watched.poll_changes()
    assert stale.entries == [(d.ino("sales/main"), b"top.csv")]
    assert stale.inodes == [top]
    assert d.stat("sales/main/top.csv").size == len(b"updated elsewhere")
    assert d.read("sales/main/top.csv") == b"updated elsewhere"


def test_another_writers_new_file_and_directory_show_after_a_poll(watched, d, backend):
    assert d.listdir("sales/main") == ["a", "top.csv"]
    with pytest.raises(ERRORS):
        d.ino("sales/main/new/deep.txt")
    backend.put_object("sales", "main", "new/deep.txt", b"n")
    watched.poll_changes()
    assert d.listdir("sales/main") == ["a", "new", "top.csv"]
    assert d.read("sales/main/new/deep.txt") == b"n"


def test_another_writers_delete_is_invalidated(watched, d, backend):
    d.stat("sales/main/a/b.txt")
    backend.delete_object("sales", "main", "a/b.txt")
    stale = watched.poll_changes()
    # the file, and its directory: it was implied by that one key and is gone too
    assert entry_names(stale) == {b"b.txt", b"a"}
    for path in ("sales/main/a/b.txt", "sales/main/a"):
        with pytest.raises(ERRORS) as exc:
            d.ino(path)
        assert exc.value.errno == errno.ENOENT
    assert d.listdir("sales/main") == ["top.csv"]


def test_directories_above_a_change_stay_in_the_kernel_when_they_still_exist(watched, d, backend):
    d.stat("sales/main/a/b.txt")
    backend.put_object("sales", "main", "a/c.txt", b"c")
    stale = watched.poll_changes()
    assert stale.entries == []  # a/c.txt was unknown to the kernel, a/ still exists
    assert d.listdir("sales/main/a") == ["b.txt", "c.txt"]


def test_own_writes_invalidate_nothing(watched, d):
    d.stat("sales/main/top.csv")
    d.write("sales/main/mine.txt", b"mine")
    d.write("sales/main/top.csv", b"rewritten here")
    assert not watched.poll_changes()
    assert d.read("sales/main/top.csv") == b"rewritten here"


def test_a_moved_head_invalidates_every_name_of_the_branch(watched, d, backend):
    known = {d.ino("sales/main/top.csv"), d.ino("sales/main/a/b.txt")}
    assert not watched.poll_changes()
    backend.put_object("sales", "main", "x", b"x")
    backend.commit("sales", "main", "elsewhere")
    stale = watched.poll_changes()
    assert entry_names(stale) == {b"top.csv", b"a", b"b.txt"}
    assert set(stale.inodes) == known
    assert "x" in d.listdir("sales/main")


def test_each_change_is_reported_by_two_polls(watched, d, backend):
    """A request that read the old state just before the first poll may answer after it; the
    second poll invalidates what it left behind."""
    d.stat("sales/main/top.csv")
    backend.put_object("sales", "main", "top.csv", b"new")
    assert entry_names(watched.poll_changes()) == {b"top.csv"}
    d.stat("sales/main/top.csv")
    assert entry_names(watched.poll_changes()) == {b"top.csv"}
    d.stat("sales/main/top.csv")
    assert not watched.poll_changes()


def test_a_deleted_branch_is_forgotten_and_watching_resumes_when_it_is_back(watched, d, backend):
    d.stat("sales/main/top.csv")
    backend.create_branch("sales", "dev", "main")
    d.stat("sales/dev/top.csv")
    del backend._repos["sales"].branches["dev"]  # deleted by another process
    stale = watched.poll_changes()
    assert b"top.csv" in entry_names(stale)
    watched.poll_changes()
    backend.create_branch("sales", "dev", "main")
    backend.put_object("sales", "dev", "later.txt", b"l")
    assert d.read("sales/dev/later.txt") == b"l"


def test_a_failing_feed_is_retried_and_does_not_stop_other_branches(watched, d, backend, monkeypatch):
    from lakefuse.errors import StorageError

    d.stat("sales/main/top.csv")
    backend.put_object("sales", "main", "top.csv", b"new")
    real = backend.branch_changes
    monkeypatch.setattr(backend, "branch_changes", lambda *a: (_ for _ in ()).throw(StorageError("db down")))
    watched.state.change_feed = backend.branch_changes
    for tree in watched.state.refs.trees():
        if tree.change_feed is not None:
            tree.change_feed = backend.branch_changes
    assert not watched.poll_changes()  # logged, nothing lost: the cursor did not move
    for tree in watched.state.refs.trees():
        if tree.change_feed is not None:
            tree.change_feed = real
    assert entry_names(watched.poll_changes()) == {b"top.csv"}


def test_a_stat_that_overlaps_a_poll_is_answered_but_not_kept(backend, tmp_path, make_driver):
    """The old state read while the poll forgot the path must not be kept for the long branch
    timeout (the node's stat expires at once)."""

    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"), change_feed=True)
    d = make_driver(fs)
    d.stat("sales/main/a/b.txt")
    tree = fs.table.get(d.ino("sales/main/a/b.txt")).tree
    real_get = backend.get_entry

    def get_entry_then_change(repo, ref, key):
        entry = real_get(repo, ref, key)
        if key == "top.csv":  # the old state is read; another writer and a poll happen now
            backend.put_object("sales", "main", "top.csv", b"changed meanwhile")
            fs.poll_changes()
        return entry

    backend.get_entry = get_entry_then_change
    stat, expires = tree.stat("top.csv")
    assert stat.entry.size == 8  # the old answer, given once
    assert tree.cached("top.csv") is None  # but not kept
    backend.get_entry = real_get
    assert d.stat("sales/main/top.csv").size == len(b"changed meanwhile")


def test_a_moved_head_invalidates_the_files_a_listing_reported(watched, d, backend):
    fh = watched.opendir(d.ino("sales/main/a"))
    shown = {}
    watched.readdir(fh, 0, lambda name, attrs, offset: shown.__setitem__(name, attrs.ino) or True)
    watched.releasedir(fh)
    assert not watched.poll_changes()
    backend.put_object("sales", "main", "x", b"x")
    backend.commit("sales", "main", "elsewhere")
    stale = watched.poll_changes()
    assert b"b.txt" in entry_names(stale)
    assert shown[b"b.txt"] in stale.inodes


# ------------------------------------------------------------------ negative entries

def test_missing_names_are_negative_entries_until_another_writer_makes_them(watched, d, backend):
    main = d.ino("sales/main")
    missing = watched.lookup(main, "late.csv")
    assert missing.ino == 0 and missing.entry_timeout == WATCHED_BRANCH_TTL  # the kernel may keep it
    assert watched.lookup(main, "later").ino == 0
    assert watched.lookup(d.ino("sales/main/a"), "never").ino == 0
    backend.put_object("sales", "main", "late.csv", b"l")
    backend.put_object("sales", "main", "later/deep.txt", b"d")  # and the directory above it
    stale = watched.poll_changes()
    assert {(main, b"late.csv"), (main, b"later")} <= set(stale.entries)
    assert (d.ino("sales/main/a"), b"never") not in stale.entries  # unchanged: still missing
    assert d.read("sales/main/late.csv") == b"l" and d.read("sales/main/later/deep.txt") == b"d"


def test_a_merge_through_the_mount_takes_back_the_negative_entries_at_once(watched, d):
    invalidated = []
    watched.set_kernel_invalidator(invalidated.append)
    d.mkdir("sales/dev")
    d.write("sales/dev/dev.txt", b"from dev")
    d.commit("sales/dev", "add dev.txt")
    main = d.ino("sales/main")
    assert watched.lookup(main, "dev.txt").ino == 0
    merge = watched.open(d.ino("sales/main/.lakefuse/merge"), os.O_WRONLY | os.O_TRUNC)
    watched.write(merge.fh, 0, b"dev\n")
    watched.release(merge.fh)
    assert any((main, b"dev.txt") in stale.entries for stale in invalidated)
    assert d.read("sales/main/dev.txt") == b"from dev"


def test_own_writes_take_back_their_names_without_the_poll(watched, d):
    """A name made through the mount: the kernel turns its negative entry into the new one
    itself; the poll has nothing to invalidate."""
    assert watched.lookup(d.ino("sales/main"), "mine.txt").ino == 0
    d.write("sales/main/mine.txt", b"mine")
    assert not watched.poll_changes()
