"""Graveler.branch_changes: the change feed of a branch, on memory, SQLite and PostgreSQL.

``graveler`` plays the mount (its own writes are not reported); ``other_graveler`` is another
process on the same database, whose staged writes are."""

from __future__ import annotations

import pytest

from lakefuse.errors import InvalidArgument, RefNotFound, RepositoryNotFound
from lakefuse.graveler.model import BranchCursor


@pytest.fixture
def cursor(graveler, repo):
    """The feed of ``repo/main`` once read: nothing to report from here on."""
    cursor, keys = graveler.branch_changes(repo, "main", None)
    assert keys is None  # no cursor yet: anything may have changed
    return cursor


def test_first_call_gives_the_cursor_and_none(graveler, repo, cursor):
    branch = graveler.get_branch(repo, "main")
    assert cursor == BranchCursor(branch.commit_id, branch.staging_token, 0)
    assert graveler.branch_changes(repo, "main", cursor) == (cursor, ())


def test_another_writers_keys_are_reported_once(graveler, other_graveler, repo, cursor, rec):
    other_graveler.set(repo, "main", rec("a/x.csv"))
    other_graveler.stage(repo, "main", [(b"b", rec("b")), (b"c", rec("c"))])
    later, keys = graveler.branch_changes(repo, "main", cursor)
    assert keys == (b"a/x.csv", b"b", b"c")
    assert later == BranchCursor(cursor.commit_id, cursor.staging_token, 2)
    assert graveler.branch_changes(repo, "main", later) == (later, ())


def test_another_writers_delete_is_reported(graveler, other_graveler, repo, rec):
    graveler.set(repo, "main", rec("k"))
    cursor, _ = graveler.branch_changes(repo, "main", None)
    assert other_graveler.delete(repo, "main", b"k") is True
    cursor, keys = graveler.branch_changes(repo, "main", cursor)
    assert keys == (b"k",)
    assert other_graveler.delete(repo, "main", b"never-there") is False  # nothing staged: no change
    assert graveler.branch_changes(repo, "main", cursor) == (cursor, ())


def test_own_writes_are_not_reported(graveler, other_graveler, repo, cursor, rec):
    graveler.set(repo, "main", rec("mine"))
    graveler.stage(repo, "main", [(b"mine2", rec("mine2")), (b"mine", None)])
    later, keys = graveler.branch_changes(repo, "main", cursor)
    assert keys == ()
    assert later.version == 2  # the cursor still moves past them
    # the other process sees them
    assert other_graveler.branch_changes(repo, "main", cursor)[1] == (b"mine", b"mine2")


def test_commit_moves_the_cursor_and_means_anything(graveler, other_graveler, repo, cursor, rec):
    other_graveler.set(repo, "main", rec("x"))
    other_graveler.commit(repo, "main", "elsewhere", "someone")
    after_commit, keys = graveler.branch_changes(repo, "main", cursor)
    assert keys is None
    branch = graveler.get_branch(repo, "main")
    assert after_commit == BranchCursor(branch.commit_id, branch.staging_token, 0)
    assert after_commit.commit_id != cursor.commit_id
    assert graveler.branch_changes(repo, "main", after_commit) == (after_commit, ())
    # an own commit too: the mount's other caches follow the branch anyway
    graveler.set(repo, "main", rec("y"))
    graveler.commit(repo, "main", "here", "me")
    assert graveler.branch_changes(repo, "main", after_commit)[1] is None


def test_resets_merges_and_reverts_mean_anything(graveler, other_graveler, repo, rec):
    graveler.set(repo, "main", rec("keep/a"))
    graveler.set(repo, "main", rec("drop/b"))
    cursor, _ = graveler.branch_changes(repo, "main", None)
    other_graveler.reset(repo, "main", prefix=b"drop/")  # same token, but rows went unrecorded
    cursor, keys = graveler.branch_changes(repo, "main", cursor)
    assert keys is None
    other_graveler.reset(repo, "main")  # a fresh staging token
    cursor, keys = graveler.branch_changes(repo, "main", cursor)
    assert keys is None
    assert graveler.branch_changes(repo, "main", cursor) == (cursor, ())

    graveler.create_branch(repo, "feature", "main")
    graveler.set(repo, "feature", rec("f"))
    graveler.commit(repo, "feature", "f", "me")
    other_graveler.merge(repo, "main", "feature", "someone")
    cursor, keys = graveler.branch_changes(repo, "main", cursor)
    assert keys is None
    other_graveler.revert(repo, "main", "main", "someone", parent_number=1)
    assert graveler.branch_changes(repo, "main", cursor)[1] is None


def test_more_keys_than_the_limit_means_anything(graveler, other_graveler, repo, cursor, rec):
    other_graveler.stage(repo, "main", [(b"k%d" % i, rec(b"k%d" % i)) for i in range(5)])
    assert graveler.branch_changes(repo, "main", cursor, limit=5)[1] == tuple(b"k%d" % i for i in range(5))
    later, keys = graveler.branch_changes(repo, "main", cursor, limit=4)
    assert keys is None
    assert later.version == 1  # the cursor moves on: the caller forgot everything
    assert graveler.branch_changes(repo, "main", later, limit=4) == (later, ())


def test_branches_have_their_own_feeds(graveler, other_graveler, repo, cursor, rec):
    graveler.create_branch(repo, "dev", "main")
    dev, _ = graveler.branch_changes(repo, "dev", None)
    other_graveler.set(repo, "dev", rec("on-dev"))
    assert graveler.branch_changes(repo, "main", cursor) == (cursor, ())
    assert graveler.branch_changes(repo, "dev", dev)[1] == (b"on-dev",)
    # a cursor of another branch is not this branch's
    assert graveler.branch_changes(repo, "main", dev)[1] is None


def test_unknown_branch_and_repository(graveler, repo, cursor):
    with pytest.raises(RefNotFound):
        graveler.branch_changes(repo, "nope", None)
    with pytest.raises(RefNotFound):
        graveler.branch_changes(repo, "nope", cursor)
    with pytest.raises(RepositoryNotFound):
        graveler.branch_changes("no-repo", "main", None)
    with pytest.raises(InvalidArgument):
        graveler.branch_changes(repo, "main", cursor, limit=-1)
