"""ActionsRunner as the hooks object of the real core: commits and merges through Graveler (memory
ref and staging stores, CommittedManager on local storage), webhooks on a loopback server.

Action files are staged as records whose value is the file's content; the test installs the
``action_files_reader`` the catalog would install (the catalog reads object content instead).
"""

from __future__ import annotations

import hashlib

import pytest
from actions_helpers import action_yaml

from lakefuse.actions import ActionsRunner
from lakefuse.block.local import LocalBlockAdapter
from lakefuse.errors import HookFailed
from lakefuse.graveler.committed import CommittedManager
from lakefuse.graveler.graveler import Graveler
from lakefuse.graveler.memory import MemoryRefStore, MemoryStagingStore
from lakefuse.graveler.model import ValueRecord

REPO = "repo1"


def record(path: str, content: bytes) -> ValueRecord:
    return ValueRecord(key=path.encode(), identity=hashlib.sha256(content).digest(), value=content)


@pytest.fixture
def core(tmp_path):
    blocks: dict[str, LocalBlockAdapter] = {}

    def block_for_namespace(namespace: str) -> LocalBlockAdapter:
        if namespace not in blocks:
            blocks[namespace] = LocalBlockAdapter(tmp_path / namespace)
        return blocks[namespace]

    managers: list[CommittedManager] = []

    def committed_for(namespace: str) -> CommittedManager:
        managers.append(CommittedManager(block_for_namespace(namespace)))
        return managers[-1]

    staging = MemoryStagingStore()
    refs = MemoryRefStore(staging)
    graveler = Graveler(refs, staging, committed_for)
    graveler.action_files_reader = lambda repo, view: [
        (key.decode(), value.value) for key, value in view.list(b"_lakefs_actions/") if value is not None]
    graveler.create_repository(REPO, "ns-repo1")
    runner = ActionsRunner(lambda repo_id: block_for_namespace(graveler.get_repository(repo_id).storage_namespace),
                           http_timeout_default=5)
    graveler.hooks = runner
    yield graveler, runner
    for manager in managers:
        manager.close()


def test_commit_passes_hooks_and_the_run_gets_the_commit_id(core, hook_server):
    graveler, runner = core
    graveler.set(REPO, "main", record("_lakefs_actions/check.yaml", action_yaml(
        "check", [("ok", hook_server.url("/ok"))], on="  pre-commit:\n  post-commit:\n")))
    graveler.set(REPO, "main", record("data/a.csv", b"1,2\n"))
    commit = graveler.commit(REPO, "main", "add data", "alice", {"k": "v"})

    pre_body, post_body = (r.json() for r in hook_server.requests)
    assert (pre_body["event_type"], pre_body["commit_message"], pre_body["commit_metadata"]) == (
        "pre-commit", "add data", {"k": "v"})
    assert post_body["event_type"] == "post-commit" and post_body["commit_id"] == commit.id
    runs = list(runner.store_for(REPO).list_runs())
    assert [(m.event_type, m.commit_id, m.passed) for m in runs] == [
        ("post-commit", commit.id, True), ("pre-commit", commit.id, True)]


def test_rejected_commit_writes_nothing(core, hook_server):
    graveler, runner = core
    graveler.set(REPO, "main", record("_lakefs_actions/check.yaml", action_yaml(
        "Good files", [("check", hook_server.url("/forbidden"))])))
    graveler.set(REPO, "main", record("data/tmp.csv", b"x"))
    head_before = graveler.get_branch(REPO, "main").commit_id
    log_before = [c.id for c in graveler.log(REPO, "main")]

    with pytest.raises(HookFailed, match=r"^pre-commit hook 'check' of action 'Good files' failed: HTTP 403"):
        graveler.commit(REPO, "main", "add tmp", "alice")

    assert graveler.get_branch(REPO, "main").commit_id == head_before
    assert [c.id for c in graveler.log(REPO, "main")] == log_before
    assert {c.key for c in graveler.diff_uncommitted(REPO, "main")} >= {b"data/tmp.csv"}  # still staged
    (run,) = runner.store_for(REPO).list_runs()
    assert not run.passed and run.commit_id == ""

    # fixing the action file in the staging area lets the next commit through
    graveler.set(REPO, "main", record("_lakefs_actions/check.yaml", action_yaml(
        "Good files", [("check", hook_server.url("/ok"))])))
    commit = graveler.commit(REPO, "main", "add tmp", "alice")
    assert graveler.get_branch(REPO, "main").commit_id == commit.id


def test_broken_action_file_blocks_the_commit(core):
    graveler, _ = core
    graveler.set(REPO, "main", record("_lakefs_actions/broken.yaml", b"on: {pre-commit: }\nhooks: [\n"))
    head_before = graveler.get_branch(REPO, "main").commit_id
    with pytest.raises(HookFailed, match=r"invalid action file '_lakefs_actions/broken.yaml': invalid YAML"):
        graveler.commit(REPO, "main", "broken", "alice")
    assert graveler.get_branch(REPO, "main").commit_id == head_before


def test_pre_merge_reads_the_source_and_can_reject(core, hook_server):
    graveler, runner = core
    graveler.set(REPO, "main", record("data/base.csv", b"base"))
    graveler.commit(REPO, "main", "base", "alice")
    graveler.create_branch(REPO, "feature", "main")
    graveler.set(REPO, "feature", record("_lakefs_actions/merge.yaml", action_yaml(
        "merge gate", [("gate", hook_server.url("/forbidden"))], on="  pre-merge:\n    branches: [main]\n")))
    graveler.set(REPO, "feature", record("data/new.csv", b"new"))
    graveler.commit(REPO, "feature", "feature work", "bob")
    assert hook_server.requests == []  # pre-merge only: the commit on feature ran nothing

    main_before = graveler.get_branch(REPO, "main").commit_id
    with pytest.raises(HookFailed, match=r"^pre-merge hook 'gate' of action 'merge gate' failed: HTTP 403"):
        graveler.merge(REPO, "main", "feature", "bob")
    assert graveler.get_branch(REPO, "main").commit_id == main_before
    body = hook_server.requests[0].json()
    assert (body["event_type"], body["branch_id"], body["source_ref"]) == ("pre-merge", "main", "feature")
    (run,) = runner.store_for(REPO).list_runs(branch_id="main")
    assert run.event_type == "pre-merge" and not run.passed
