"""Merge (the ten-row table, strategies, merge base, refusals) and revert."""

from __future__ import annotations

import pytest

from lakefuse.errors import DirtyBranch, HookFailed, InvalidArgument, MergeConflict, NoChanges, RefNotFound

A, B, C, X = "A", "B", "C", None

#: (base, source, dest, result); "conflict" fails the merge without a strategy
TABLE = [
    (A, A, A, A),  # unchanged file
    (A, B, B, B),  # changed on both sides the same way
    (A, B, C, "conflict"),  # changed on both sides differently
    (A, A, B, B),  # changed only in dest
    (A, B, A, B),  # changed only in source
    (A, X, X, X),  # deleted on both sides
    (A, B, X, "conflict"),  # changed in source, deleted in dest
    (A, X, B, "conflict"),  # deleted in source, changed in dest
    (A, A, X, X),  # deleted in dest
    (A, X, A, X),  # deleted in source
]
FILLER = [f"filler/{i:04d}" for i in range(200)]  # enough keys for many ranges


def _write(graveler, repo, rec, branch, key, content):
    if content is None:
        assert graveler.delete(repo, branch, key.encode())
    else:
        graveler.set(repo, branch, rec(key, content))


def _content_of(graveler, ref, key):
    return graveler.view("repo1", ref).get(key.encode())


def setup_rows(graveler, repo, rec, rows, busy_side=None):
    """Base commit with each row's key at its base content, then source and dest branches
    with their contents committed.  Keys are ``row<N>``.  ``busy_side`` ("source" / "main")
    also changes every filler key there, so that side has more changed ranges (the merge is
    then driven by the other side)."""
    graveler.stage(repo, "main", [(k.encode(), rec(k)) for k in FILLER])
    for index, (base, _source, _dest, _result) in rows:
        if base is not None:
            graveler.set(repo, "main", rec(f"row{index}", base))
    graveler.commit(repo, "main", "base", "tester")
    graveler.create_branch(repo, "source", "main")
    for index, (base, source, dest, _result) in rows:
        for branch, content in (("source", source), ("main", dest)):
            if content != base:
                _write(graveler, repo, rec, branch, f"row{index}", content)
    if busy_side:
        graveler.stage(repo, busy_side, [(k.encode(), rec(k, busy_side)) for k in FILLER])
    graveler.commit(repo, "source", "source changes", "tester")
    try:
        graveler.commit(repo, "main", "dest changes", "tester")
    except NoChanges:
        pass


def _expect(graveler, rec, rows, ref="main"):
    for index, (_base, _source, _dest, result) in rows:
        expected = None if result is None else rec(f"row{index}", result)
        assert _content_of(graveler, ref, f"row{index}") == expected, f"row {index}"


CLEAN_ROWS = [(i, row) for i, row in enumerate(TABLE, 1) if row[3] != "conflict"]
CONFLICT_ROWS = [(i, row) for i, row in enumerate(TABLE, 1) if row[3] == "conflict"]


def test_merge_table_rows_without_conflict(graveler, repo, rec):
    setup_rows(graveler, repo, rec, CLEAN_ROWS)
    dest_head = graveler.get_branch(repo, "main").commit_id
    source_head = graveler.get_branch(repo, "source").commit_id
    commit = graveler.merge(repo, "main", "source", "merger")
    assert commit.parents == (dest_head, source_head)
    assert commit.message == "Merge 'source' into 'main'"
    assert graveler.get_branch(repo, "main").commit_id == commit.id
    _expect(graveler, rec, CLEAN_ROWS)
    assert _content_of(graveler, "main", FILLER[77]) == rec(FILLER[77])


@pytest.mark.parametrize("index,row", CONFLICT_ROWS, ids=[f"row{i}" for i, _ in CONFLICT_ROWS])
def test_merge_table_conflict_rows(graveler, repo, rec, index, row):
    setup_rows(graveler, repo, rec, [(index, row)])
    head = graveler.get_branch(repo, "main")
    with pytest.raises(MergeConflict) as info:
        graveler.merge(repo, "main", "source", "merger")
    assert info.value.conflicts == [f"row{index}"]
    assert f"row{index}" in str(info.value)
    assert graveler.get_branch(repo, "main") == head  # nothing written


