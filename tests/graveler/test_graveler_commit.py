"""Commit: procedure, no-changes rules, hooks, races with writers and with other commits."""

from __future__ import annotations

import threading
import time

import pytest

from lakefuse.errors import ConcurrentUpdate, HookFailed, InvalidArgument, NoChanges, ObjectNotFound
from lakefuse.graveler.changes import ChangeType
from lakefuse.graveler.commits import commit_id_of
from lakefuse.graveler.graveler import Graveler


def test_commit_moves_branch_and_clears_staging(graveler, graveler_stores, repo, rec):
    head = graveler.get_branch(repo, "main")
    graveler.set(repo, "main", rec("a"))
    graveler.set(repo, "main", rec("b"))
    commit = graveler.commit(repo, "main", "add a and b", "alice", {"ticket": "42"})
    assert commit.parents == (head.commit_id,)
    assert commit.message == "add a and b" and commit.committer == "alice"
    assert dict(commit.metadata) == {"ticket": "42"}
    assert commit.generation == 2
    branch = graveler.get_branch(repo, "main")
    assert branch.commit_id == commit.id and branch.sealed_tokens == ()
    assert branch.staging_token != head.staging_token
    assert graveler_stores.staging.count(head.staging_token) == 0  # committed token dropped
    assert list(graveler.diff_uncommitted(repo, "main")) == []
    assert graveler.get(repo, commit.id, b"a") == rec("a")
    stored = graveler_stores.refs.get_commit(repo, commit.id)
    assert stored.generation == 2
    assert commit.id == commit_id_of(
        commit.metarange_id, commit.parents, commit.message, commit.committer, commit.creation_date, commit.metadata
    )


def test_commit_id_is_a_digest_of_the_content():
    base = dict(metarange_id="m" * 64, parents=("p" * 64,), message="msg", committer="me", creation_date=5, metadata={"a": "1", "b": "2"})
    first = commit_id_of(**base)
    assert len(first) == 64 and int(first, 16) >= 0
    assert commit_id_of(**{**base, "metadata": {"b": "2", "a": "1"}}) == first  # order of metadata irrelevant
    for field, value in [("message", "msg2"), ("committer", "you"), ("creation_date", 6), ("metadata", {"a": "1"}),
                         ("parents", ()), ("metarange_id", "n" * 64)]:
        assert commit_id_of(**{**base, field: value}) != first


def test_commit_requires_message_and_changes(graveler, repo, rec):
    with pytest.raises(InvalidArgument):
        graveler.commit(repo, "main", "", "alice")
    with pytest.raises(InvalidArgument):
        graveler.commit(repo, "main", "   ", "alice")
    with pytest.raises(NoChanges):
        graveler.commit(repo, "main", "nothing", "alice")
    empty = graveler.commit(repo, "main", "nothing", "alice", allow_empty=True)
    assert empty.metarange_id == graveler.get_commit(repo, empty.parents[0]).metarange_id
    with pytest.raises(InvalidArgument):
        graveler.commit(repo, "main", "bad metadata", "alice", {"k": 1}, allow_empty=True)


def test_staged_entries_equal_to_the_head_are_no_change(graveler, repo, rec):
    graveler.set(repo, "main", rec("a", "A"))
    graveler.commit(repo, "main", "c1", "alice")
    # same content under another physical address / mtime: same identity
    graveler.set(repo, "main", rec("a", "A", physical_address="data/elsewhere", mtime=1))
    graveler.delete(repo, "main", b"never-existed")
    assert list(graveler.diff_uncommitted(repo, "main")) == []
    with pytest.raises(NoChanges):
        graveler.commit(repo, "main", "same", "alice")
    # the useless sealed token was dropped and nothing is left staged
    assert graveler.get_branch(repo, "main").sealed_tokens == ()
    # a staged-then-deleted new key is no change either
    graveler.set(repo, "main", rec("tmp"))
    graveler.delete(repo, "main", b"tmp")
    with pytest.raises(NoChanges):
        graveler.commit(repo, "main", "same", "alice")


