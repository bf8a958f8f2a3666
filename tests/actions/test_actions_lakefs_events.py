"""Every event lakefuse has an operation for fires its hooks (issue 15): branch and tag creation
and deletion, revert, prepare-commit - through the Catalog of a real local repository (memory
refs and staging, committed files and objects on local storage), the ActionsRunner as its hooks
object, webhooks posted to a loopback ``http.server`` that records the JSON bodies.

Pre events that fail abort the operation and leave nothing changed; post events that fail are
reported (logged) and the operation stands."""

from __future__ import annotations

import logging

import pytest
from actions_helpers import action_yaml

from lakefuse.actions import ActionsRunner
from lakefuse.block.namespace import open_namespace
from lakefuse.catalog import Catalog
from lakefuse.errors import AlreadyExists, HookFailed, RefNotFound
from lakefuse.graveler.committed import CommittedManager
from lakefuse.graveler.graveler import Graveler
from lakefuse.graveler.memory import MemoryRefStore, MemoryStagingStore

REPO = "events"
#: the keys every lakeFS webhook body has (EventInfo fields without omitempty)
ALWAYS = {"event_type", "event_time", "action_name", "hook_id", "repository_id", "branch_id", "commit_message",
          "committer"}


@pytest.fixture
def lake(tmp_path):
    """``(catalog, runner)``: a repository ``events`` whose main has one data file committed."""
    managers: list[CommittedManager] = []

    def committed_for(namespace: str) -> CommittedManager:
        managers.append(CommittedManager(open_namespace(namespace)))
        return managers[-1]

    staging = MemoryStagingStore()
    graveler = Graveler(MemoryRefStore(staging), staging, committed_for)
    catalog = Catalog(graveler, open_namespace)
    runner = ActionsRunner(catalog.repository_block, http_timeout_default=5)
    graveler.hooks = runner
    catalog.create_repository(REPO, str(tmp_path / "ns"))
    catalog.upload_bytes(REPO, "main", "data/a.csv", b"1,2\n")
    catalog.commit(REPO, "main", "data", "alice")
    yield catalog, runner
    for manager in managers:
        manager.close()


def install(catalog: Catalog, yaml: bytes, branch: str = "main", name: str = "hooks.yaml") -> str:
    """Commit an action file on ``branch``; the new head commit ID."""
    catalog.upload_bytes(REPO, branch, f"_lakefs_actions/{name}", yaml)
    return catalog.commit(REPO, branch, f"install {name}", "alice").id


def on(*events: str) -> str:
    return "".join(f"  {event}:\n" for event in events)


def bodies(server) -> list[dict]:
    return [request.json() for request in server.requests]


def runs(runner: ActionsRunner) -> list:
    return list(runner.store_for(REPO).list_runs())


# ------------------------------------------------------------------------------ branches

def test_create_branch_fires_pre_and_post_with_lakefs_fields(lake, hook_server):
    catalog, runner = lake
    head = install(catalog, action_yaml("branch watch", [("watch", hook_server.url("/ok"))],
                                        on=on("pre-create-branch", "post-create-branch")))
    catalog.create_branch(REPO, "feature", "main")

    pre, post = bodies(hook_server)
    for body, event_type in ((pre, "pre-create-branch"), (post, "post-create-branch")):
        assert set(body) == ALWAYS | {"source_ref", "commit_id"}
        assert body["event_type"] == event_type
        assert (body["action_name"], body["hook_id"], body["repository_id"]) == ("branch watch", "watch", REPO)
        assert (body["branch_id"], body["source_ref"], body["commit_id"]) == ("feature", "main", head)
        assert (body["commit_message"], body["committer"]) == ("", "")
    assert catalog.get_branch(REPO, "feature").commit_id == head
    assert [(m.event_type, m.branch_id, m.commit_id, m.passed) for m in runs(runner)] == [
        ("post-create-branch", "feature", head, True), ("pre-create-branch", "feature", head, True)]


def test_failing_pre_create_branch_leaves_no_branch(lake, hook_server):
    catalog, runner = lake
    install(catalog, action_yaml("no branches", [("deny", hook_server.url("/forbidden"))],
                                 on=on("pre-create-branch", "post-create-branch")))
    with pytest.raises(HookFailed, match=r"^pre-create-branch hook 'deny' of action 'no branches' failed: HTTP 403"):
        catalog.create_branch(REPO, "feature", "main")
    with pytest.raises(RefNotFound):
        catalog.get_branch(REPO, "feature")
    assert [b.id for b in catalog.list_branches(REPO)] == ["main"]
    assert [b["event_type"] for b in bodies(hook_server)] == ["pre-create-branch"]  # no post event
    (run,) = runs(runner)
    assert run.event_type == "pre-create-branch" and not run.passed


