"""``SiblingReadAhead``: which files of a directory are read in ahead of a program walking it
cold (its reads miss the page cache), over a tree that knows its names from memory and objects
that are real local files."""

from __future__ import annotations

import os

import pytest

from lakefuse.fs.siblings import SMALLEST_MISS_BYTES, SiblingReadAhead
from lakefuse.graveler.model import Entry

#: the size of a missed file in these tests: big enough to start a stream
BIG = SMALLEST_MISS_BYTES


def entry(address: str, size: int) -> Entry:
    return Entry(physical_address=address, size=size, checksum="", mtime=0)


class KnownTree:
    """A tree knowing directory ``d`` whole: files f00..fNN (objects in ``root``) and a
    subdirectory ``sub``."""

    repo = "repo"

    def __init__(self, root, files: int = 20, known: bool = True):
        self.root = root
        self.entries: dict[str, Entry] = {}
        for i in range(files):
            name = f"f{i:02d}"
            (root / name).write_bytes(b"x" * 100)
            self.entries[f"d/{name}"] = entry(name, 100)
        self.known = known

    def known_names(self, path: str, most: int):
        if not self.known or path != "d" or len(self.entries) + 1 > most:
            return None
        return sorted([p.rpartition("/")[2] for p in self.entries] + ["sub"])

    def cached_entry(self, path: str):
        return self.entries.get(path)


class Recorder:
    """``local_file``: records which objects were asked for."""

    def __init__(self, tree: KnownTree):
        self.tree = tree
        self.asked: list[str] = []

    def __call__(self, repo: str, e: Entry):
        assert repo == "repo"
        self.asked.append(e.physical_address)
        return str(self.tree.root / e.physical_address)


@pytest.fixture
def tree(tmp_path):
    return KnownTree(tmp_path)


@pytest.fixture
def recorder(tree):
    return Recorder(tree)


@pytest.fixture
def ahead(recorder):
    reads = SiblingReadAhead(recorder, ahead_files=4)
    yield reads
    reads.close()


def test_a_miss_reads_in_the_next_files_in_listing_order(tree, recorder, ahead):
    ahead.missed(tree, "d/f03", BIG)
    assert ahead.idle()
    assert recorder.asked == ["f04", "f05", "f06", "f07"]
    assert ahead.files_read_ahead == 4


def test_a_miss_of_a_small_file_starts_nothing(tree, recorder, ahead):
    """The read-in its open started is nearly always in time for a small file: a miss is a fluke."""
    ahead.missed(tree, "d/f03", SMALLEST_MISS_BYTES - 1)
    assert ahead.idle()
    assert recorder.asked == []


def test_opens_alone_start_nothing(tree, recorder, ahead):
    ahead.opened(tree, "d/f03")
    assert ahead.idle()
    assert recorder.asked == []


def test_a_program_walking_on_keeps_the_stream_ahead_of_it(tree, recorder, ahead):
    ahead.missed(tree, "d/f00", BIG)
    for k in range(1, 16):
        assert ahead.idle()
        asked = sorted(recorder.asked)
        assert len(asked) == len(set(asked))  # each file read in once
        # at least half of the stream's files ahead of the program, at most all of them
        assert {f"f{i:02d}" for i in range(k, k + 2)} <= set(asked)
        assert max(asked) <= f"f{k + 3:02d}"
        ahead.opened(tree, f"d/f{k:02d}")  # read in already: warm
    assert ahead.idle()
    assert sorted(recorder.asked) == [f"f{i:02d}" for i in range(1, len(recorder.asked) + 1)]


def test_a_miss_of_a_file_the_stream_covers_starts_nothing_more(tree, recorder, ahead):
    """Read in, but dropped again or not there yet when the program read it: the stream goes on."""
    ahead.missed(tree, "d/f00", BIG)
    assert ahead.idle()
    ahead.opened(tree, "d/f01")
    ahead.missed(tree, "d/f01", BIG)
    assert ahead.idle()
    assert recorder.asked == ["f01", "f02", "f03", "f04"]


def test_the_stream_stops_at_the_end_of_the_directory(tree, recorder, ahead):
    ahead.missed(tree, "d/f17", BIG)
    assert ahead.idle()
    assert recorder.asked == ["f18", "f19"]  # "sub" is a directory: skipped
    ahead.opened(tree, "d/f18")
    ahead.opened(tree, "d/f19")
    assert ahead.idle()
    assert recorder.asked == ["f18", "f19"]