def test_staged_diff_types(graveler, repo, rec):
    graveler.set(repo, "main", rec("changed", "A"))
    graveler.set(repo, "main", rec("removed", "A"))
    graveler.commit(repo, "main", "c1", "alice")
    graveler.set(repo, "main", rec("changed", "B"))
    graveler.delete(repo, "main", b"removed")
    graveler.set(repo, "main", rec("added", "A"))
    changes = list(graveler.diff_uncommitted(repo, "main"))
    assert [(c.key, c.type) for c in changes] == [
        (b"added", ChangeType.ADDED),
        (b"changed", ChangeType.CHANGED),
        (b"removed", ChangeType.REMOVED),
    ]
    assert changes[1].left == rec("changed", "A") and changes[1].right == rec("changed", "B")
    assert [c.key for c in graveler.diff_uncommitted(repo, "main", prefix=b"ch")] == [b"changed"]
    assert graveler.has_uncommitted(repo, "main")


def test_diff_between_refs(graveler, repo, rec):
    graveler.stage(repo, "main", [(f"k{i:03d}".encode(), rec(f"k{i:03d}")) for i in range(300)])
    first = graveler.commit(repo, "main", "c1", "alice")
    graveler.set(repo, "main", rec("k100", "B"))
    graveler.delete(repo, "main", b"k200")
    graveler.set(repo, "main", rec("new"))
    second = graveler.commit(repo, "main", "c2", "alice")
    changes = list(graveler.diff(repo, first.id, "main"))
    assert [(c.key, c.type) for c in changes] == [
        (b"k100", ChangeType.CHANGED),
        (b"k200", ChangeType.REMOVED),
        (b"new", ChangeType.ADDED),
    ]
    assert [c.key for c in graveler.diff(repo, "main", "main~1")] == [b"k100", b"k200", b"new"]
    assert [c.type for c in graveler.diff(repo, "main", "main~1")][2] is ChangeType.REMOVED
    assert list(graveler.diff(repo, second.id, "main")) == []
    assert [c.key for c in graveler.diff(repo, first.id, second.id, prefix=b"k2")] == [b"k200"]


class RecordingHooks:
    def __init__(self, fail_on: str | None = None, error: Exception | None = None):
        self.events = []
        self.fail_on = fail_on
        self.error = error or HookFailed("rejected by test hook")

    def _record(self, name, event):
        self.events.append((name, event))
        if name == self.fail_on:
            raise self.error

    def pre_commit(self, event):
        self.seen_changes = [(c.key, c.type) for c in event.changes()]
        self.seen_a = event.view.get(b"a")  # the view is valid while the hook runs
        self._record("pre_commit", event)

    def post_commit(self, event):
        self._record("post_commit", event)

    def pre_merge(self, event):
        self._record("pre_merge", event)

    def post_merge(self, event):
        self._record("post_merge", event)


@pytest.fixture
def hooked(graveler_stores, committed_for, namespace):
    def make(hooks):
        g = Graveler(graveler_stores.refs, graveler_stores.staging, committed_for, hooks)
        if not any(r.id == "hooked" for r in g.list_repositories()):
            g.create_repository("hooked", namespace)
        return g

    return make


def test_pre_commit_hook_sees_the_sealed_changes(hooked, rec):
    hooks = RecordingHooks()
    graveler = hooked(hooks)
    graveler.set("hooked", "main", rec("a", "A"))
    commit = graveler.commit("hooked", "main", "msg", "alice", {"m": "1"})
    (pre_name, pre), (post_name, post) = hooks.events
    assert (pre_name, post_name) == ("pre_commit", "post_commit")
    assert pre.event_type == "pre-commit" and pre.repository_id == "hooked" and pre.branch_id == "main"
    assert pre.source_ref == "main" and pre.commit_message == "msg" and pre.committer == "alice"
    assert dict(pre.commit_metadata) == {"m": "1"} and pre.commit_id is None
    assert hooks.seen_changes == [(b"a", ChangeType.ADDED)]
    assert hooks.seen_a == rec("a", "A")
    assert post.commit == commit and post.commit_id == commit.id
    assert [c.key for c in post.changes()] == [b"a"]