@pytest.mark.parametrize("busy_side", [None, "source", "main"])
@pytest.mark.parametrize("strategy", ["source-wins", "dest-wins"])
def test_merge_strategies_resolve_every_conflict(graveler, repo, rec, strategy, busy_side, monkeypatch):
    from lakefuse.graveler import merge as merge_module

    rows = [(i, row) for i, row in enumerate(TABLE, 1)]
    setup_rows(graveler, repo, rec, rows, busy_side)
    drivers = []
    real = merge_module.three_way_changes
    monkeypatch.setattr(merge_module, "three_way_changes",
                        lambda diff, get, wins, conflicts: drivers.append(wins) or real(diff, get, wins, conflicts))
    graveler.merge(repo, "main", "source", "merger", strategy=strategy)
    side = 1 if strategy == "source-wins" else 2
    resolved = [(i, (b, s, d, (s, d)[side - 1] if r == "conflict" else r)) for i, (b, s, d, r) in rows]
    _expect(graveler, rec, resolved)
    if busy_side:
        # the quiet side drives: driver_wins is True iff the strategy favours the driver
        driver = "dest" if busy_side == "source" else "source"
        assert drivers == [strategy.startswith(driver)]
        expected_filler = rec(FILLER[3], busy_side)
    else:
        expected_filler = rec(FILLER[3])
    assert _content_of(graveler, "main", FILLER[3]) == expected_filler


@pytest.mark.parametrize("busy_side", ["source", "main"])
def test_merge_table_is_the_same_whichever_side_drives(graveler, repo, rec, busy_side):
    setup_rows(graveler, repo, rec, CLEAN_ROWS, busy_side)
    graveler.merge(repo, "main", "source", "merger")
    _expect(graveler, rec, CLEAN_ROWS)


def test_unknown_strategy(graveler, repo):
    with pytest.raises(InvalidArgument):
        graveler.merge(repo, "main", "main", "merger", strategy="ours")


def test_keys_added_on_both_sides(graveler, repo, rec):
    graveler.create_branch(repo, "source", "main")
    graveler.set(repo, "source", rec("same", "N"))
    graveler.set(repo, "source", rec("differ", "S"))
    graveler.commit(repo, "source", "s", "tester")
    graveler.set(repo, "main", rec("same", "N"))
    graveler.set(repo, "main", rec("differ", "D"))
    graveler.commit(repo, "main", "d", "tester")
    with pytest.raises(MergeConflict) as info:
        graveler.merge(repo, "main", "source", "merger")
    assert info.value.conflicts == ["differ"]


def test_merge_into_unchanged_dest_still_makes_a_merge_commit(graveler, repo, rec):
    graveler.create_branch(repo, "feature", "main")
    graveler.set(repo, "feature", rec("f"))
    feature = graveler.commit(repo, "feature", "feature work", "tester")
    main_head = graveler.get_branch(repo, "main").commit_id
    commit = graveler.merge(repo, "main", "feature", "merger", message="ship it", metadata={"pr": "7"})
    assert commit.parents == (main_head, feature.id)  # no fast-forward
    assert commit.message == "ship it" and dict(commit.metadata) == {"pr": "7"}
    assert commit.metarange_id == feature.metarange_id  # dest unchanged since base: source content
    assert graveler.get(repo, "main", b"f") == rec("f")
    # merging again: the source is contained now
    with pytest.raises(NoChanges):
        graveler.merge(repo, "main", "feature", "merger")
    with pytest.raises(NoChanges):
        graveler.merge(repo, "main", "main~1", "merger")