def test_create_branch_of_an_existing_name_runs_no_hook(lake, hook_server):
    catalog, _ = lake
    install(catalog, action_yaml("watch", [("watch", hook_server.url("/ok"))], on=on("pre-create-branch")))
    catalog.create_branch(REPO, "feature", "main")
    with pytest.raises(AlreadyExists):
        catalog.create_branch(REPO, "feature", "main")
    assert len(hook_server.requests) == 1


def test_branch_filters_apply_to_the_new_branch(lake, hook_server):
    catalog, _ = lake
    install(catalog, action_yaml("releases", [("rel", hook_server.url("/ok"))],
                                 on="  pre-create-branch:\n    branches: ['release-*']\n"))
    catalog.create_branch(REPO, "feature", "main")
    assert hook_server.requests == []
    catalog.create_branch(REPO, "release-1", "main")
    assert [b["branch_id"] for b in bodies(hook_server)] == ["release-1"]


def test_create_branch_reads_the_action_files_of_the_source(lake, hook_server):
    catalog, _ = lake
    catalog.create_branch(REPO, "dev", "main")
    install(catalog, action_yaml("dev only", [("dev", hook_server.url("/ok"))], on=on("pre-create-branch")),
            branch="dev")
    catalog.create_branch(REPO, "from-main", "main")
    assert hook_server.requests == []
    catalog.create_branch(REPO, "from-dev", "dev")
    assert [(b["branch_id"], b["source_ref"]) for b in bodies(hook_server)] == [("from-dev", "dev")]


def test_failing_post_create_branch_is_reported_and_the_branch_stands(lake, hook_server, caplog):
    catalog, runner = lake
    install(catalog, action_yaml("notify", [("tell", hook_server.url("/error"))], on=on("post-create-branch")))
    with caplog.at_level(logging.WARNING):
        catalog.create_branch(REPO, "feature", "main")
    assert catalog.get_branch(REPO, "feature")
    assert "post-create-branch hook failed" in caplog.text and "HTTP 500" in caplog.text
    (run,) = runs(runner)
    assert run.event_type == "post-create-branch" and not run.passed


def test_delete_branch_fires_pre_and_post_with_lakefs_fields(lake, hook_server):
    catalog, _ = lake
    install(catalog, action_yaml("cleanup", [("bye", hook_server.url("/ok"))],
                                 on=on("pre-delete-branch", "post-delete-branch")))
    catalog.create_branch(REPO, "feature", "main")
    head = install(catalog, b"# not an action file\n", branch="feature", name="notes.txt")
    catalog.delete_branch(REPO, "feature")

    pre, post = bodies(hook_server)
    for body, event_type in ((pre, "pre-delete-branch"), (post, "post-delete-branch")):
        assert set(body) == ALWAYS | {"source_ref"}  # no commit_id: lakeFS sends none
        assert (body["event_type"], body["branch_id"], body["source_ref"]) == (event_type, "feature", head)
    with pytest.raises(RefNotFound):
        catalog.get_branch(REPO, "feature")


def test_failing_pre_delete_branch_keeps_the_branch_and_its_staged_changes(lake, hook_server):
    catalog, _ = lake
    install(catalog, action_yaml("keep", [("keep", hook_server.url("/forbidden"))], on=on("pre-delete-branch")))
    catalog.create_branch(REPO, "feature", "main")
    catalog.upload_bytes(REPO, "feature", "work.csv", b"unfinished")
    before = catalog.get_branch(REPO, "feature")
    with pytest.raises(HookFailed, match=r"^pre-delete-branch hook 'keep' of action 'keep' failed"):
        catalog.delete_branch(REPO, "feature")
    assert catalog.get_branch(REPO, "feature") == before
    assert catalog.read_object(REPO, "feature", "work.csv") == b"unfinished"
    assert [d.path for d in catalog.diff_uncommitted(REPO, "feature")] == ["work.csv"]


# ------------------------------------------------------------------------------ tags