@pytest.mark.parametrize("error", [HookFailed("no"), RuntimeError("boom")])
def test_failing_pre_commit_hook_aborts_and_keeps_changes(hooked, rec, error):
    hooks = RecordingHooks(fail_on="pre_commit", error=error)
    graveler = hooked(hooks)
    head = graveler.get_branch("hooked", "main").commit_id
    graveler.set("hooked", "main", rec("a"))
    with pytest.raises(HookFailed):
        graveler.commit("hooked", "main", "msg", "alice")
    assert graveler.get_branch("hooked", "main").commit_id == head
    assert graveler.get("hooked", "main", b"a") == rec("a")
    assert [c.key for c in graveler.diff_uncommitted("hooked", "main")] == [b"a"]
    assert [name for name, _ in hooks.events] == ["pre_commit"]
    hooks.fail_on = None
    commit = graveler.commit("hooked", "main", "msg", "alice")
    assert graveler.view("hooked", commit.id).get(b"a") == rec("a")


def test_failing_post_commit_hook_is_only_logged(hooked, rec, caplog):
    graveler = hooked(RecordingHooks(fail_on="post_commit", error=RuntimeError("post boom")))
    graveler.set("hooked", "main", rec("a"))
    commit = graveler.commit("hooked", "main", "msg", "alice")
    assert graveler.get_branch("hooked", "main").commit_id == commit.id
    assert "post boom" in caplog.text


def test_lost_race_raises_concurrent_update_and_keeps_changes(graveler, graveler_stores, repo, rec):
    graveler.set(repo, "main", rec("a"))

    class MoveBranchHook:
        def pre_commit(self, event):
            # another commit lands while this one is being prepared
            graveler_stores.refs.seal_staging_token(repo, "main", "intruder-token")

    graveler.hooks = MoveBranchHook()
    with pytest.raises(ConcurrentUpdate):
        graveler.commit(repo, "main", "msg", "alice")
    graveler.hooks = None
    assert graveler.get(repo, "main", b"a") == rec("a")  # sealed tokens stay visible
    commit = graveler.commit(repo, "main", "retry", "alice")
    assert graveler.view(repo, commit.id).get(b"a") == rec("a")
    assert graveler.get_branch(repo, "main").sealed_tokens == ()