def test_merge_refusals(graveler, repo, rec):
    graveler.create_branch(repo, "feature", "main")
    graveler.set(repo, "feature", rec("f"))
    graveler.commit(repo, "feature", "feature work", "tester")
    graveler.set(repo, "main", rec("dirty"))
    with pytest.raises(DirtyBranch):
        graveler.merge(repo, "main", "feature", "merger")
    graveler.reset(repo, "main")
    with pytest.raises(RefNotFound):
        graveler.merge(repo, "main", "nope", "merger")
    graveler.create_tag(repo, "v1", "main")
    with pytest.raises(RefNotFound):
        graveler.merge(repo, "v1", "feature", "merger")
    with pytest.raises(NoChanges):
        graveler.merge(repo, "feature", "main", "merger")  # main is an ancestor of feature
    # a merge from a tag works as from any ref
    graveler.create_tag(repo, "feature-done", "feature")
    commit = graveler.merge(repo, "main", "feature-done", "merger")
    assert commit.message == "Merge 'feature-done' into 'main'"


def test_pre_merge_hook_can_abort(graveler, repo, rec):
    graveler.create_branch(repo, "feature", "main")
    graveler.set(repo, "feature", rec("f"))
    graveler.commit(repo, "feature", "feature work", "tester")
    seen = []

    class Hooks:
        def pre_merge(self, event):
            seen.append((event.event_type, event.source_ref, event.branch_id, [c.key for c in event.changes()],
                         event.view.get(b"f")))
            raise HookFailed("not today")

        def post_merge(self, event):
            seen.append(("post", event.commit_id))

    graveler.hooks = Hooks()
    head = graveler.get_branch(repo, "main")
    with pytest.raises(HookFailed):
        graveler.merge(repo, "main", "feature", "merger")
    assert graveler.get_branch(repo, "main") == head
    assert seen == [("pre-merge", "feature", "main", [b"f"], rec("f"))]
    Hooks.pre_merge = lambda self, event: None
    commit = graveler.merge(repo, "main", "feature", "merger")
    assert seen[-1] == ("post", commit.id)


def test_criss_cross_merge_base(graveler, repo, rec):
    graveler.set(repo, "main", rec("base"))
    graveler.commit(repo, "main", "c1", "tester")
    graveler.create_branch(repo, "a", "main")
    graveler.create_branch(repo, "b", "main")
    graveler.set(repo, "a", rec("a1"))
    a1 = graveler.commit(repo, "a", "a1", "tester")
    graveler.set(repo, "b", rec("b1"))
    b1 = graveler.commit(repo, "b", "b1", "tester")
    a2 = graveler.merge(repo, "a", "b", "tester")  # parents a1, b1
    b2 = graveler.merge(repo, "b", a1.id, "tester")  # parents b1, a1
    bases = graveler.commits.merge_bases(repo, a2, b2)
    assert {c.id for c in bases} == {a1.id, b1.id}
    chosen = graveler.merge_base(repo, "a", "b")
    assert chosen.id in {a1.id, b1.id}
    assert graveler.merge_base(repo, "b", "a").id == chosen.id  # deterministic, symmetric
    # the criss-cross merge itself goes through (both sides hold the same content)
    graveler.set(repo, "b", rec("b3"))
    graveler.commit(repo, "b", "b3", "tester")
    merged = graveler.merge(repo, "a", "b", "tester")
    assert {r.key for r in graveler.view(repo, merged.id).iterate()} == {b"base", b"a1", b"b1", b"b3"}


def test_revert_a_commit(graveler, repo, rec):
    graveler.set(repo, "main", rec("keep"))
    graveler.set(repo, "main", rec("edit", "A"))
    graveler.set(repo, "main", rec("gone"))
    graveler.commit(repo, "main", "c1", "tester")
    graveler.set(repo, "main", rec("edit", "B"))
    graveler.delete(repo, "main", b"gone")
    graveler.set(repo, "main", rec("added"))
    bad = graveler.commit(repo, "main", "bad change", "tester")
    graveler.set(repo, "main", rec("later"))
    graveler.commit(repo, "main", "later", "tester")
    head = graveler.get_branch(repo, "main").commit_id
    revert = graveler.revert(repo, "main", bad.id, "tester")
    assert revert.parents == (head,)
    assert revert.message.startswith('Revert "bad change"')
    keys = {r.key: r for r in graveler.view(repo, "main").iterate()}
    assert set(keys) == {b"keep", b"edit", b"gone", b"later"}
    assert keys[b"edit"] == rec("edit", "A")
    with pytest.raises(NoChanges):
        graveler.revert(repo, "main", bad.id, "tester")  # already reverted
    with pytest.raises(InvalidArgument):
        graveler.revert(repo, "main", "main~4", "tester")  # the initial commit


