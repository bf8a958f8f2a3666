"""Repositories, branches, tags, staged reads/writes and listings of the Graveler."""

from __future__ import annotations

import pytest

from lakefuse.errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidName,
    ObjectNotFound,
    ReadOnly,
    RefNotFound,
    RepositoryNotFound,
)
from lakefuse.graveler.graveler import INITIAL_COMMIT_MESSAGE
from lakefuse.graveler.refexpr import RefKind


# -- repositories ---------------------------------------------------------------------------


def test_create_repository_makes_main_on_an_empty_initial_commit(graveler, namespace, committed_for):
    repo = graveler.create_repository("my-repo", namespace)
    assert repo.default_branch == "main"
    assert repo.storage_namespace == namespace
    branch = graveler.get_branch("my-repo", "main")
    initial = graveler.get_commit("my-repo", branch.commit_id)
    assert initial.message == INITIAL_COMMIT_MESSAGE
    assert initial.parents == ()
    assert initial.generation == 1
    assert initial.metarange_id == committed_for(namespace).empty_metarange()
    assert [r.id for r in graveler.list_repositories()] == ["my-repo"]
    assert graveler.list_objects("my-repo", "main").items == []


@pytest.mark.parametrize("name", ["ab", "-abc", "Abc", "a_bc", "a" * 64, "abc/d", "abc def", ""])
def test_repository_names_are_validated(graveler, namespace, name):
    with pytest.raises(InvalidName):
        graveler.create_repository(name, namespace)


@pytest.mark.parametrize("name", ["abc", "0ab", "a" * 63, "my-repo-2"])
def test_valid_repository_names(graveler, tmp_path, name):
    graveler.create_repository(name, f"local://{tmp_path}/{name}")
    assert graveler.get_repository(name).id == name


def test_repository_name_and_namespace_are_unique(graveler, namespace, tmp_path):
    graveler.create_repository("one", namespace)
    with pytest.raises(AlreadyExists):
        graveler.create_repository("one", f"local://{tmp_path}/other")
    with pytest.raises(AlreadyExists, match="already used by repository 'one'"):
        graveler.create_repository("two", namespace)


def test_delete_repository_removes_refs(graveler, repo, rec):
    graveler.set(repo, "main", rec("k"))
    graveler.delete_repository(repo)
    with pytest.raises(RepositoryNotFound):
        graveler.get_repository(repo)
    with pytest.raises(RepositoryNotFound):
        graveler.get(repo, "main", b"k")
    assert graveler.list_repositories() == []


# -- branches and tags ----------------------------------------------------------------------


def test_branch_lifecycle(graveler, repo, rec):
    graveler.set(repo, "main", rec("a"))
    first = graveler.commit(repo, "main", "first", "tester")
    graveler.set(repo, "main", rec("staged"))
    dev = graveler.create_branch(repo, "dev", "main")
    assert dev.commit_id == first.id
    # staged changes of the source are not carried over
    with pytest.raises(ObjectNotFound):
        graveler.get(repo, "dev", b"staged")
    assert graveler.get(repo, "dev", b"a") == rec("a")
    assert [b.id for b in graveler.list_branches(repo)] == ["dev", "main"]
    with pytest.raises(AlreadyExists):
        graveler.create_branch(repo, "dev", "main")
    graveler.delete_branch(repo, "dev")
    with pytest.raises(RefNotFound):
        graveler.get_branch(repo, "dev")
    with pytest.raises(InvalidArgument, match="default branch"):
        graveler.delete_branch(repo, "main")


def test_branch_from_missing_ref_fails(graveler, repo):
    with pytest.raises(RefNotFound):
        graveler.create_branch(repo, "dev", "nope")