@pytest.mark.parametrize("committers", [1, 2])
def test_writes_during_commits_are_never_lost(graveler, repo, rec, committers):
    """One thread writes keys (some then deleted) while another commits repeatedly: in the end
    every write is either committed or still staged, the branch shows exactly what was
    written, and a last commit contains all of it."""
    total = 150
    stop = threading.Event()
    errors = []

    def writer():
        try:
            started.wait(10)
            for i in range(total):
                if i % 5 == 0:
                    time.sleep(0.002)  # let commits interleave with the writes
                if i == total // 2:  # make sure at least one commit lands mid-stream
                    deadline = time.monotonic() + 10
                    while not commits and time.monotonic() < deadline:
                        time.sleep(0.005)
                graveler.set(repo, "main", rec(f"w/{i:04d}", f"v{i}"))
                if i % 10 == 9:
                    graveler.stage(repo, "main", [(b"pair/%04d/a" % i, rec(f"pair/{i:04d}/a")),
                                                  (b"pair/%04d/b" % i, rec(f"pair/{i:04d}/b"))])
                if i % 7 == 6:
                    assert graveler.delete(repo, "main", f"w/{i - 3:04d}".encode())
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            stop.set()

    commits = []
    started = threading.Event()

    def committer():
        started.set()
        deadline = time.monotonic() + 30
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                commits.append(graveler.commit(repo, "main", f"c{len(commits)}", "bot"))
            except (NoChanges, ConcurrentUpdate):
                pass

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=committer) for _ in range(committers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors
    deleted = {f"w/{i - 3:04d}" for i in range(total) if i % 7 == 6}
    expected = {f"w/{i:04d}" for i in range(total)} - deleted
    expected |= {f"pair/{i:04d}/{s}" for i in range(total) if i % 10 == 9 for s in "ab"}
    visible = {key.decode() for key, _ in graveler.iter_objects(repo, "main")}
    assert visible == expected
    for commit in commits:  # each commit holds whole pairs: never half of a multi-key write
        keys = {r.key for r in graveler.view(repo, commit.id).iterate(b"pair/") if r.key.startswith(b"pair/")}
        assert all((k[:-1] + b"a" in keys) and (k[:-1] + b"b" in keys) for k in keys)
    try:
        graveler.commit(repo, "main", "final", "bot")
    except NoChanges:
        pass
    final = {r.key.decode() for r in graveler.view(repo, "main~0").iterate()}
    assert final == expected
    assert list(graveler.diff_uncommitted(repo, "main")) == []
    for key in expected:
        assert graveler.get(repo, "main", key.encode()).key == key.encode()
    assert len(commits) >= 1  # at least one commit interleaved with the writes


def test_commit_on_missing_branch(graveler, repo):
    with pytest.raises(Exception) as info:
        graveler.commit(repo, "nope", "msg", "alice")
    assert type(info.value).__name__ == "RefNotFound"
    with pytest.raises(ObjectNotFound):
        graveler.get(repo, "main", b"x")


def test_read_racing_a_commit_retries_instead_of_answering_stale(graveler_stores, committed_for, namespace, rec):
    """A commit drops the staging rows a read is about to look at: the read notices that the
    branch moved and answers from the new head, not from the old one."""

    class RacingStaging:
        def __init__(self, inner):
            self.inner = inner
            self.race = None

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def get(self, token, key):
            if self.race is not None:
                race, self.race = self.race, None
                race()  # the commit lands between reading the branch and reading its token
            return self.inner.get(token, key)

    staging = RacingStaging(graveler_stores.staging)
    graveler = Graveler(graveler_stores.refs, staging, committed_for)
    graveler.create_repository("racy", namespace)
    graveler.set("racy", "main", rec("k", "A"))
    graveler.commit("racy", "main", "c1", "tester")
    graveler.set("racy", "main", rec("k", "B"))
    staging.race = lambda: graveler.commit("racy", "main", "c2", "tester")
    assert graveler.get("racy", "main", b"k") == rec("k", "B")
    graveler.set("racy", "main", rec("new"))
    staging.race = lambda: graveler.commit("racy", "main", "c3", "tester")
    assert graveler.delete("racy", "main", b"new") is True
    with pytest.raises(ObjectNotFound):
        graveler.get("racy", "main", b"new")


def test_commit_cost_follows_the_change(graveler, repo, namespace, rec):
    graveler.stage(repo, "main", [(b"k%05d" % i, rec(b"k%05d" % i)) for i in range(1500)])
    first = graveler.commit(repo, "main", "many", "tester")
    store = graveler.committed_store(namespace)
    assert len(store.ranges(first.metarange_id)) > 5
    graveler.set(repo, "main", rec(b"k00700", "changed"))
    second = graveler.commit(repo, "main", "one change", "tester")
    assert len(store.last_written) == 2  # one range and the metarange
    old_ids = {r.id for r in store.ranges(first.metarange_id)}
    assert sum(r.id not in old_ids for r in store.ranges(second.metarange_id)) == 1


def test_commit_metarange_moves_the_branch_only_from_the_state_it_was_built_on(graveler, repo, rec):
    graveler.set(repo, "main", rec("a"))
    built_on = graveler.commit(repo, "main", "a", "alice")
    graveler.set(repo, "main", rec("staged"))
    state = graveler.get_branch(repo, "main")
    imported = graveler.commit_metarange(repo, state, built_on.metarange_id, "import", "bulk", {"source": "s3://x"})
    assert imported.parents == (built_on.id,) and dict(imported.metadata) == {"source": "s3://x"}
    after = graveler.get_branch(repo, "main")
    assert after.commit_id == imported.id and after.staging_token == state.staging_token
    assert graveler.get(repo, "main", b"staged") == rec("staged")  # the staging area is untouched
    with pytest.raises(ConcurrentUpdate):  # built on a state the branch has left
        graveler.commit_metarange(repo, state, built_on.metarange_id, "again", "bulk")
    assert graveler.get_branch(repo, "main").commit_id == imported.id