def test_revert_conflict_and_dirty(graveler, repo, rec):
    graveler.set(repo, "main", rec("k", "A"))
    graveler.commit(repo, "main", "c1", "tester")
    graveler.set(repo, "main", rec("k", "B"))
    change = graveler.commit(repo, "main", "to B", "tester")
    graveler.set(repo, "main", rec("k", "C"))
    graveler.commit(repo, "main", "to C", "tester")
    head = graveler.get_branch(repo, "main")
    with pytest.raises(MergeConflict) as info:
        graveler.revert(repo, "main", change.id, "tester")
    assert info.value.conflicts == ["k"]
    assert graveler.get_branch(repo, "main") == head
    graveler.set(repo, "main", rec("x"))
    with pytest.raises(DirtyBranch):
        graveler.revert(repo, "main", "main", "tester")


def test_revert_merge_commit_needs_parent_number(graveler, repo, rec):
    graveler.set(repo, "main", rec("m"))
    graveler.commit(repo, "main", "c1", "tester")
    graveler.create_branch(repo, "feature", "main")
    graveler.set(repo, "feature", rec("f"))
    graveler.commit(repo, "feature", "f", "tester")
    graveler.set(repo, "main", rec("m2"))
    graveler.commit(repo, "main", "m2", "tester")
    merge = graveler.merge(repo, "main", "feature", "tester")
    with pytest.raises(InvalidArgument, match="merge commit"):
        graveler.revert(repo, "main", merge.id, "tester")
    with pytest.raises(InvalidArgument):
        graveler.revert(repo, "main", merge.id, "tester", parent_number=3)
    # -m 1: undo what the merge brought from the feature branch
    graveler.revert(repo, "main", merge.id, "tester", parent_number=1)
    assert {r.key for r in graveler.view(repo, "main").iterate()} == {b"m", b"m2"}
    graveler.reset(repo, "main")
    # -m 2 on the merge (relative to the feature side): undo what main had added (m2)
    graveler.revert(repo, "main", merge.id, "tester", parent_number=2, allow_empty=True)
    assert {r.key for r in graveler.view(repo, "main").iterate()} == {b"m"}


def test_no_op_staged_entries_do_not_shadow_the_merge(graveler, graveler_stores, repo, rec):
    graveler.set(repo, "main", rec("k", "A"))
    graveler.commit(repo, "main", "c1", "tester")
    graveler.create_branch(repo, "feature", "main")
    graveler.set(repo, "feature", rec("k", "B"))
    graveler.set(repo, "feature", rec("added"))
    graveler.commit(repo, "feature", "f", "tester")
    # main: a re-upload identical to its head and a tombstone of a key that never existed there
    graveler.set(repo, "main", rec("k", "A", physical_address="data/again"))
    graveler.set(repo, "main", rec("added", "tmp"))
    graveler.delete(repo, "main", b"added")
    assert not graveler.has_uncommitted(repo, "main")
    before = graveler.get_branch(repo, "main")
    graveler.merge(repo, "main", "feature", "tester")
    assert graveler.get(repo, "main", b"k") == rec("k", "B")
    assert graveler.get(repo, "main", b"added") == rec("added")
    after = graveler.get_branch(repo, "main")
    assert after.sealed_tokens == () and graveler_stores.staging.count(before.staging_token) == 0
    graveler.set(repo, "main", rec("after-merge"))  # the branch stays writable
    assert graveler.get(repo, "main", b"after-merge") == rec("after-merge")
