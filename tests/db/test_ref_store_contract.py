"""RefStore contract: one suite run on MemoryRefStore, SqlRefStore/SQLite and SqlRefStore/PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from lakefuse.errors import AlreadyExists, ConcurrentUpdate, InvalidArgument, RefNotFound, RepositoryNotFound
from lakefuse.graveler.model import Commit, ValueRecord
from lakefuse.graveler.ports import Branch, Repository


def make_commit(commit_id: str, parents=(), generation: int = 1, **extra) -> Commit:
    return Commit(
        id=commit_id,
        metarange_id="mr-" + commit_id,
        parents=tuple(parents),
        message=extra.get("message", f"commit {commit_id}"),
        committer="tester",
        creation_date=1_700_000_000,
        metadata=extra.get("metadata", {"k": "v", "ünï": "çødé"}),
        generation=generation,
    )


def make_repo(refs, repo_id: str = "repo", branch: str = "main", commit_id: str = "c0") -> Branch:
    repo = Repository(id=repo_id, storage_namespace=f"local://ns/{repo_id}", default_branch=branch, creation_date=1)
    head = Branch(id=branch, commit_id=commit_id, staging_token=f"{repo_id}/{branch}/t0")
    refs.create_repository(repo, make_commit(commit_id, generation=1), head)
    return head


# repositories ---------------------------------------------------------------------------------
def test_create_get_list_repositories(refs):
    make_repo(refs, "beta")
    make_repo(refs, "alpha", branch="trunk")
    assert refs.get_repository("alpha") == Repository("alpha", "local://ns/alpha", "trunk", 1)
    assert [r.id for r in refs.list_repositories()] == ["alpha", "beta"]
    assert refs.get_branch("alpha", "trunk") == Branch("trunk", "c0", "alpha/trunk/t0", ())
    assert refs.get_commit("alpha", "c0") == make_commit("c0")


def test_create_repository_twice_is_already_exists(refs):
    make_repo(refs)
    with pytest.raises(AlreadyExists):
        make_repo(refs, commit_id="other")
    assert refs.get_branch("repo", "main").commit_id == "c0"  # the failed call changed nothing


def test_missing_repository_errors(refs):
    with pytest.raises(RepositoryNotFound):
        refs.get_repository("nope")
    with pytest.raises(RepositoryNotFound):
        refs.delete_repository("nope")
    with pytest.raises(RepositoryNotFound):
        refs.list_branches("nope")
    with pytest.raises(RepositoryNotFound):
        refs.list_tags("nope")
    with pytest.raises(RepositoryNotFound):
        refs.get_branch("nope", "main")
    with pytest.raises(RepositoryNotFound):
        refs.create_branch("nope", Branch("b", "c0", "t"))
    with pytest.raises(RepositoryNotFound):
        refs.create_tag("nope", "v1", "c0")
    with pytest.raises(RepositoryNotFound):
        refs.add_commit("nope", make_commit("c1"))
    with pytest.raises(RepositoryNotFound):
        refs.get_commit("nope", "c0")
    with pytest.raises(RepositoryNotFound):
        refs.find_commits_by_prefix("nope", "c")
    with pytest.raises(RepositoryNotFound):
        refs.list_commits("nope")
    assert refs.list_repositories() == []


def test_delete_repository_removes_refs_commits_and_staging(backend):
    refs, staging = backend.refs, backend.staging
    make_repo(refs, "doomed")
    make_repo(refs, "kept")
    refs.create_branch("doomed", Branch("dev", "c0", "doomed/dev/t1", ("doomed/dev/t0",)))
    refs.create_tag("doomed", "v1", "c0")
    record = ValueRecord(b"a", b"id", b"val")
    for token in ("doomed/main/t0", "doomed/dev/t1", "doomed/dev/t0", "kept/main/t0"):
        staging.set(token, b"a", record)

    refs.delete_repository("doomed")

    with pytest.raises(RepositoryNotFound):
        refs.get_repository("doomed")
    assert [r.id for r in refs.list_repositories()] == ["kept"]
    for token in ("doomed/main/t0", "doomed/dev/t1", "doomed/dev/t0"):
        assert staging.count(token) == 0
    assert staging.get("kept/main/t0", b"a") == record
    # The name is free again, with nothing left over.
    make_repo(refs, "doomed", commit_id="fresh")
    assert [b.id for b in refs.list_branches("doomed")] == ["main"]
    assert refs.list_tags("doomed") == []
    assert [c.id for c in refs.list_commits("doomed")] == ["fresh"]


# branches -------------------------------------------------------------------------------------
def test_create_list_delete_branches(backend):
    refs, staging = backend.refs, backend.staging
    make_repo(refs)
    refs.create_branch("repo", Branch("zeta", "c0", "repo/zeta/t"))
    refs.create_branch("repo", Branch("Alpha", "c0", "repo/Alpha/t", ("s2", "s1")))
    assert [b.id for b in refs.list_branches("repo")] == ["Alpha", "main", "zeta"]  # code-point order
    assert refs.get_branch("repo", "Alpha").sealed_tokens == ("s2", "s1")
    with pytest.raises(AlreadyExists):
        refs.create_branch("repo", Branch("zeta", "c0", "another"))

    staging.set("repo/zeta/t", b"k", None)
    staging.set("repo/main/t0", b"k", None)
    refs.delete_branch("repo", "zeta")
    with pytest.raises(RefNotFound):
        refs.get_branch("repo", "zeta")
    with pytest.raises(RefNotFound):
        refs.delete_branch("repo", "zeta")
    assert staging.count("repo/zeta/t") == 0  # its staged entries went with it
    assert staging.count("repo/main/t0") == 1
    assert [b.id for b in refs.list_branches("repo")] == ["Alpha", "main"]


def test_branches_are_per_repository(refs):
    make_repo(refs, "r1")
    make_repo(refs, "r2", commit_id="c9")
    assert refs.get_branch("r1", "main").commit_id == "c0"
    assert refs.get_branch("r2", "main").commit_id == "c9"
    with pytest.raises(RefNotFound):
        refs.get_branch("r1", "dev")


def test_seal_staging_token(refs):
    make_repo(refs)
    first = refs.seal_staging_token("repo", "main", "t1")
    assert first == Branch("main", "c0", "t1", ("repo/main/t0",))
    second = refs.seal_staging_token("repo", "main", "t2")
    assert second == Branch("main", "c0", "t2", ("t1", "repo/main/t0"))  # newest first
    assert refs.get_branch("repo", "main") == second
    with pytest.raises(RefNotFound):
        refs.seal_staging_token("repo", "nope", "t3")
    with pytest.raises(RepositoryNotFound):
        refs.seal_staging_token("nope", "main", "t3")


def test_compare_and_swap_success(refs):
    head = make_repo(refs)
    new = Branch("main", "c1", "t1", ())
    refs.compare_and_swap_branch("repo", "main", head, new)
    assert refs.get_branch("repo", "main") == new


def test_compare_and_swap_fails_on_any_difference(refs):
    head = make_repo(refs)
    sealed = refs.seal_staging_token("repo", "main", "t1")
    stale_variants = [
        head,  # staging token and sealed tokens moved
        Branch("main", "c-other", sealed.staging_token, sealed.sealed_tokens),
        Branch("main", sealed.commit_id, "t-other", sealed.sealed_tokens),
        Branch("main", sealed.commit_id, sealed.staging_token, ()),
        Branch("main", sealed.commit_id, sealed.staging_token, sealed.sealed_tokens + ("x",)),
    ]
    for stale in stale_variants:
        with pytest.raises(ConcurrentUpdate):
            refs.compare_and_swap_branch("repo", "main", stale, Branch("main", "lost", "lost", ()))
    assert refs.get_branch("repo", "main") == sealed  # no failed CAS wrote anything
    done = Branch("main", "c1", "t1", ())
    refs.compare_and_swap_branch("repo", "main", sealed, done)
    assert refs.get_branch("repo", "main") == done


def test_compare_and_swap_missing_branch(refs):
    head = make_repo(refs)
    with pytest.raises(RefNotFound):
        refs.compare_and_swap_branch("repo", "nope", head, head)
    with pytest.raises(RepositoryNotFound):
        refs.compare_and_swap_branch("nope", "main", head, head)


# staged writes checked against the branch ------------------------------------------------------
def test_stage_on_branch_writes_into_the_staging_token(backend):
    refs, staging = backend.refs, backend.staging
    head = make_repo(refs)
    items = [(b"b", ValueRecord(b"b", b"id1", b"v1")), (b"a", None), (b"b", ValueRecord(b"b", b"id2", b"v2"))]
    assert refs.stage_on_branch("repo", "main", head, items) is True
    assert list(staging.iterate(head.staging_token)) == [(b"a", None), (b"b", ValueRecord(b"b", b"id2", b"v2"))]
    assert refs.stage_on_branch("repo", "main", head, []) is True  # only the check
    assert staging.count(head.staging_token) == 2
    assert refs.get_branch("repo", "main") == head  # staging does not move the branch


def test_stage_on_branch_refuses_any_other_state(backend):
    refs, staging = backend.refs, backend.staging
    head = make_repo(refs)
    sealed = refs.seal_staging_token("repo", "main", "t1")
    stale_variants = [
        head,  # the token it names was sealed
        Branch("main", "c-other", sealed.staging_token, sealed.sealed_tokens),
        Branch("main", sealed.commit_id, sealed.staging_token, ()),
    ]
    read = []

    def items():
        read.append(True)
        yield b"k", ValueRecord(b"k", b"id", b"v")

    for stale in stale_variants:
        assert refs.stage_on_branch("repo", "main", stale, items()) is False
    assert refs.stage_on_branch("repo", "nope", sealed, items()) is False  # gone: the caller re-reads
    assert refs.stage_on_branch("nope", "main", sealed, items()) is False
    assert read == []  # items are read only once the check passed
    assert staging.count(head.staging_token) == 0 and staging.count("t1") == 0
    assert refs.stage_on_branch("repo", "main", sealed, items()) is True
    assert staging.get("t1", b"k") == ValueRecord(b"k", b"id", b"v")


def test_stage_on_branch_is_all_or_nothing(backend):
    refs, staging = backend.refs, backend.staging
    head = make_repo(refs)
    with pytest.raises(InvalidArgument):
        refs.stage_on_branch("repo", "main", head, [(b"a", ValueRecord(b"a", b"i", b"v")), (b"b", "not a record")])
    with pytest.raises(InvalidArgument):
        refs.stage_on_branch("repo", "main", head, [(b"a", None), ("text key", None)])
    assert staging.count(head.staging_token) == 0


@pytest.mark.parametrize("mover", ["seal", "swap"])
def test_branch_moves_wait_for_a_staged_write_in_progress(backend, mover):
    """A write that passed its check holds the branch: a seal (commit) or a swap (reset) from
    another connection waits until the write is in, so the token it seals or drops is complete."""
    refs, staging = backend.refs, backend.staging
    head = make_repo(refs)
    checked, release = threading.Event(), threading.Event()
    outcome = {}

    def slow_items():
        checked.set()
        release.wait(10)
        yield b"k", ValueRecord(b"k", b"id", b"v")

    def write():
        outcome["staged"] = refs.stage_on_branch("repo", "main", head, slow_items())

    def move():
        if mover == "seal":
            refs.seal_staging_token("repo", "main", "t1")
        else:
            refs.compare_and_swap_branch("repo", "main", head, Branch("main", "c0", "t1", ()))
        outcome["moved_with_row"] = staging.count(head.staging_token)

    writer = threading.Thread(target=write)
    mover_thread = threading.Thread(target=move)
    try:
        writer.start()
        assert checked.wait(10)
        mover_thread.start()
        mover_thread.join(0.5)
        assert mover_thread.is_alive(), f"the {mover} did not wait for the write in progress"
    finally:
        release.set()
        writer.join(10)
        mover_thread.join(10)
    assert outcome == {"staged": True, "moved_with_row": 1}
    assert refs.stage_on_branch("repo", "main", head, [(b"late", None)]) is False  # later writes see the move
    assert staging.get(head.staging_token, b"late") is ...


# tags -----------------------------------------------------------------------------------------
def test_tags(refs):
    make_repo(refs)
    refs.create_tag("repo", "v2", "c0")
    refs.create_tag("repo", "v1", "c0")
    assert refs.get_tag("repo", "v1") == "c0"
    assert refs.list_tags("repo") == [("v1", "c0"), ("v2", "c0")]
    with pytest.raises(AlreadyExists):
        refs.create_tag("repo", "v1", "c1")
    assert refs.get_tag("repo", "v1") == "c0"
    refs.create_tag("repo", "v1", "c1", force=True)
    assert refs.get_tag("repo", "v1") == "c1"
    refs.create_tag("repo", "v3", "c1", force=True)  # force on a new tag just creates it
    assert refs.get_tag("repo", "v3") == "c1"
    refs.delete_tag("repo", "v2")
    with pytest.raises(RefNotFound):
        refs.get_tag("repo", "v2")
    with pytest.raises(RefNotFound):
        refs.delete_tag("repo", "v2")
    assert refs.list_tags("repo") == [("v1", "c1"), ("v3", "c1")]


# commits --------------------------------------------------------------------------------------
def test_add_and_get_commit(refs):
    make_repo(refs)
    commit = make_commit("c1", parents=("c0", "cx"), generation=2, message="two\nlines", metadata={})
    refs.add_commit("repo", commit)
    refs.add_commit("repo", commit)  # identical again: no-op
    got = refs.get_commit("repo", "c1")
    assert got == commit
    assert got.parents == ("c0", "cx") and got.generation == 2 and dict(got.metadata) == {}
    with pytest.raises(AlreadyExists):
        refs.add_commit("repo", make_commit("c1", message="different content, same id"))
    with pytest.raises(RefNotFound):
        refs.get_commit("repo", "c404")
    assert sorted(c.id for c in refs.list_commits("repo")) == ["c0", "c1"]


def test_find_commits_by_prefix(refs):
    make_repo(refs, commit_id="0000")
    ids = ["abc123", "abc124", "abd000", "ab", "ABC999", "b00", "abc_x", "abc%y"]
    for commit_id in ids:
        refs.add_commit("repo", make_commit(commit_id))
    assert refs.find_commits_by_prefix("repo", "abc") == ["abc%y", "abc123", "abc124", "abc_x"]
    assert refs.find_commits_by_prefix("repo", "abc1") == ["abc123", "abc124"]
    assert refs.find_commits_by_prefix("repo", "abc", limit=2) == ["abc%y", "abc123"]
    assert refs.find_commits_by_prefix("repo", "ab") == ["ab", "abc%y", "abc123", "abc124", "abc_x", "abd000"]
    assert refs.find_commits_by_prefix("repo", "abc_") == ["abc_x"]  # LIKE wildcards are literal
    assert refs.find_commits_by_prefix("repo", "abc%") == ["abc%y"]
    assert refs.find_commits_by_prefix("repo", "ABC") == ["ABC999"]  # case-sensitive
    assert refs.find_commits_by_prefix("repo", "zz") == []
    assert len(refs.find_commits_by_prefix("repo", "", limit=100)) == len(ids) + 1


def test_commits_are_per_repository(refs):
    make_repo(refs, "r1")
    make_repo(refs, "r2")
    refs.add_commit("r1", make_commit("only-in-r1"))
    with pytest.raises(RefNotFound):
        refs.get_commit("r2", "only-in-r1")
    assert refs.find_commits_by_prefix("r2", "only") == []


def test_list_commits_across_pages(refs, monkeypatch):
    import lakefuse.db.refs

    monkeypatch.setattr(lakefuse.db.refs, "_COMMIT_PAGE", 4)  # the SQL store reads commits in pages
    make_repo(refs)
    expected = {"c0"} | {f"{i:04x}" for i in range(17)}
    for commit_id in sorted(expected - {"c0"}):
        refs.add_commit("repo", make_commit(commit_id))
    assert sorted(c.id for c in refs.list_commits("repo")) == sorted(expected)
