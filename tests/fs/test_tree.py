"""Tree: listing pages are kept (a second listing of a directory costs no backend call) until
they expire on a branch, or a change made through the tree touches the directory."""

from __future__ import annotations

from lakefuse.fs.memory import MemoryBackend
from lakefuse.fs.tree import PathStat, Tree


def make_tree(ttl, **options):
    backend = MemoryBackend()
    backend.create_repository("sales")
    for i in range(30):
        backend.put_object("sales", "main", f"d/f{i:02d}", b"x" * i)
    backend.put_object("sales", "main", "other/g", b"y")
    backend.commit("sales", "main", "c")
    ref = backend.resolve_ref("sales", "main")
    return backend, Tree(backend, "sales", ref, writable=True, ttl=ttl, **options)


def names(page):
    return [name for name, _key, _stat in page[0]]


def test_a_second_listing_of_a_directory_comes_from_memory():
    backend, tree = make_tree(ttl=None)
    first = tree.list_dir("d", "", 10)
    calls = backend.calls["list_entries"]
    assert tree.list_dir("d", "", 10) == first
    assert names(tree.list_dir("d", first[1], 100)) == [f"f{i:02d}" for i in range(10, 30)]
    assert tree.list_dir("d", first[1], 100)[2] is True  # exhausted
    assert backend.calls["list_entries"] == calls + 1  # only the new page was listed


def test_a_page_that_ends_the_directory_says_so_without_another_call():
    """A directory of exactly one page is listed in one backend call, not two (the second,
    empty, would cost a branch two SQL queries); one more entry makes it two pages."""
    backend, tree = make_tree(ttl=None)
    calls = backend.calls["list_entries"]
    page = tree.list_dir("d", "", 30)
    assert len(page[0]) == 30 and page[1] == "d/f29" and page[2] is True  # exhausted
    assert backend.calls["list_entries"] == calls + 1
    first = tree.list_dir("d", "", 29)
    assert len(first[0]) == 29 and first[1] == "d/f28" and first[2] is False
    assert names(tree.list_dir("d", first[1], 29)) == ["f29"]


def test_a_change_through_the_tree_drops_the_pages_of_its_directory():
    backend, tree = make_tree(ttl=None)
    tree.list_dir("d", "", 100)
    tree.list_dir("other", "", 100)
    calls = backend.calls["list_entries"]
    backend.put_object("sales", "main", "d/new", b"n")  # staged; the tree learns it from us:
    tree.remember("d/new", PathStat(False, None))
    assert "new" in names(tree.list_dir("d", "", 100))
    tree.list_dir("other", "", 100)  # another directory: still kept
    assert backend.calls["list_entries"] == calls + 1
    tree.forget("d/f00")
    tree.list_dir("d", "", 100)
    assert backend.calls["list_entries"] == calls + 2


def test_pages_of_a_branch_expire_with_its_timeout(monkeypatch):
    import lakefuse.fs.tree as tree_module

    backend, tree = make_tree(ttl=1.0)
    now = [1000.0]
    monkeypatch.setattr(tree_module.time, "monotonic", lambda: now[0])
    tree.list_dir("d", "", 100)
    backend.put_object("sales", "main", "d/later", b"l")  # another writer
    assert "later" not in names(tree.list_dir("d", "", 100))
    now[0] += 1.5
    assert "later" in names(tree.list_dir("d", "", 100))


def test_kept_pages_are_bounded_by_entries_not_directories():
    backend, tree = make_tree(ttl=None, metadata_entries=25)
    tree.list_dir("d", "", 20)  # 20 entries: kept
    calls = backend.calls["list_entries"]
    tree.list_dir("d", "", 20)
    assert backend.calls["list_entries"] == calls
    tree.list_dir("d", "d/f19", 20)  # 10 more: the directory would hold 30 > 25, not kept
    tree.list_dir("d", "d/f19", 20)
    assert backend.calls["list_entries"] == calls + 2
    tree.list_dir("other", "", 20)  # 1 entry: fits beside the first page
    tree.list_dir("d", "", 20)
    tree.list_dir("other", "", 20)
    assert backend.calls["list_entries"] == calls + 3
