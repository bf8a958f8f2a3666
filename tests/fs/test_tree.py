"""Tree: listing pages are kept (a second listing of a directory costs no backend call) until
they expire on a branch, or a change made through the tree touches the directory; a directory
known whole is then listed from memory."""

from __future__ import annotations

from lakefuse.fs.memory import MemoryBackend
from lakefuse.fs.tree import LEARN_BIG_AFTER, SMALL_DIRECTORY, PathStat, Tree


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
    assert "d" not in tree._pages  # its pages are gone; known whole, it is listed from memory
    assert "new" in names(tree.list_dir("d", "", 100))
    tree.list_dir("other", "", 100)  # another directory: still kept
    assert backend.calls["list_entries"] == calls
    tree.forget("d/f00")
    tree.list_dir("d", "", 100)
    assert backend.calls["list_entries"] == calls + 1


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


def test_a_directory_made_here_stays_known_whole_through_its_own_changes_until_removed():
    backend, tree = make_tree(ttl=None)
    made = PathStat(True, None)
    tree.remember_empty_dir("new", made, pending=True)
    assert tree.cached("new/x") is not None and tree.cached("new/x")[0] is None  # missing, from memory
    tree.remember("new", PathStat(True, None))  # its mode or times set: what it holds is unchanged
    assert tree.cached("new/x") is not None and tree.cached("new/x")[0] is None
    tree.remember("new", None)  # removed: nothing is known of it any more
    tree.remember("new", PathStat(False, None))  # a file of that name now
    assert tree.cached("new/x") is None


def test_a_directory_known_whole_is_listed_from_memory_after_changes_drop_its_pages():
    backend, tree = make_tree(ttl=None)
    whole = tree.list_dir("d", "", 100)
    assert whole[2] is True  # listed to its end: known whole
    tree.remember("d/new", PathStat(False, None), pending=True)  # written here: the pages go
    tree.remember("d/f03", None, pending=True)  # and unlinked here
    tree.remember("d/sub", PathStat(True, None))  # a directory made here
    calls = backend.calls["list_entries"]
    assert "new" not in names(tree.list_dir("d", "", 100))  # waits for the stager: served apart
    assert backend.calls["list_entries"] == calls + 1
    tree.staged("d/new", None)
    calls = backend.calls["list_entries"]
    rows, last, exhausted = tree.list_dir("d", "", 100)
    expected = sorted([f"f{i:02d}" for i in range(30) if i != 3] + ["new", "sub"])
    assert [name for name, _key, _stat in rows] == expected and exhausted and last == "d/sub/"
    assert [key for _name, key, _stat in rows][-1] == "d/sub/"  # a directory's key ends with '/'
    assert names(tree.list_dir("d", "d/f20", 100)) == [f"f{i:02d}" for i in range(21, 30)] + ["new", "sub"]
    assert backend.calls["list_entries"] == calls
    tree.forget("d/f07")  # another writer changed it: only the backend can tell
    assert names(tree.list_dir("d", "", 100))[:3] == ["f00", "f01", "f02"]
    assert backend.calls["list_entries"] == calls + 1


def big_directory_tree(names: int):
    backend = MemoryBackend()
    backend.create_repository("sales")
    backend.put_entries("sales", "main", [(f"big/f{i:05d}", b"x") for i in range(names)])
    ref = backend.resolve_ref("sales", "main")
    return backend, Tree(backend, "sales", ref, writable=True, ttl=None)


def test_lookups_in_random_order_in_a_big_directory_stop_fetching_pages_ahead():
    import random

    backend, tree = big_directory_tree(SMALL_DIRECTORY + 1000)  # too big to be learnt whole
    order = list(range(SMALL_DIRECTORY + 1000))
    random.Random(18).shuffle(order)
    before = backend.calls["list_entries"]
    for i in order[:300]:
        assert tree.stat(f"big/f{i:05d}")[0] is not None
    listed = backend.calls["list_entries"] - before
    # one page when the directory turns out big, one ahead before the order shows it is not
    # a walk, and a rare retry after a run of ascending finds (it was 14 pages, of up to
    # 1,000 names, when every ascending find fetched one)
    assert listed <= 4, listed


def test_lookups_walking_a_big_directory_in_order_fetch_growing_pages_ahead():
    backend, tree = big_directory_tree(SMALL_DIRECTORY + 1000)
    before = (backend.calls["list_entries"], backend.calls["get_entry"])
    for i in range(0, 3000):
        assert tree.stat(f"big/f{i:05d}")[0] is not None
    listed = backend.calls["list_entries"] - before[0]
    read = backend.calls["get_entry"] - before[1]
    assert listed <= 10 and read <= 10, (listed, read)  # pages of 64, 128, ... 1000 names


# ------------------------------------------------------------------ big directories learnt whole

def learning_tree(names: int, **options):
    """A commit's tree over a directory ``big`` of ``names`` files, whose learnings run when
    asked (``asked`` lists them)."""
    backend = MemoryBackend()
    backend.create_repository("sales")
    backend.put_entries("sales", "main", [(f"big/f{i:05d}", b"x") for i in range(names)])
    backend.commit("sales", "main", "c")
    ref = backend.resolve_ref("sales", backend.branch_head("sales", "main"))
    asked: list[str] = []
    tree = Tree(backend, "sales", ref, writable=False, ttl=None,
                learn_in_background=lambda tree, path: asked.append(path), **options)
    return backend, tree, asked


