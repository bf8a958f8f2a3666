"""ActionsRunner on hand-made events: which actions run, in which order, what the webhooks
receive, what fails the operation, and the run results left in the storage namespace."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest
from actions_helpers import FORBIDDEN_BODY, action_yaml, make_event

from lakefuse.actions import ActionsRunner, RunStore, new_run_id
from lakefuse.actions.runs import LOG_PREFIX
from lakefuse.errors import HookFailed

FIXED_TIME = 1_614_520_611.25  # 2021-02-28T13:56:51.250Z


def keys(block) -> list[str]:
    return [stat.key for stat in block.list("")]


@pytest.fixture
def runner(namespaces):
    return ActionsRunner(namespaces, http_timeout_default=5)


def test_passing_pre_commit_hook_sends_the_seed_body_and_records_the_run(hook_server, namespaces):
    runner = ActionsRunner(namespaces, clock=lambda: FIXED_TIME, http_timeout_default=5)
    files = [("_lakefs_actions/check.yaml", action_yaml("Good files", [("check", hook_server.url("/ok"))]))]
    manifest = runner.pre_commit(make_event(files, commit_metadata={"key": "value"}))

    (request,) = hook_server.requests
    assert request.path == "/ok"
    assert request.json() == {
        "event_type": "pre-commit",
        "event_time": "2021-02-28T13:56:51Z",
        "action_name": "Good files",
        "hook_id": "check",
        "repository_id": "repo1",
        "branch_id": "main",
        "source_ref": "main",
        "commit_message": "add data",
        "committer": "alice",
        "commit_metadata": {"key": "value"},
    }
    assert manifest.passed and manifest.status == "passed" and manifest.error is None
    assert manifest.start_time == "2021-02-28T13:56:51.250Z"
    (hook,) = manifest.hooks
    assert (hook.action_name, hook.hook_id, hook.hook_run_id, hook.status) == ("Good files", "check", "0000_0000", "passed")
    run_dir = f"{LOG_PREFIX}{manifest.run_id}/"
    assert keys(namespaces("repo1")) == [run_dir + "0000_0000.log", run_dir + "run.manifest"]
    assert hook.log_key == run_dir + "0000_0000.log"
    store = RunStore(namespaces("repo1"))
    assert store.get_manifest(manifest.run_id) == manifest
    log = store.get_hook_log(manifest.run_id, "0000_0000").decode()
    assert "request: POST " + hook_server.url("/ok") in log and "response: HTTP 200" in log
    assert "result: passed" in log


def test_failing_pre_commit_hook_raises_with_a_one_line_message(hook_server, runner, namespaces):
    files = [("_lakefs_actions/check.yaml", action_yaml("Good files", [("check", hook_server.url("/forbidden"))]))]
    with pytest.raises(HookFailed) as caught:
        runner.pre_commit(make_event(files))
    message = caught.value.message
    assert message.startswith(f"pre-commit hook 'check' of action 'Good files' failed: HTTP 403: {FORBIDDEN_BODY}")
    assert "\n" not in message
    run_id = caught.value.details["run_id"]
    assert run_id in message
    manifest = RunStore(namespaces("repo1")).get_manifest(run_id)
    assert not manifest.passed and manifest.status == "failed"
    assert manifest.hooks[0].status == "failed" and "HTTP 403" in manifest.hooks[0].error
    log = RunStore(namespaces("repo1")).get_hook_log(run_id, "0000_0000").decode()
    assert FORBIDDEN_BODY in log and "result: failed: HTTP 403" in log


def test_post_commit_body_has_the_commit_id_and_failures_raise(hook_server, runner):
    files = [("_lakefs_actions/notify.yaml",
              action_yaml("notify", [("tell", hook_server.url("/ok")), ("boom", hook_server.url("/error"))],
                          on="  post-commit:\n"))]
    with pytest.raises(HookFailed, match=r"^post-commit hook 'boom' of action 'notify' failed: HTTP 500: boom"):
        runner.post_commit(make_event(files, event_type="post-commit", commit_id="c0ffee"))
    first = hook_server.requests[0].json()
    assert first["event_type"] == "post-commit" and first["commit_id"] == "c0ffee"


def test_merge_events_and_branch_globs(hook_server, runner):
    files = [("_lakefs_actions/merge.yaml", action_yaml(
        "merge checks", [("mg", hook_server.url("/merge"))],
        on="  pre-merge:\n    branches: [main, 'release-*']\n  post-merge:\n    branches: ['release-?']\n"))]
    assert runner.pre_merge(make_event(files, event_type="pre-merge", branch_id="feature", source_ref="dev")) is None
    assert hook_server.requests == []
    manifest = runner.pre_merge(make_event(files, event_type="pre-merge", branch_id="release-10", source_ref="dev"))
    assert manifest.event_type == "pre-merge" and manifest.source_ref == "dev"
    body = hook_server.requests[0].json()
    assert (body["event_type"], body["branch_id"], body["source_ref"]) == ("pre-merge", "release-10", "dev")
    assert runner.post_merge(make_event(files, event_type="post-merge", branch_id="release-10", commit_id="c1")) is None
    runner.post_merge(make_event(files, event_type="post-merge", branch_id="release-1", commit_id="c1"))
    assert [r.json()["event_type"] for r in hook_server.requests] == ["pre-merge", "post-merge"]
    # a pre-commit does not trigger merge-only actions
    assert runner.pre_commit(make_event(files, branch_id="main")) is None


def test_actions_run_in_path_order_and_stop_at_the_first_failure(hook_server, runner):
    files = [
        ("_lakefs_actions/b.yaml", action_yaml("B", [("b1", hook_server.url("/b1"))])),
        ("_lakefs_actions/a.yaml", action_yaml("A", [("a1", hook_server.url("/a1")),
                                                     ("a2", hook_server.url("/forbidden")),
                                                     ("a3", hook_server.url("/a3"))])),
        ("_lakefs_actions/c.yaml", action_yaml("C", [("c1", hook_server.url("/error"))])),
        ("_lakefs_actions/README.md", b"not an action file"),
    ]
    with pytest.raises(HookFailed) as caught:
        runner.pre_commit(make_event(files))
    assert hook_server.paths() == ["/a1", "/forbidden", "/b1", "/error"]  # a3 never runs
    assert caught.value.message.startswith("pre-commit hook 'a2' of action 'A' failed: HTTP 403")
    assert "(and 1 more failed)" in caught.value.message
    assert len(caught.value.details["failures"]) == 2
    store = runner.store_for("repo1")
    manifest = store.get_manifest(caught.value.details["run_id"])
    assert [(h.hook_run_id, h.hook_id, h.status) for h in manifest.hooks] == [
        ("0000_0000", "a1", "passed"), ("0000_0001", "a2", "failed"),
        ("0001_0000", "b1", "passed"), ("0002_0000", "c1", "failed")]


def test_timeout_fails_the_hook_fast(hook_server, runner):
    files = [("_lakefs_actions/slow.yaml",
              action_yaml("slow", [("wait", hook_server.url("/slow"))], extra_props="timeout: 300ms"))]
    started = time.monotonic()
    with pytest.raises(HookFailed, match=r"hook 'wait' of action 'slow' failed: timed out after 300ms"):
        runner.pre_commit(make_event(files))
    assert time.monotonic() - started < 1.5


def test_default_timeout_applies(hook_server, namespaces):
    runner = ActionsRunner(namespaces, http_timeout_default=0.2)
    files = [("_lakefs_actions/slow.yaml", action_yaml("slow", [("wait", hook_server.url("/slow"))]))]
    with pytest.raises(HookFailed, match="timed out after 200ms"):
        runner.pre_commit(make_event(files))


def test_query_params_string_and_list(hook_server, runner):
    files = [("_lakefs_actions/q.yaml", action_yaml(
        "q", [("qp", hook_server.url("/q?fixed=1"))],
        extra_props="query_params:\n  prefix: public/\n  disallow: [user_, private_]\n"))]
    runner.pre_commit(make_event(files))
    (request,) = hook_server.requests
    assert request.query == {"fixed": ["1"], "prefix": ["public/"], "disallow": ["user_", "private_"]}


def test_unreachable_url_fails(closed_port, runner):
    files = [("_lakefs_actions/x.yaml", action_yaml("x", [("down", f"http://127.0.0.1:{closed_port}/hook")]))]
    with pytest.raises(HookFailed, match=r"hook 'down' of action 'x' failed: connection failed: .*refused"):
        runner.pre_commit(make_event(files))


def test_bad_yaml_fails_the_run_naming_the_file(hook_server, runner, namespaces):
    files = [("_lakefs_actions/good.yaml", action_yaml("good", [("ok", hook_server.url("/ok"))])),
             ("_lakefs_actions/broken.yaml", b"on:\n  pre-commit:\nhooks: [\n")]
    with pytest.raises(HookFailed) as caught:
        runner.pre_commit(make_event(files))
    message = caught.value.message
    assert message.startswith("pre-commit actions failed: invalid action file '_lakefs_actions/broken.yaml': invalid YAML")
    assert hook_server.requests == []  # nothing runs when a file is broken
    manifest = RunStore(namespaces("repo1")).get_manifest(caught.value.details["run_id"])
    assert not manifest.passed and "broken.yaml" in manifest.error and manifest.hooks == []


def test_schema_error_fails_even_other_events(hook_server, runner):
    files = [("_lakefs_actions/typo.yaml", b"on: {post-commit: }\nhooks: [{id: hk, type: webhok, properties: {}}]\n")]
    with pytest.raises(HookFailed, match=r"'_lakefs_actions/typo.yaml': hook 'hk': unknown hook type 'webhok'"):
        runner.pre_commit(make_event(files))


def test_no_action_files_or_no_trigger_writes_nothing(hook_server, runner, namespaces):
    assert runner.pre_commit(make_event([])) is None
    assert runner.pre_commit(make_event([("_lakefs_actions/notes.txt", b"hi")])) is None
    files = [("_lakefs_actions/only-main.yaml",
              action_yaml("m", [("xx", hook_server.url("/ok"))], on="  pre-commit:\n    branches: [main]\n"))]
    assert runner.pre_commit(make_event(files, branch_id="dev")) is None
    assert keys(namespaces("repo1")) == []
    assert hook_server.requests == []


def test_pre_commit_run_gets_the_resulting_commit_id(hook_server, runner):
    files = [("_lakefs_actions/both.yaml",
              action_yaml("both", [("xx", hook_server.url("/ok"))], on="  pre-commit:\n  post-commit:\n"))]
    pre = runner.pre_commit(make_event(files))
    assert pre.commit_id == ""
    post = runner.post_commit(make_event(files, event_type="post-commit", commit_id="abc123"))
    store = runner.store_for("repo1")
    assert store.get_manifest(pre.run_id).commit_id == "abc123"
    assert post.commit_id == "abc123"
    assert [m.run_id for m in store.list_runs(commit_id="abc1")] == [post.run_id, pre.run_id]
    # an explicit pre_run_id wins over thread pairing
    pre2 = runner.pre_commit(make_event(files))
    runner.pre_commit(make_event(files, branch_id="other"))
    runner.post_commit(replace(make_event(files, event_type="post-commit", commit_id="def456"), pre_run_id=pre2.run_id))
    assert store.get_manifest(pre2.run_id).commit_id == "def456"


def test_runs_list_newest_first_and_filters(hook_server, runner):
    files = [("_lakefs_actions/a.yaml", action_yaml("a", [("xx", hook_server.url("/ok"))],
                                                    on="  pre-commit:\n  post-commit:\n"))]
    made = []
    for branch in ("main", "dev", "main"):
        made.append(runner.pre_commit(make_event(files, branch_id=branch)).run_id)
        made.append(runner.post_commit(make_event(files, event_type="post-commit", branch_id=branch,
                                                  commit_id=f"commit-{len(made)}")).run_id)
    store = runner.store_for("repo1")
    assert [m.run_id for m in store.list_runs()] == made[::-1]
    assert [m.run_id for m in store.list_runs(branch_id="dev")] == made[3:1:-1]
    assert [m.run_id for m in store.list_runs(commit_id="commit-5")] == made[5:3:-1]
    assert [m.run_id for m in store.list_runs(after=made[3])] == made[2::-1]


def test_run_ids_sort_newest_first():
    ids = [new_run_id(1_600_000_000.0) for _ in range(50)]  # the same instant: still ordered
    ids += [new_run_id(1_600_000_000.5), new_run_id(1_500_000_000.0), new_run_id()]  # a clock step back too
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9]{17}[0-9a-f]{6}", i) for i in ids)
