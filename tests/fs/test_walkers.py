"""Listings by name alone (``lakefuse.fs.walkers``): which processes get regular files without
attributes, the inode numbers those entries report, and the kernel's kept listings a process
that stats is not served from."""

from __future__ import annotations

import pytest

from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.walkers import Walkers

FIND, DU = 101, 202  # thread IDs of a find and of a du
PROGRAMS = {FIND: "find", DU: "du"}


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def walkers(clock=None) -> Walkers:
    return Walkers(clock=clock or Clock(), programs=frozenset({"find"}), program_of=PROGRAMS.get)


def test_only_the_named_programs_get_names_alone():
    w = walkers()
    assert w.names_only(FIND)
    assert not w.names_only(DU)
    assert not w.names_only(0)  # a request from outside the mount's PID namespace
    assert not Walkers(program_of=PROGRAMS.get).names_only(FIND)  # none named: nobody


def test_a_named_program_that_looks_up_files_gets_attributes_while_it_keeps_listing():
    clock = Clock()
    w = walkers(clock)
    w.looked_up_file(FIND)  # find -size, find -ls: it stats what it lists
    assert not w.names_only(FIND)
    clock.now += w.ttl - 1
    assert not w.names_only(FIND)  # and each listing that asks keeps it so
    clock.now += w.ttl - 1
    assert not w.names_only(FIND)
    clock.now += w.ttl + 1  # nothing for longer than the timeout
    assert w.names_only(FIND)


def test_a_kept_listing_with_names_alone_is_dropped_for_a_process_that_stats():
    w = walkers()
    assert not w.drop_kept_names("tree", "dir", DU)  # nothing served by name alone
    w.served_names("tree", "dir")
    assert not w.drop_kept_names("tree", "dir", FIND)  # find reads names again: keep it
    assert w.drop_kept_names("tree", "dir", DU)
    assert not w.drop_kept_names("tree", "dir", DU)  # dropped once: what follows has attributes


# ---------------------------------------------------------------------------- through LakeFilesystem


@pytest.fixture
def big(backend):
    backend.put_objects = None
    for i in range(50):
        backend.put_object("sales", "main", f"big/f{i:03d}.txt", b"x" * i)
    backend.put_object("sales", "main", "big/sub/inner.txt", b"y")
    backend.commit("sales", "main", "many")
    return backend


@pytest.fixture
def names_fs(big, tmp_path, monkeypatch):
    fs = LakeFilesystem(big, spool_dir=str(tmp_path / "spool"), names_only_programs=frozenset({"find"}))
    monkeypatch.setattr(fs.walkers, "_program_of", PROGRAMS.get)
    return fs


def listing(fs, ino, caller):
    """(name, 'attrs' or 'name', inode number, mode) of each entry a whole listing reports."""
    fh = fs.open_dir(ino, caller).fh
    out = []

    def add(name, attrs, offset):
        out.append((name.decode(), "attrs", attrs.ino, attrs.mode))
        return True

    def add_name(name, ino, mode, offset):
        out.append((name.decode(), "name", ino, mode))
        return True

    fs.readdir(fh, 0, add, add_name=add_name, caller=caller)
    fs.releasedir(fh)
    return out


def test_find_gets_files_by_name_and_directories_with_attributes(names_fs):
    big = names_fs.lookup(names_fs.lookup(names_fs.lookup(1, "sales").ino, "main").ino, "big").ino
    entries = {name: (kind, ino, mode) for name, kind, ino, mode in listing(names_fs, big, FIND)}
    assert entries["f007.txt"][0] == "name" and entries["f007.txt"][2] == 0o100000
    assert entries["sub"][0] == "attrs"
    assert entries["."][0] == entries[".."][0] == "attrs"
    # the number a listing by name reported is the file's inode number once looked up
    assert names_fs.lookup(big, "f007.txt", caller=FIND).ino == entries["f007.txt"][1]
    assert names_fs.getattr(entries["f007.txt"][1]).size == 7
    # ... and listed again, by name or with attributes, it is still that number
    again = {name: ino for name, _kind, ino, _mode in listing(names_fs, big, DU)}
    assert again["f007.txt"] == entries["f007.txt"][1]
    assert len({ino for _kind, ino, _mode in entries.values()}) == len(entries) - 1  # '.' and '..' aside


def test_a_file_listed_by_name_takes_no_lookup_count(names_fs):
    big = names_fs.lookup(names_fs.lookup(names_fs.lookup(1, "sales").ino, "main").ino, "big").ino
    entries = {name: ino for name, kind, ino, _mode in listing(names_fs, big, FIND) if kind == "name"}
    ino = names_fs.lookup(big, "f003.txt").ino
    assert ino == entries["f003.txt"]
    names_fs.forget([(ino, 1)])  # the one lookup: the kernel forgets the inode
    with pytest.raises(OSError):
        names_fs.getattr(ino)


def test_du_after_find_is_served_attributes(names_fs):
    big = names_fs.lookup(names_fs.lookup(names_fs.lookup(1, "sales").ino, "main").ino, "big").ino
    listing(names_fs, big, FIND)
    assert names_fs.open_dir(big, FIND).keep_cache  # the kernel's listing serves find again
    assert not names_fs.open_dir(big, DU).keep_cache  # du would read names alone: dropped
    assert all(kind == "attrs" for _name, kind, _ino, _mode in listing(names_fs, big, DU))


def test_a_find_that_stats_gets_attributes_after_its_first_lookup(names_fs):
    big = names_fs.lookup(names_fs.lookup(names_fs.lookup(1, "sales").ino, "main").ino, "big").ino
    names_fs.lookup(big, "f001.txt", caller=FIND)  # find -size: a lookup of a file
    assert all(kind == "attrs" for _name, kind, _ino, _mode in listing(names_fs, big, FIND))


def test_files_listed_by_name_are_not_the_kernels_to_invalidate(names_fs):
    big = names_fs.lookup(names_fs.lookup(names_fs.lookup(1, "sales").ino, "main").ino, "big").ino
    listing(names_fs, big, FIND)
    key = names_fs.table.get(big).tree.key
    assert "big/f007.txt" in {path for _ino, path in names_fs.table.listed_files(key)}
    # a moved head invalidates what the kernel holds, not the files it only read names of
    assert names_fs.table.listed_files(key, known_to_kernel=True) == []


def test_the_numbers_of_files_listed_by_name_are_bounded(names_fs, monkeypatch):
    import lakefuse.fs.nodes as nodes

    monkeypatch.setattr(nodes, "UNREFERENCED_LISTED", 10)
    big = names_fs.lookup(names_fs.lookup(names_fs.lookup(1, "sales").ino, "main").ino, "big").ino
    reported = {name: ino for name, kind, ino, _mode in listing(names_fs, big, FIND) if kind == "name"}
    key = names_fs.table.get(big).tree.key
    kept = {path for _ino, path in names_fs.table.listed_files(key)}
    assert len(kept) == 10 and "big/f049.txt" in kept and "big/f000.txt" not in kept
    assert names_fs.lookup(big, "f049.txt").ino == reported["f049.txt"]
    assert names_fs.lookup(big, "f000.txt").size == 0  # forgotten: a number of its own, still found