def test_create_and_delete_tag_fire_with_the_tag_and_no_branch(lake, hook_server):
    catalog, runner = lake
    head = install(catalog, action_yaml("tags", [("tagged", hook_server.url("/ok"))],
                                        on=on("pre-create-tag", "post-create-tag", "pre-delete-tag",
                                              "post-delete-tag")))
    catalog.create_tag(REPO, "v1", "main")
    catalog.delete_tag(REPO, "v1")

    sent = bodies(hook_server)
    assert [b["event_type"] for b in sent] == ["pre-create-tag", "post-create-tag", "pre-delete-tag",
                                               "post-delete-tag"]
    for body in sent:
        assert set(body) == ALWAYS | {"source_ref", "tag_id", "commit_id"}
        assert (body["branch_id"], body["tag_id"], body["source_ref"], body["commit_id"]) == ("", "v1", head, head)
    manifests = runs(runner)
    assert {(m.tag_id, m.branch_id, m.commit_id) for m in manifests} == {("v1", "", head)}
    with pytest.raises(RefNotFound):
        catalog.get_tag(REPO, "v1")


def test_failing_pre_create_tag_leaves_no_tag(lake, hook_server):
    catalog, _ = lake
    install(catalog, action_yaml("frozen", [("deny", hook_server.url("/forbidden"))], on=on("pre-create-tag")))
    with pytest.raises(HookFailed, match=r"^pre-create-tag hook 'deny'"):
        catalog.create_tag(REPO, "v1", "main")
    assert catalog.list_tags(REPO) == []


def test_failing_pre_delete_tag_leaves_the_tag(lake, hook_server):
    catalog, _ = lake
    head = install(catalog, action_yaml("keep tags", [("keep", hook_server.url("/forbidden"))],
                                        on=on("pre-delete-tag", "post-delete-tag")))
    catalog.create_tag(REPO, "v1", "main")
    with pytest.raises(HookFailed, match=r"^pre-delete-tag hook 'keep' of action 'keep tags' failed: HTTP 403"):
        catalog.delete_tag(REPO, "v1")
    assert catalog.get_tag(REPO, "v1") == head
    assert [b["event_type"] for b in bodies(hook_server)] == ["pre-delete-tag"]


def test_delete_tag_reads_the_action_files_of_the_tagged_commit(lake, hook_server):
    catalog, _ = lake
    catalog.create_tag(REPO, "before", "main")
    install(catalog, action_yaml("keep tags", [("keep", hook_server.url("/forbidden"))], on=on("pre-delete-tag")))
    catalog.delete_tag(REPO, "before")  # its commit has no action file
    assert hook_server.requests == []


# ------------------------------------------------------------------------------ revert

def test_revert_fires_pre_and_post(lake, hook_server):
    catalog, runner = lake
    install(catalog, action_yaml("reverts", [("rv", hook_server.url("/ok"))], on=on("pre-revert", "post-revert")))
    catalog.upload_bytes(REPO, "main", "data/bad.csv", b"oops")
    bad = catalog.commit(REPO, "main", "bad data", "bob").id
    revert = catalog.revert(REPO, "main", bad, "carol", metadata={"why": "bad"})

    pre, post = bodies(hook_server)
    assert set(pre) == ALWAYS | {"source_ref", "commit_metadata"}
    assert set(post) == ALWAYS | {"source_ref", "commit_id", "commit_metadata"}
    for body, event_type in ((pre, "pre-revert"), (post, "post-revert")):
        assert (body["event_type"], body["branch_id"], body["source_ref"]) == (event_type, "main", "main")
        assert body["commit_message"] == revert.message and body["committer"] == "carol"
        assert body["commit_metadata"] == {"why": "bad"}
    assert post["commit_id"] == revert.id
    assert [(m.event_type, m.commit_id) for m in runs(runner)] == [("post-revert", revert.id),
                                                                  ("pre-revert", revert.id)]


def test_failing_pre_revert_leaves_the_branch(lake, hook_server):
    catalog, _ = lake
    install(catalog, action_yaml("no reverts", [("deny", hook_server.url("/forbidden"))], on=on("pre-revert")))
    catalog.upload_bytes(REPO, "main", "data/bad.csv", b"oops")
    bad = catalog.commit(REPO, "main", "bad data", "bob").id
    with pytest.raises(HookFailed, match=r"^pre-revert hook 'deny'"):
        catalog.revert(REPO, "main", bad, "carol")
    assert catalog.get_branch(REPO, "main").commit_id == bad
    assert catalog.read_object(REPO, "main", "data/bad.csv") == b"oops"


# ------------------------------------------------------------------------------ prepare-commit