def test_tags(graveler, repo, rec):
    graveler.set(repo, "main", rec("a"))
    first = graveler.commit(repo, "main", "first", "tester")
    assert graveler.create_tag(repo, "v1.0", "main") == first.id
    graveler.set(repo, "main", rec("b"))
    second = graveler.commit(repo, "main", "second", "tester")
    with pytest.raises(AlreadyExists):
        graveler.create_tag(repo, "v1.0", "main")
    assert graveler.create_tag(repo, "v1.0", "main", force=True) == second.id
    graveler.create_tag(repo, "v0.9", first.id)
    assert graveler.list_tags(repo) == [("v0.9", first.id), ("v1.0", second.id)]
    resolved = graveler.resolve(repo, "v0.9")
    assert resolved.kind is RefKind.TAG and not resolved.writable
    graveler.delete_tag(repo, "v0.9")
    with pytest.raises(RefNotFound):
        graveler.resolve(repo, "v0.9")


def test_branch_and_tag_names_do_not_collide(graveler, repo):
    graveler.create_tag(repo, "release", "main")
    with pytest.raises(AlreadyExists):
        graveler.create_branch(repo, "release", "main")
    graveler.create_branch(repo, "dev", "main")
    with pytest.raises(AlreadyExists):
        graveler.create_tag(repo, "dev", "main")


@pytest.mark.parametrize(
    "name", ["a~1", "a^", "dev:joe", "a b", "a/b", "a..b", "a.", "x.lock", ".hidden", "-x", "a\tb", "cafe", "2024", "0" * 64]
)
def test_ref_names_that_read_as_expressions_are_rejected(graveler, repo, name):
    with pytest.raises(InvalidName):
        graveler.create_branch(repo, name, "main")
    with pytest.raises(InvalidName):
        graveler.create_tag(repo, name, "main")


@pytest.mark.parametrize("name", ["feature-1", "v1.0", "Release_2024", "x", "CAFE", "abc", "deadbeefz"])
def test_ordinary_ref_names_are_accepted(graveler, repo, name):
    graveler.create_branch(repo, name, "main")
    assert graveler.resolve(repo, name).writable


# -- staged objects -------------------------------------------------------------------------


def test_set_get_delete_on_a_branch(graveler, repo, rec):
    graveler.set(repo, "main", rec("k", "A"))
    assert graveler.get(repo, "main", b"k") == rec("k", "A")
    graveler.set(repo, "main", rec("k", "B"))
    assert graveler.get(repo, "main", b"k") == rec("k", "B")
    assert graveler.delete(repo, "main", b"k") is True
    with pytest.raises(ObjectNotFound):
        graveler.get(repo, "main", b"k")


def test_deleting_a_missing_key_stages_nothing(graveler, graveler_stores, repo, rec):
    assert graveler.delete(repo, "main", b"never") is False
    branch = graveler.get_branch(repo, "main")
    assert graveler_stores.staging.count(branch.staging_token) == 0
    # a staged-only object: deleting it hides it
    graveler.set(repo, "main", rec("new"))
    assert graveler.delete(repo, "main", b"new") is True
    with pytest.raises(ObjectNotFound):
        graveler.get(repo, "main", b"new")
    assert list(graveler.diff_uncommitted(repo, "main")) == []


def test_reads_see_staging_then_sealed_then_head(graveler, graveler_stores, repo, rec):
    graveler.set(repo, "main", rec("k", "committed"))
    graveler.set(repo, "main", rec("gone", "committed"))
    graveler.commit(repo, "main", "c1", "tester")
    graveler.set(repo, "main", rec("k", "sealed"))
    graveler.delete(repo, "main", b"gone")
    # seal the staging token as a commit in progress would
    sealed = graveler_stores.refs.seal_staging_token(repo, "main", "fresh-token")
    assert graveler.get(repo, "main", b"k") == rec("k", "sealed")
    with pytest.raises(ObjectNotFound):
        graveler.get(repo, "main", b"gone")
    graveler.set(repo, "main", rec("k", "newest"))
    assert graveler_stores.staging.get("fresh-token", b"k") == rec("k", "newest")
    assert graveler.get(repo, "main", b"k") == rec("k", "newest")
    assert graveler.get(repo, "main~0", b"k") == rec("k", "committed")  # a commit: no staging
    # a later commit includes the sealed token too
    commit = graveler.commit(repo, "main", "c2", "tester")
    view = graveler.view(repo, commit.id)
    assert view.get(b"k") == rec("k", "newest")
    assert view.get(b"gone") is None
    assert graveler.get_branch(repo, "main").sealed_tokens == ()
    assert graveler_stores.staging.count(sealed.sealed_tokens[0]) == 0