def test_a_miss_elsewhere_restarts_the_stream_there(tree, recorder, ahead):
    ahead.missed(tree, "d/f00", BIG)
    assert ahead.idle()
    ahead.missed(tree, "d/f10", BIG)
    assert ahead.idle()
    assert recorder.asked == ["f01", "f02", "f03", "f04", "f11", "f12", "f13", "f14"]


def asked_after_a_miss(tree: KnownTree) -> list[str]:
    """The objects read ahead after a miss of ``d/f00``, with a reader of its own."""
    recorder = Recorder(tree)
    reads = SiblingReadAhead(recorder, ahead_files=4)
    try:
        reads.missed(tree, "d/f00", BIG)
        assert reads.idle()
        return recorder.asked
    finally:
        reads.close()


def test_a_directory_not_known_whole_is_not_read_ahead(tmp_path):
    assert asked_after_a_miss(KnownTree(tmp_path, known=False)) == []


def test_a_directory_of_more_than_most_names_is_not_read_ahead(tmp_path, monkeypatch):
    """Sorting its names would hold the GIL, and stall the event loop, for too long."""
    from lakefuse.fs import siblings

    monkeypatch.setattr(siblings, "MOST_NAMES", 20)  # d holds 21 names: f00..f19 and sub
    assert asked_after_a_miss(KnownTree(tmp_path)) == []
    monkeypatch.setattr(siblings, "MOST_NAMES", 21)
    assert asked_after_a_miss(KnownTree(tmp_path)) == ["f01", "f02", "f03", "f04"]


def test_objects_that_are_not_local_files_or_are_missing_are_skipped(tree, ahead):
    os.unlink(tree.root / "f02")
    tree.entries["d/f03"] = entry("f03", 0)  # empty: nothing to read

    def local_file(repo, e):
        return None if e.physical_address == "f01" else str(tree.root / e.physical_address)

    reads = SiblingReadAhead(local_file, ahead_files=4)
    try:
        reads.missed(tree, "d/f00", BIG)
        assert reads.idle()
        assert reads.files_read_ahead == 1  # f04 only
    finally:
        reads.close()


def test_nothing_is_read_ahead_after_close(tree, recorder, ahead):
    ahead.close()
    ahead.missed(tree, "d/f00", BIG)
    assert ahead.idle()
    assert recorder.asked == []


def test_another_tree_of_the_same_paths_has_its_own_stream(tmp_path, recorder, ahead, tree):
    ahead.missed(tree, "d/f00", BIG)
    assert ahead.idle()
    other = KnownTree(tmp_path)  # a new tree of the same ref (its files rewritten alike)
    ahead.opened(other, "d/f01")  # warm, and no stream of its own: nothing
    assert ahead.idle()
    assert recorder.asked == ["f01", "f02", "f03", "f04"]


def test_a_program_overtaking_the_thread_is_not_read_for_again(tree):
    """Misses of files the thread has not reached yet stay the stream's: it skips what the
    program opened meanwhile instead of starting over."""
    import threading

    asked: list[str] = []
    first_asked = threading.Event()
    go_on = threading.Event()

    def slow_local_file(repo, e):
        asked.append(e.physical_address)
        if len(asked) == 1:
            first_asked.set()
            assert go_on.wait(5)
        return str(tree.root / e.physical_address)

    reads = SiblingReadAhead(slow_local_file, ahead_files=4)
    try:
        reads.missed(tree, "d/f00", BIG)
        assert first_asked.wait(5)  # reading f01 in, slowly
        for name in ("d/f01", "d/f02"):  # overtook the thread, within its batch
            reads.opened(tree, name)
            reads.missed(tree, name, BIG)
        go_on.set()
        assert reads.idle()
        assert asked == ["f01", "f03", "f04"]
    finally:
        go_on.set()
        reads.close()


def test_a_second_cold_walk_of_the_directory_is_read_ahead_again(tree, recorder, ahead):
    """The page cache dropped between two walks (``echo 3 > drop_caches``): the second walk's
    first read misses again, behind where the first walk ended, and starts a new stream."""
    ahead.missed(tree, "d/f00", BIG)
    for i in range(1, 20):
        ahead.opened(tree, f"d/f{i:02d}")
        assert ahead.idle()
    first_walk = list(recorder.asked)
    assert first_walk == [f"f{i:02d}" for i in range(1, 20)]
    ahead.opened(tree, "d/f00")  # behind the program: not the stream's
    ahead.missed(tree, "d/f00", BIG)
    assert ahead.idle()
    assert recorder.asked[len(first_walk):] == ["f01", "f02", "f03", "f04"]