def test_prepare_commit_runs_before_pre_commit(lake, hook_server):
    catalog, runner = lake
    install(catalog, action_yaml("gates", [("gate", hook_server.url("/ok"))],
                                 on=on("pre-commit", "post-commit", "prepare-commit")))
    with hook_server.lock:
        hook_server.requests.clear()  # the hooks of the commit that installed the action file
    catalog.upload_bytes(REPO, "main", "data/b.csv", b"3,4\n")
    commit = catalog.commit(REPO, "main", "more data", "alice", {"k": "v"})

    prepare, pre, post = bodies(hook_server)
    assert [b["event_type"] for b in (prepare, pre, post)] == ["prepare-commit", "pre-commit", "post-commit"]
    assert set(prepare) == ALWAYS | {"source_ref", "commit_metadata"}
    assert (prepare["branch_id"], prepare["source_ref"], prepare["commit_message"], prepare["committer"],
            prepare["commit_metadata"]) == ("main", "main", "more data", "alice", {"k": "v"})
    assert post["commit_id"] == commit.id
    latest = runs(runner)[:3]  # newest first
    assert [m.event_type for m in latest] == ["post-commit", "pre-commit", "prepare-commit"]
    assert latest[1].commit_id == commit.id  # the pre-commit run gets the commit
    assert latest[2].passed and latest[2].commit_id == ""


def test_failing_prepare_commit_leaves_staging_intact(lake, hook_server):
    catalog, runner = lake
    hook_server.switch_status = 200  # lets the commit installing the action file through
    head = install(catalog, action_yaml("prepare", [("prep", hook_server.url("/switch"))],
                                        on=on("prepare-commit", "pre-commit")))
    hook_server.switch_status = 403
    with hook_server.lock:
        hook_server.requests.clear()
    catalog.upload_bytes(REPO, "main", "data/b.csv", b"3,4\n")
    before = catalog.get_branch(REPO, "main")
    with pytest.raises(HookFailed, match=r"^prepare-commit hook 'prep' of action 'prepare' failed: HTTP 403"):
        catalog.commit(REPO, "main", "more data", "alice")
    after = catalog.get_branch(REPO, "main")
    assert after == before and after.commit_id == head and after.sealed_tokens == ()  # staging not even sealed
    assert [d.path for d in catalog.diff_uncommitted(REPO, "main")] == ["data/b.csv"]
    assert [b["event_type"] for b in bodies(hook_server)] == ["prepare-commit"]  # pre-commit never ran
    run = runs(runner)[0]
    assert run.event_type == "prepare-commit" and not run.passed and run.commit_id == ""


def test_prepare_commit_sees_the_staged_action_files(lake, hook_server):
    """Like pre-commit, prepare-commit reads the branch with its staged changes."""
    catalog, _ = lake
    catalog.upload_bytes(REPO, "main", "_lakefs_actions/new.yaml",
                         action_yaml("new", [("fresh", hook_server.url("/ok"))], on=on("prepare-commit")))
    catalog.commit(REPO, "main", "add action", "alice")
    assert [b["event_type"] for b in bodies(hook_server)] == ["prepare-commit"]


# ------------------------------------------------------------------------------ cherry-pick

def test_cherry_pick_events_are_accepted_but_lakefuse_has_no_cherry_pick(lake, hook_server):
    catalog, _ = lake
    install(catalog, action_yaml("picks", [("pick", hook_server.url("/ok"))],
                                 on=on("pre-cherry-pick", "post-cherrypick")))
    assert not hasattr(catalog, "cherry_pick") and not hasattr(catalog.graveler, "cherry_pick")
    catalog.create_branch(REPO, "feature", "main")
    catalog.upload_bytes(REPO, "feature", "x.csv", b"x")
    catalog.commit(REPO, "feature", "x", "alice")
    catalog.merge(REPO, "main", "feature", "alice")
    assert hook_server.requests == []


# ------------------------------------------------------------------------------ runs of tag events

def test_runs_of_tag_events_show_the_tag(lake, hook_server, capsys):
    import argparse

    from lakefuse.actions.cli import add_actions_commands

    catalog, runner = lake

    class App:
        block_for_repository = staticmethod(catalog.repository_block)

    parser = argparse.ArgumentParser(prog="lakefuse")
    add_actions_commands(parser.add_subparsers(dest="command", required=True), lambda: App())
    install(catalog, action_yaml("tags", [("tagged", hook_server.url("/ok"))], on=on("post-create-tag")))
    catalog.create_tag(REPO, "v1", "main")
    (run,) = runs(runner)
    capsys.readouterr()

    args = parser.parse_args(["actions", "runs", "list", f"lakefs://{REPO}"])
    assert args.func(args) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:3] == [run.run_id, "post-create-tag", "-"]  # a tag event has no branch

    args = parser.parse_args(["actions", "runs", "show", f"lakefs://{REPO}", run.run_id])
    assert args.func(args) == 0
    shown = capsys.readouterr().out
    assert "Tag:" in shown and " v1\n" in shown and "Branch:" in shown