def test_stage_many_is_applied_at_once(graveler, repo, rec):
    graveler.set(repo, "main", rec("dir/a"))
    graveler.set(repo, "main", rec("dir/b"))
    graveler.commit(repo, "main", "c1", "tester")
    graveler.stage(
        repo,
        "main",
        [(b"new/a", rec("new/a")), (b"new/b", rec("new/b")), (b"dir/a", None), (b"dir/b", None), (b"missing", None)],
    )
    assert [key for key, _ in graveler.iter_objects(repo, "main")] == [b"new/a", b"new/b"]
    assert sorted(c.key for c in graveler.diff_uncommitted(repo, "main")) == [b"dir/a", b"dir/b", b"new/a", b"new/b"]
    with pytest.raises(InvalidArgument):
        graveler.stage(repo, "main", [(b"x", rec("y"))])
    with pytest.raises(InvalidArgument):
        graveler.set(repo, "main", rec(b"\xff\xfe"))


def test_writes_to_tags_and_commits_are_refused(graveler, repo, rec):
    graveler.create_tag(repo, "v1", "main")
    with pytest.raises(ReadOnly):
        graveler.set(repo, "v1", rec("k"))
    with pytest.raises(ReadOnly):
        graveler.delete(repo, "main~0", b"k")
    with pytest.raises(RefNotFound):
        graveler.set(repo, "nope", rec("k"))


def test_reset_all_and_by_prefix(graveler, repo, rec):
    graveler.set(repo, "main", rec("keep/a"))
    graveler.set(repo, "main", rec("drop/a"))
    graveler.commit(repo, "main", "c1", "tester")
    graveler.set(repo, "main", rec("keep/a", "B"))
    graveler.set(repo, "main", rec("keep/b"))
    graveler.set(repo, "main", rec("drop/b"))
    graveler.delete(repo, "main", b"drop/a")
    graveler.reset(repo, "main", prefix=b"drop/")
    assert [c.key for c in graveler.diff_uncommitted(repo, "main")] == [b"keep/a", b"keep/b"]
    assert graveler.get(repo, "main", b"drop/a") == rec("drop/a")
    with pytest.raises(ObjectNotFound):
        graveler.get(repo, "main", b"drop/b")
    before = graveler.get_branch(repo, "main")
    graveler.reset(repo, "main")
    after = graveler.get_branch(repo, "main")
    assert after.staging_token != before.staging_token and after.commit_id == before.commit_id
    assert list(graveler.diff_uncommitted(repo, "main")) == []
    assert graveler.get(repo, "main", b"keep/a") == rec("keep/a")


# -- listings -------------------------------------------------------------------------------


@pytest.fixture
def tree(graveler, repo, rec):
    """Committed: a/1 a/2 b/x/1 b/y c d/1; then staged: a/1 deleted, a/3 added, b/x/1 deleted
    (b/x/ becomes empty), d/1 deleted (d/ gone), e/1 added, c changed."""
    for key in ["a/1", "a/2", "b/x/1", "b/y", "c", "d/1"]:
        graveler.set(repo, "main", rec(key))
    graveler.commit(repo, "main", "tree", "tester")
    graveler.delete(repo, "main", b"a/1")
    graveler.set(repo, "main", rec("a/3"))
    graveler.delete(repo, "main", b"b/x/1")
    graveler.delete(repo, "main", b"d/1")
    graveler.set(repo, "main", rec("e/1"))
    graveler.set(repo, "main", rec("c", "C"))
    return repo


