"""AppBackend: the mount's backend over a real App (SQLite, local storage).  A lookup that
memory cannot answer reads the backend once for both of its questions (an object of that name,
or a directory)."""

from __future__ import annotations

import pytest

from lakefuse.app import App
from lakefuse.config import load_config
from lakefuse.fs.app_backend import AppBackend
from lakefuse.fs.tree import Tree


@pytest.fixture
def app(tmp_path):
    app = App(load_config(environ={"LAKEFUSE_HOME": str(tmp_path / "home")}))
    app.catalog.create_repository("sales", app.default_namespace("sales"))
    for path in ("d/file.csv", "d/dir/", "d/dir/inner.txt", "d/bare/x.txt", "d/dir-sibling.txt"):
        app.catalog.upload_bytes("sales", "main", path, b"bytes of " + path.encode())
    app.catalog.commit("sales", "main", "first", "tests")
    app.catalog.upload_bytes("sales", "main", "d/staged.txt", b"staged")
    yield app
    app.close()


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
