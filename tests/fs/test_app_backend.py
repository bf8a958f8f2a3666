"""AppBackend: the mount's backend over a real App (SQLite, local storage).  A lookup that
memory cannot answer reads the backend once for both of its questions (an object of that name,
or a directory)."""

from __future__ import annotations

import pytest

from lakefuse.app import App
from lakefuse.config import load_config
from lakefuse.fs.app_backend import AppBackend
from lakefuse.fs.replies import WouldBlock
from lakefuse.fs.tree import Tree
from lakefuse.graveler.quick import NotQuick, quick_only


@pytest.fixture
def app(core):
    for path in ("d/file.csv", "d/dir/", "d/dir/inner.txt", "d/bare/x.txt", "d/dir-sibling.txt"):
        core.catalog.upload_bytes("sales", "main", path, b"bytes of " + path.encode())
    core.catalog.commit("sales", "main", "first", "tests")
    core.catalog.upload_bytes("sales", "main", "d/staged.txt", b"staged")
    return core


def test_get_entry_or_child_tells_a_file_a_directory_and_nothing_apart(app):
    backend = AppBackend(app)
    for ref in (backend.resolve_ref("sales", "main"), backend.resolve_ref("sales", "main~0")):
        entry, child = backend.get_entry_or_child("sales", ref, "d/file.csv")
        assert entry.size == len(b"bytes of d/file.csv") and child is None
        entry, child = backend.get_entry_or_child("sales", ref, "d/dir")
        assert entry is None and child.key == "d/dir/" and child.entry is not None  # its marker
        entry, child = backend.get_entry_or_child("sales", ref, "d/bare")
        assert entry is None and child.key == "d/bare/x.txt"  # a directory without a marker
        assert backend.get_entry_or_child("sales", ref, "d/missing") == (None, None)
    main = backend.resolve_ref("sales", "main")
    assert backend.get_entry_or_child("sales", main, "d/staged.txt")[0].size == 6


def test_a_lookup_memory_cannot_answer_is_one_read_of_the_branch(app, monkeypatch):
    backend = AppBackend(app)
    tree = Tree(backend, "sales", backend.resolve_ref("sales", "main"), writable=True, ttl=None)
    reads = []
    real = backend.graveler.lookup_path
    monkeypatch.setattr(backend.graveler, "lookup_path", lambda *args: reads.append(args[2]) or real(*args))
    monkeypatch.setattr(backend.graveler, "list_objects", lambda *args, **kw: pytest.fail("listed"))
    monkeypatch.setattr(backend.catalog, "stat", lambda *args, **kw: pytest.fail("a second read"))
    # never two in a row in one directory (the second would list it, to learn it whole), nor
    # names found in ascending order (the names after them would be fetched ahead)
    assert tree.stat("d/file.csv")[0].entry is not None and tree.stat("missing")[0] is None
    assert tree.stat("d/dir")[0].is_dir and tree.stat("d/dir/missing")[0] is None
    assert tree.stat("d/bare")[0] == (True, None)
    assert reads == [b"d/file.csv", b"missing", b"d/dir", b"d/dir/missing", b"d/bare"]


def test_quick_lookups_answer_from_memory_and_sqlite_or_would_block(app, tmp_path):
    """On the event loop a lookup reads the backend only if it can answer at once: SQLite point
    reads and ranges already decoded; a range still on disk, or a database reached through
    SQLAlchemy, is WouldBlock, and the same lookup then answers on a worker thread."""
    app = App(load_config(environ={"LAKEFUSE_HOME": str(tmp_path / "home")}))  # nothing in memory
    backend = AppBackend(app)
    main = backend.resolve_ref("sales", "main")
    commit = backend.resolve_ref("sales", "main~0")
    for ref in (main, commit):
        with pytest.raises(WouldBlock):  # the commit's ranges are not in memory yet
            backend.get_entry_or_child_quick("sales", ref, "d/file.csv")
    assert backend.get_entry_or_child("sales", commit, "d/file.csv")[0] is not None  # loads them
    for ref in (main, commit):
        entry, child = backend.get_entry_or_child_quick("sales", ref, "d/file.csv")
        assert entry.size == len(b"bytes of d/file.csv") and child is None
        assert backend.get_entry_or_child_quick("sales", ref, "d/dir")[1].key == "d/dir/"
        assert backend.get_entry_or_child_quick("sales", ref, "d/missing") == (None, None)
    assert backend.get_entry_or_child_quick("sales", main, "d/staged.txt")[0].size == 6
    with quick_only(), pytest.raises(NotQuick):
        app.catalog.list_branches("sales")  # SQLAlchemy: never on the event loop
    app.close()


def test_a_quick_stat_changes_nothing_when_it_would_block(app):
    backend = AppBackend(app)
    tree = Tree(backend, "sales", backend.resolve_ref("sales", "main"), writable=True, ttl=None)
    assert tree.stat("d/file.csv")[0].entry is not None  # a point read: the ranges are decoded now
    assert tree.stat("x/one.txt", quick=True)[0] is None  # answered at once
    with pytest.raises(WouldBlock):  # the second miss in a row in x/ would list x/ to learn it
        tree.stat("x/two.txt", quick=True)
    assert tree.cached("x/two.txt") is None
    assert tree.stat("x/two.txt")[0] is None  # on a worker thread: x/ listed, known empty
    assert tree.cached("x/three.txt")[0] is None  # known whole: a missing name from memory