def test_recursive_listing_merges_staged_over_head(graveler, tree, listed):
    assert listed(graveler.list_objects(tree, "main")) == ["a/2", "a/3", "b/y", "c", "e/1"]
    assert listed(graveler.list_objects(tree, "main~0")) == ["a/1", "a/2", "b/x/1", "b/y", "c", "d/1"]
    items = dict(graveler.list_objects(tree, "main").items)
    assert items[b"c"].identity != dict(graveler.list_objects(tree, "main~0").items)[b"c"].identity


def test_delimiter_listing_hides_emptied_directories(graveler, tree, listed):
    page = graveler.list_objects(tree, "main", delimiter=b"/")
    assert listed(page) == ["a/", "b/", "c", "e/"]
    assert [record is None for _key, record in page.items] == [True, True, False, True]
    assert listed(graveler.list_objects(tree, "main", prefix=b"b/", delimiter=b"/")) == ["b/y"]
    assert listed(graveler.list_objects(tree, "main~0", prefix=b"b/", delimiter=b"/")) == ["b/x/", "b/y"]
    assert listed(graveler.list_objects(tree, "main", prefix=b"a/", delimiter=b"/")) == ["a/2", "a/3"]
    assert listed(graveler.list_objects(tree, "main", prefix=b"d/", delimiter=b"/")) == []


def test_listing_after_and_paging(graveler, tree, listed):
    assert listed(graveler.list_objects(tree, "main", delimiter=b"/", after=b"a/")) == ["b/", "c", "e/"]
    # after inside a common prefix: that prefix counts as listed
    assert listed(graveler.list_objects(tree, "main", delimiter=b"/", after=b"a/2")) == ["b/", "c", "e/"]
    assert listed(graveler.list_objects(tree, "main", after=b"a/2")) == ["a/3", "b/y", "c", "e/1"]
    page = graveler.list_objects(tree, "main", limit=2)
    assert listed(page) == ["a/2", "a/3"] and page.has_more and page.next_after == b"a/3"
    rest = graveler.list_objects(tree, "main", after=page.next_after, limit=10)
    assert listed(rest) == ["b/y", "c", "e/1"] and not rest.has_more
    assert listed(list(graveler.iter_objects(tree, "main", delimiter=b"/"))) == ["a/", "b/", "c", "e/"]


def test_listing_skips_big_subtrees(graveler, repo, rec, listed):
    keys = [f"big/{i:04d}" for i in range(60)] + ["m", "z/1"]
    graveler.stage(repo, "main", [(k.encode(), rec(k)) for k in keys[:30]])
    graveler.commit(repo, "main", "half", "tester")
    graveler.stage(repo, "main", [(k.encode(), rec(k)) for k in keys[30:]])
    assert listed(graveler.list_objects(repo, "main", delimiter=b"/")) == ["big/", "m", "z/"]
    assert len(graveler.list_objects(repo, "main", prefix=b"big/", limit=1000).items) == 60


def test_listing_with_multibyte_delimiter_and_prefix(graveler, repo, rec, listed):
    for key in ["p::a::1", "p::a::2", "p::b", "q"]:
        graveler.set(repo, "main", rec(key))
    assert listed(graveler.list_objects(repo, "main", prefix=b"p::", delimiter=b"::")) == ["p::a::", "p::b"]


def _reference_listing(keys, prefix: bytes, delimiter: bytes, after: bytes, markers: bool):
    """S3-style listing of the sorted visible ``keys``, computed naively: (item, is a marker
    or an object), as ``list_objects`` answers it."""
    out: list[tuple[bytes, bool]] = []
    for key in sorted(keys):
        if not key.startswith(prefix):
            continue
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        item = key if cut < 0 else key[: cut + len(delimiter)]
        if out and out[-1][0] == item:
            continue
        if item <= after or (cut >= 0 and after.startswith(item)):
            continue
        out.append((item, cut < 0 or (markers and item == key)))
    return out


