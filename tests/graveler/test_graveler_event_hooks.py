"""The core's hooks interface for every lakeFS event it has an operation for (issue 15): which
hook methods each operation calls, in which order, with which ``HookEvent`` fields, and that a
failing pre hook leaves nothing changed while a failing post hook only gets logged."""

from __future__ import annotations

import pytest

from lakefuse.errors import AlreadyExists, HookFailed, RefNotFound
from lakefuse.graveler.changes import ChangeType
from lakefuse.graveler.graveler import Graveler

REPO = "hooked"


class Recorder:
    """A hooks object with every method: records ``(method, event)`` and, in ``changes``, what
    ``event.changes()`` listed while the hook ran (a pre-commit view is valid only then);
    ``fail_on`` raises."""

    def __init__(self, fail_on: str | None = None, error: Exception | None = None):
        self.calls: list[tuple[str, object]] = []
        self.changes: dict[str, list] = {}
        self.fail_on = fail_on
        self.error = error or HookFailed("rejected by test hook")

    def __getattr__(self, name: str):
        if not (name.startswith(("pre_", "post_")) or name == "prepare_commit"):
            raise AttributeError(name)

        def hook(event):
            self.calls.append((name, event))
            self.changes[name] = [(c.key, c.type) for c in event.changes()]
            if name == self.fail_on:
                raise self.error

        return hook

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def event(self, name: str):
        (event,) = [event for called, event in self.calls if called == name]
        return event


@pytest.fixture
def core(graveler_stores, committed_for, namespace, rec):
    """``(graveler, recorder)``: repository ``hooked`` with one commit on main."""
    recorder = Recorder()
    graveler = Graveler(graveler_stores.refs, graveler_stores.staging, committed_for, recorder)
    graveler.create_repository(REPO, namespace)
    graveler.set(REPO, "main", rec("a", "A"))
    graveler.commit(REPO, "main", "first", "alice")
    recorder.calls.clear()
    return graveler, recorder


def test_commit_fires_prepare_commit_first_on_the_unsealed_branch(core, rec):
    graveler, recorder = core
    graveler.set(REPO, "main", rec("b", "B"))
    before = graveler.get_branch(REPO, "main")
    commit = graveler.commit(REPO, "main", "second", "alice", {"m": "1"})
    assert recorder.names() == ["prepare_commit", "pre_commit", "post_commit"]
    prepare = recorder.event("prepare_commit")
    assert (prepare.event_type, prepare.branch_id, prepare.source_ref) == ("prepare-commit", "main", "main")
    assert (prepare.commit_message, prepare.committer, dict(prepare.commit_metadata)) == ("second", "alice", {"m": "1"})
    assert prepare.commit_id is None and prepare.tag_id is None
    assert recorder.changes["prepare_commit"] == [(b"b", ChangeType.ADDED)]
    assert recorder.event("post_commit").commit_id == commit.id
    assert before.sealed_tokens == ()


@pytest.mark.parametrize("error", [HookFailed("no"), RuntimeError("boom")])
def test_failing_prepare_commit_seals_nothing(core, rec, error):
    graveler, recorder = core
    recorder.fail_on, recorder.error = "prepare_commit", error
    graveler.set(REPO, "main", rec("b", "B"))
    before = graveler.get_branch(REPO, "main")
    expected = "prepare-commit hook failed: boom" if isinstance(error, RuntimeError) else "no"
    with pytest.raises(HookFailed, match=expected):
        graveler.commit(REPO, "main", "second", "alice")
    assert graveler.get_branch(REPO, "main") == before  # same head, same staging token, nothing sealed
    assert [c.key for c in graveler.diff_uncommitted(REPO, "main")] == [b"b"]
    assert recorder.names() == ["prepare_commit"]