def backend_reads(backend) -> int:
    return backend.calls["get_entry"] + backend.calls["list_entries"]


def test_a_big_directory_where_lookups_keep_missing_memory_is_learnt_whole_then_answers_from_memory():
    import random

    backend, tree, asked = learning_tree(SMALL_DIRECTORY + 5000)
    # names in random order past the first page (which the second lookup lists, finding the
    # directory too big to be learnt at once)
    for i in random.Random(18).sample(range(SMALL_DIRECTORY, SMALL_DIRECTORY + 5000), 3 * LEARN_BIG_AFTER):
        assert tree.stat(f"big/f{i:05d}")[0] is not None
    assert asked == ["big"]  # once, at the LEARN_BIG_AFTER-th point read
    assert tree.learn_directory("big", page=300) is True
    reads = backend_reads(backend)
    assert tree.stat("big/f07000")[0] is not None
    assert tree.stat("big/f02499.crc")[0] is None
    assert tree.stat("big/f00007")[0].entry.size == 1
    assert backend_reads(backend) == reads  # present and missing names: from memory


def test_a_directory_learnt_while_this_mount_changes_it_keeps_the_changes_not_the_older_listing():
    backend, tree, _asked = learning_tree(1000)
    new = PathStat(False, None)
    list_entries = backend.list_entries

    def list_then_change(*args, **kwargs):  # changes made while the learner lists the pages
        items = list_entries(*args, **kwargs)
        if kwargs.get("after") == "big/f00299":  # after the second of four pages
            tree.remember("big/f00100", None)  # listed already: removed since
            tree.remember("big/f00900", new)  # not listed yet: rewritten, not uploaded
            tree.remember("big/zz-new", new)
            tree.forget("big/f00950")  # another writer changed it: only the backend can tell
        return items

    backend.list_entries = list_then_change
    assert tree.learn_directory("big", page=150) is True
    backend.list_entries = list_entries
    reads = backend_reads(backend)
    assert tree.stat("big/f00100")[0] is None
    assert tree.stat("big/f00900")[0] is new  # not the listing's stat of the old file
    assert tree.stat("big/zz-new")[0] is new
    assert tree.stat("big/f00500")[0].entry is not None
    assert tree.stat("big/missing")[0] is None
    assert backend_reads(backend) == reads
    assert tree.stat("big/f00950")[0] is not None
    assert backend_reads(backend) == reads + 1  # the name another writer changed: asked


def test_a_learning_ends_unkept_when_the_directory_itself_changes_and_may_be_asked_again():
    backend, tree, asked = learning_tree(SMALL_DIRECTORY + 500)
    list_entries = backend.list_entries

    def list_then_forget(*args, **kwargs):
        items = list_entries(*args, **kwargs)
        tree.forget("big")  # e.g. renamed over by another writer
        return items

    for i in range(LEARN_BIG_AFTER + 1):
        tree.stat(f"big/f{i:05d}.crc")  # missing names: point reads, never pages ahead
    backend.list_entries = list_then_forget
    assert tree.learn_directory("big", page=500) is False
    backend.list_entries = list_entries
    reads = backend_reads(backend)
    tree.stat("big/missing")
    assert backend_reads(backend) > reads  # not known whole
    for i in range(LEARN_BIG_AFTER):
        tree.stat(f"big/g{i:05d}")
    assert asked == ["big", "big"]  # asked again, after as many point reads


def test_a_directory_of_more_than_three_quarters_of_the_metadata_cache_is_not_learnt():
    backend, tree, _asked = learning_tree(3001, metadata_entries=4000)
    assert tree.learn_directory("big", page=500) is False
    reads = backend_reads(backend)
    tree.stat("big/missing")
    assert backend_reads(backend) > reads


def test_a_branch_without_a_change_feed_never_asks_for_a_learning():
    backend, _tree, _asked = learning_tree(SMALL_DIRECTORY + 500)
    asked: list[str] = []
    ref = backend.resolve_ref("sales", "main")
    tree = Tree(backend, "sales", ref, writable=True, ttl=1.0,
                learn_in_background=lambda tree, path: asked.append(path))
    for i in range(3 * LEARN_BIG_AFTER):
        tree.stat(f"big/f{i * 131 % SMALL_DIRECTORY:05d}.crc")
    assert asked == []  # what it learnt would be stale within a second


def test_known_names_and_cached_entries_come_from_memory_only():
    """What reading ahead across files (``lakefuse.fs.siblings``) may ask of a tree: never the
    backend, and nothing of a directory not known whole or bigger than asked."""
    backend, tree = make_tree(ttl=None)
    assert tree.known_names("d", 100) is None  # not listed yet
    assert tree.cached_entry("d/f03") is None
    tree.list_dir("d", "", 100)
    calls = dict(backend.calls)
    assert tree.known_names("d", 100) == [f"f{i:02d}" for i in range(30)]
    assert tree.known_names("d", 29) is None  # more names than asked for
    assert tree.cached_entry("d/f03").size == 3
    assert tree.cached_entry("d/missing") is None
    assert dict(backend.calls) == calls