def test_listings_of_a_branch_and_of_its_commit_agree_with_a_naive_listing(graveler, repo, rec):
    """A commit is listed in one loop over its ranges, and a branch reads its committed layer
    straight on once its staging has nothing further: both answer what a naive listing does,
    markers (``a/``, a directory's marker object), paging and ``after`` included."""
    import random

    rng = random.Random(7)
    names = [f"{d}/" for d in "abc"] + [f"{d}/{f}" for d in "abcd" for f in ("1", "2", "x/", "x/1", "y/3")] + ["e", "z"]
    committed = set(rng.sample(names, 18))
    graveler.stage(repo, "main", [(k.encode(), rec(k)) for k in sorted(committed)])
    commit = graveler.commit(repo, "main", "base", "tester").id
    added = set(rng.sample(names, 6))
    deleted = set(rng.sample(sorted(committed - added), 5))
    graveler.stage(repo, "main", [(k.encode(), rec(k, "B")) for k in sorted(added)]
                   + [(k.encode(), None) for k in sorted(deleted)])
    views = {commit: committed, "main": (committed | added) - deleted}
    for ref, visible in views.items():
        keys = [k.encode() for k in visible]
        for prefix in (b"", b"a/", b"b/", b"b/x/", b"d/", b"q/"):
            for delimiter in (b"/", b""):
                for after in (b"", prefix + b"1", prefix + b"x/", prefix + b"x/1", b"zz"):
                    for markers in (False, True):
                        expected = _reference_listing(keys, prefix, delimiter, after, markers)
                        page = graveler.list_objects(repo, ref, prefix, delimiter, after, 1000, markers=markers)
                        got = [(key, record is not None) for key, record in page.items]
                        assert got == expected, (ref, prefix, delimiter, after, markers)
                        paged, cursor = [], after
                        while True:  # two at a time, each page resuming after the last item
                            page = graveler.list_objects(repo, ref, prefix, delimiter, cursor, 2, markers=markers)
                            paged += [(key, record is not None) for key, record in page.items]
                            if not page.has_more:
                                break
                            cursor = page.next_after
                        assert paged == expected, (ref, prefix, delimiter, after, markers)


def test_stage_with_a_key_twice_keeps_the_last(graveler, repo, rec):
    graveler.stage(repo, "main", [(b"k", rec("k", "1")), (b"j", rec("j")), (b"k", rec("k", "2"))])
    assert graveler.get(repo, "main", b"k") == rec("k", "2")
    graveler.stage(repo, "main", [(b"j", None), (b"j", rec("j", "again"))])
    assert graveler.get(repo, "main", b"j") == rec("j", "again")


def test_lookup_path_answers_a_file_a_directory_or_nothing_in_one_read(graveler, repo, rec):
    graveler.set(repo, "main", rec("data/file.csv", "committed"))
    graveler.set(repo, "main", rec("data/dir/", "marker"))
    graveler.set(repo, "main", rec("data/dir/inner.txt"))
    graveler.set(repo, "main", rec("data/bare/x.txt"))
    graveler.set(repo, "main", rec("data/dir-sibling.txt"))  # sorts between "dir" and "dir/"
    graveler.commit(repo, "main", "first", "tester")
    graveler.set(repo, "main", rec("data/staged.txt", "staged"))
    graveler.delete(repo, "main", b"data/bare/x.txt")  # the directory's last object: gone
    for ref in ("main", graveler.get_branch(repo, "main").commit_id):
        record, child = graveler.lookup_path(repo, ref, b"data/file.csv", b"data/file.csv/")
        assert record.key == b"data/file.csv" and child is None
        record, child = graveler.lookup_path(repo, ref, b"data/dir", b"data/dir/")
        assert record is None and child[0] == b"data/dir/" and child[1].key == b"data/dir/"  # its marker
        assert graveler.lookup_path(repo, ref, b"data/missing", b"data/missing/") == (None, None)
    record, child = graveler.lookup_path(repo, "main", b"data/staged.txt", b"data/staged.txt/")
    assert record.key == b"data/staged.txt" and child is None
    assert graveler.lookup_path(repo, "main", b"data/bare", b"data/bare/") == (None, None)  # deleted
    commit = graveler.get_branch(repo, "main").commit_id
    assert graveler.lookup_path(repo, commit, b"data/bare", b"data/bare/")[1][0] == b"data/bare/x.txt"
