"""DirectoryLearner: big directories learnt whole on the mount's learner thread, one at a time,
each asked for once while it waits; and, through a watched ``LakeFilesystem``, what that does to
lookups in a big directory and to another writer's changes made meanwhile."""

from __future__ import annotations

import errno
import logging
import threading

import pytest

from lakefuse.errors import RefNotFound
from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.learner import QUEUED_MOST, DirectoryLearner
from lakefuse.fs.tree import LEARN_BIG_AFTER, SMALL_DIRECTORY


class FakeTree:
    """What the learner needs of a tree: a key, and ``learn_directory``, which waits for
    ``release`` (so tests can ask while a learning runs) and records what it learnt."""

    def __init__(self, key="t", fail: bool = False):
        self.key = key
        self.learnt: list[str] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()
        self.fail = fail

    def learn_directory(self, path: str) -> bool:
        self.started.set()
        self.release.wait(10)
        self.learnt.append(path)
        if self.fail:
            raise OSError(errno.EIO, "the backend failed")
        return True


def busy_learner(path: str) -> tuple[DirectoryLearner, FakeTree]:
    """A learner in the middle of learning ``path`` (until the tree's ``release`` is set)."""
    learner = DirectoryLearner()
    tree = FakeTree()
    tree.release.clear()
    learner.learn(tree, path)
    assert tree.started.wait(10)
    return learner, tree


def test_directories_asked_for_while_one_is_learnt_are_learnt_once_each_in_order():
    learner, tree = busy_learner("a")
    for path in ("b", "c", "b", "c", "b"):
        learner.learn(tree, path)
    tree.release.set()
    assert learner.idle(10)
    assert tree.learnt == ["a", "b", "c"]
    learner.close()


def test_at_most_so_many_directories_wait_the_oldest_are_dropped():
    learner, tree = busy_learner("running")
    for i in range(QUEUED_MOST + 5):
        learner.learn(tree, f"d{i}")
    tree.release.set()
    assert learner.idle(10)
    assert tree.learnt == ["running"] + [f"d{i}" for i in range(5, QUEUED_MOST + 5)]
    learner.close()


def test_a_failing_learning_is_logged_and_the_next_one_runs(caplog):
    learner = DirectoryLearner()
    failing, fine = FakeTree("x", fail=True), FakeTree("y")
    learner.learn(failing, "big")
    learner.learn(fine, "big")
    assert learner.idle(10)
    assert failing.learnt == ["big"] and fine.learnt == ["big"]
    assert "learning the directory big failed" in caplog.text
    learner.close()


def test_a_branch_deleted_under_a_learning_is_no_warning(caplog):
    class Deleted(FakeTree):
        def learn_directory(self, path: str) -> bool:
            raise RefNotFound("branch not found: gone")

    learner = DirectoryLearner()
    learner.learn(Deleted(), "big")
    assert learner.idle(10)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    learner.close()


def test_nothing_is_learnt_after_close():
    learner = DirectoryLearner()
    learner.close()
    tree = FakeTree()
    learner.learn(tree, "big")
    assert learner.idle(1)
    assert tree.learnt == []


# ------------------------------------------------------------------ through the filesystem

BIG = SMALL_DIRECTORY + 3000


@pytest.fixture
def watched(backend, tmp_path):
    backend.put_entries("sales", "main", [(f"big/f{i:05d}", b"x") for i in range(BIG)])
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), change_feed=True)
    yield fs
    fs.close()


def missing_lookups(fs, directory: int, names) -> None:
    """Each name is missing: a negative entry on a watched branch (``lakefuse.fs.negatives``)."""
    for name in names:
        assert fs.lookup(directory, name).ino == 0, name


def test_lookups_missing_memory_in_a_big_directory_of_a_watched_branch_have_it_learnt_whole(watched, backend,
                                                                                              make_driver):
    big = make_driver(watched).ino("sales/main/big")
    missing_lookups(watched, big, [f".f{i:05d}.crc" for i in range(LEARN_BIG_AFTER + 1)])
    assert watched.state.learner.idle(30)
    reads = backend.calls["get_entry"] + backend.calls["list_entries"]
    missing_lookups(watched, big, [f".f{i:05d}.crc" for i in range(100, 1100)])
    for i in range(BIG - 1000, BIG):
        assert watched.lookup(big, f"f{i:05d}").size == 1
    assert backend.calls["get_entry"] + backend.calls["list_entries"] == reads  # 2,000 lookups from memory


def test_another_writers_change_to_a_learnt_directory_shows_after_the_poll(watched, backend, make_driver):
    big = make_driver(watched).ino("sales/main/big")
    missing_lookups(watched, big, [f".f{i:05d}.crc" for i in range(LEARN_BIG_AFTER + 1)])
    assert watched.state.learner.idle(30)
    missing_lookups(watched, big, ["late.csv"])
    backend.put_object("sales", "main", "big/late.csv", b"late")  # another process
    backend.delete_object("sales", "main", "big/f00010")
    watched.poll_changes()
    assert watched.lookup(big, "late.csv").size == 4
    missing_lookups(watched, big, ["f00010"])
    reads = backend.calls["get_entry"] + backend.calls["list_entries"]
    missing_lookups(watched, big, [f"g{i:05d}" for i in range(500)])
    assert watched.lookup(big, "f00011").size == 1
    # the rest of the directory stays known: the poll named the two changed names only
    assert backend.calls["get_entry"] + backend.calls["list_entries"] == reads