def test_a_prepare_commit_hook_may_still_write_to_the_commit(core, rec):
    """prepare-commit runs before staging is sealed: what it stages is committed."""
    graveler, recorder = core

    class Preparer(Recorder):
        def prepare_commit(self, event):
            graveler.set(REPO, "main", rec("generated", "G"))

    graveler.hooks = Preparer()
    graveler.set(REPO, "main", rec("b", "B"))
    commit = graveler.commit(REPO, "main", "second", "alice")
    assert graveler.view(REPO, commit.id).get(b"generated") == rec("generated", "G")


def test_branch_creation_and_deletion(core, rec):
    graveler, recorder = core
    head = graveler.get_branch(REPO, "main").commit_id
    graveler.create_branch(REPO, "dev", "main")
    graveler.set(REPO, "dev", rec("x", "X"))
    graveler.delete_branch(REPO, "dev")
    assert recorder.names() == ["pre_create_branch", "post_create_branch", "pre_delete_branch", "post_delete_branch"]
    for name in ("pre_create_branch", "post_create_branch"):
        event = recorder.event(name)
        assert (event.branch_id, event.source_ref, event.commit_id, event.tag_id) == ("dev", "main", head, None)
        assert (event.commit_message, event.committer, dict(event.commit_metadata)) == ("", "", {})
        assert event.view.get(b"a") == rec("a", "A") and recorder.changes[name] == []
    for name in ("pre_delete_branch", "post_delete_branch"):
        event = recorder.event(name)
        assert (event.branch_id, event.source_ref, event.commit_id) == ("dev", head, None)


def test_failing_pre_create_branch_creates_nothing(core):
    graveler, recorder = core
    recorder.fail_on = "pre_create_branch"
    with pytest.raises(HookFailed):
        graveler.create_branch(REPO, "dev", "main")
    with pytest.raises(RefNotFound):
        graveler.get_branch(REPO, "dev")
    assert recorder.names() == ["pre_create_branch"]


def test_an_existing_branch_is_refused_before_the_hooks(core):
    graveler, recorder = core
    with pytest.raises(AlreadyExists):
        graveler.create_branch(REPO, "main", "main")
    assert recorder.calls == []


def test_failing_pre_delete_branch_keeps_the_branch_and_its_staging(core, rec):
    graveler, recorder = core
    graveler.create_branch(REPO, "dev", "main")
    graveler.set(REPO, "dev", rec("x", "X"))
    before = graveler.get_branch(REPO, "dev")
    recorder.fail_on = "pre_delete_branch"
    with pytest.raises(HookFailed):
        graveler.delete_branch(REPO, "dev")
    assert graveler.get_branch(REPO, "dev") == before
    assert graveler.get(REPO, "dev", b"x") == rec("x", "X")


def test_failing_post_delete_branch_is_only_logged(core, caplog):
    graveler, recorder = core
    graveler.create_branch(REPO, "dev", "main")
    recorder.fail_on, recorder.error = "post_delete_branch", RuntimeError("post boom")
    graveler.delete_branch(REPO, "dev")
    with pytest.raises(RefNotFound):
        graveler.get_branch(REPO, "dev")
    assert "post-delete-branch hook failed on branch dev" in caplog.text and "post boom" in caplog.text


def test_tag_creation_and_deletion(core):
    graveler, recorder = core
    head = graveler.get_branch(REPO, "main").commit_id
    graveler.create_tag(REPO, "v1", "main")
    graveler.delete_tag(REPO, "v1")
    assert recorder.names() == ["pre_create_tag", "post_create_tag", "pre_delete_tag", "post_delete_tag"]
    for _, event in recorder.calls:
        assert (event.branch_id, event.tag_id, event.source_ref, event.commit_id) == ("", "v1", head, head)


def test_failing_pre_create_tag_and_pre_delete_tag_change_nothing(core):
    graveler, recorder = core
    recorder.fail_on = "pre_create_tag"
    with pytest.raises(HookFailed):
        graveler.create_tag(REPO, "v1", "main")
    assert graveler.list_tags(REPO) == []
    recorder.fail_on = "pre_delete_tag"
    head = graveler.create_tag(REPO, "v1", "main")
    with pytest.raises(HookFailed):
        graveler.delete_tag(REPO, "v1")
    assert graveler.get_tag(REPO, "v1") == head


def test_tag_conflicts_are_refused_before_the_hooks(core):
    graveler, recorder = core
    graveler.create_tag(REPO, "v1", "main")
    recorder.calls.clear()
    with pytest.raises(AlreadyExists):
        graveler.create_tag(REPO, "v1", "main")
    with pytest.raises(RefNotFound):
        graveler.delete_tag(REPO, "v2")
    assert recorder.calls == []
    graveler.create_tag(REPO, "v1", "main", force=True)  # forcing runs the hooks
    assert recorder.names() == ["pre_create_tag", "post_create_tag"]


def test_revert(core, rec):
    graveler, recorder = core
    graveler.set(REPO, "main", rec("bad", "X"))
    bad = graveler.commit(REPO, "main", "bad", "bob")
    recorder.calls.clear()
    revert = graveler.revert(REPO, "main", bad.id, "carol", metadata={"why": "bad"})
    assert recorder.names() == ["pre_revert", "post_revert"]
    pre, post = recorder.event("pre_revert"), recorder.event("post_revert")
    assert (pre.branch_id, pre.source_ref, pre.committer) == ("main", "main", "carol")
    assert pre.commit_message == revert.message
    assert dict(pre.commit_metadata) == {"why": "bad"} and pre.commit_id is None
    assert recorder.changes["pre_revert"] == [(b"bad", ChangeType.REMOVED)]
    assert post.commit_id == revert.id and recorder.changes["post_revert"] == [(b"bad", ChangeType.REMOVED)]


def test_failing_pre_revert_leaves_the_branch(core, rec):
    graveler, recorder = core
    graveler.set(REPO, "main", rec("bad", "X"))
    bad = graveler.commit(REPO, "main", "bad", "bob")
    recorder.fail_on = "pre_revert"
    with pytest.raises(HookFailed):
        graveler.revert(REPO, "main", bad.id, "carol")
    assert graveler.get_branch(REPO, "main").commit_id == bad.id
    assert graveler.get(REPO, "main", b"bad") == rec("bad", "X")


def test_merge_events_share_one_builder(core, rec):
    graveler, recorder = core
    graveler.create_branch(REPO, "dev", "main")
    graveler.set(REPO, "dev", rec("d", "D"))
    graveler.commit(REPO, "dev", "dev work", "bob")
    recorder.calls.clear()
    merged = graveler.merge(REPO, "main", "dev", "alice", metadata={"k": "v"})
    pre, post = recorder.event("pre_merge"), recorder.event("post_merge")
    for event in (pre, post):
        assert (event.branch_id, event.source_ref, event.commit_message, event.committer) == (
            "main", "dev", merged.message, "alice")
        assert dict(event.commit_metadata) == {"k": "v"} and event.tag_id is None
    assert pre.commit_id is None and post.commit_id == merged.id


def test_hooks_without_the_new_methods_still_work(graveler_stores, committed_for, namespace, rec):
    """Any hook method may be missing: an object with only pre_commit sees nothing else."""
    seen = []

    class OnlyPreCommit:
        def pre_commit(self, event):
            seen.append(event.event_type)

    graveler = Graveler(graveler_stores.refs, graveler_stores.staging, committed_for, OnlyPreCommit())
    graveler.create_repository(REPO, namespace)
    graveler.create_branch(REPO, "dev", "main")
    graveler.create_tag(REPO, "v1", "main")
    graveler.set(REPO, "dev", rec("a"))
    graveler.commit(REPO, "dev", "msg", "alice")
    graveler.delete_tag(REPO, "v1")
    graveler.delete_branch(REPO, "dev")
    assert seen == ["pre-commit"]
