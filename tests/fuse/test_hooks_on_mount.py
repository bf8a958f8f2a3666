"""A pre-commit webhook rejecting a commit made through a real mount's ``.lakefuse/commit``:
the action file is uploaded with the CLI, the data written through the mount, the hook is a real
HTTP server on loopback (tests/actions/actions_helpers.py) answering 403 and then 200; the
commit fails on close with EPERM (``HookFailed.errno``), the control file tells which action and
hook failed and why, the branch keeps its head and its staged data, the retried commit passes,
and ``lakefuse actions runs list`` shows both runs."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest

from lakefuse.errors import HookFailed
from lakemount import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "actions"))
from actions_helpers import FORBIDDEN_BODY, action_yaml, running_hook_server  # noqa: E402

ACTION_NAME = "Check data"
HOOK_ID = "gate"


@pytest.fixture
def hook_server():
    with running_hook_server() as server:
        yield server


def test_a_rejecting_hook_fails_the_control_file_commit_then_a_passing_one_commits(
        branch, lake, lake_home, hook_server, monkeypatch, capsys, tmp_path):
    name = branch.name
    action_file = tmp_path / "check.yaml"
    action_file.write_bytes(action_yaml(ACTION_NAME, [(HOOK_ID, hook_server.url("/switch"))],
                                        on=f"  pre-commit:\n    branches: [{name}]\n"))
    run_cli(monkeypatch, capsys, lake_home, "fs", "upload", f"lakefs://sales/{name}/_lakefs_actions/check.yaml",
        "--source", str(action_file))
    (branch / "data/new.csv").write_text("id,v\n7,8\n")
    head_before = (branch / ".lakefuse/head").read_text().strip()
    assert lake_home.catalog.get_branch("sales", name).commit_id == head_before

    hook_server.switch_status = 403
    with pytest.raises(OSError) as exc:
        with open(branch / ".lakefuse/commit", "w") as control:
            control.write("add new.csv")
    assert exc.value.errno == HookFailed.errno == errno.EPERM
    result = (branch / ".lakefuse/commit").read_text()
    assert result.startswith(f"error: pre-commit hook '{HOOK_ID}' of action '{ACTION_NAME}' failed: HTTP 403")
    assert FORBIDDEN_BODY in result and "[run " in result
    failed_run = result.rsplit("[run ", 1)[1].split("]", 1)[0]

    assert (branch / ".lakefuse/head").read_text().strip() == head_before
    assert lake_home.catalog.get_branch("sales", name).commit_id == head_before
    status = (branch / ".lakefuse/status").read_text().splitlines()
    assert {"+ data/new.csv", "+ _lakefs_actions/check.yaml"} <= set(status)
    assert (branch / "data/new.csv").read_text() == "id,v\n7,8\n"
    assert "new.csv" not in os.listdir(lake / "sales" / head_before / "data")

    hook_server.switch_status = 200
    with open(branch / ".lakefuse/commit", "w") as control:
        control.write("add new.csv")
    commit_id = (branch / ".lakefuse/commit").read_text().strip()
    assert len(commit_id) == 64 and commit_id != head_before
    assert (branch / ".lakefuse/head").read_text().strip() == commit_id
    assert (branch / ".lakefuse/status").read_text() == ""
    assert (lake / "sales" / commit_id / "data/new.csv").read_text() == "id,v\n7,8\n"
    commit = lake_home.catalog.get_commit("sales", commit_id)
    assert commit.message == "add new.csv" and list(commit.parents) == [head_before]

    first, second = hook_server.wait_for_requests(2)
    for request in (first, second):
        body = request.json()
        assert request.path == "/switch"
        assert (body["event_type"], body["repository_id"], body["branch_id"]) == ("pre-commit", "sales", name)
        assert body["commit_message"] == "add new.csv"

    runs = json.loads(run_cli(monkeypatch, capsys, lake_home, "actions", "runs", "list", "lakefs://sales",
                          "--branch", name, "--json"))
    assert [(r["event_type"], r["passed"]) for r in runs] == [("pre-commit", True), ("pre-commit", False)]
    assert runs[1]["run_id"] == failed_run and runs[1]["commit_id"] == ""
    assert runs[0]["commit_id"] == commit_id
    table = run_cli(monkeypatch, capsys, lake_home, "actions", "runs", "list", "lakefs://sales", "--branch", name)
    lines = table.splitlines()
    assert lines[1].split()[:4] == [runs[0]["run_id"], "pre-commit", name, commit_id[:16]]
    assert lines[1].split()[-1] == "passed"
    assert lines[2].split()[:4] == [failed_run, "pre-commit", name, "-"] and lines[2].split()[-1] == "failed"
    shown = run_cli(monkeypatch, capsys, lake_home, "actions", "runs", "show", "lakefs://sales", failed_run)
    assert f"action '{ACTION_NAME}'" in shown and "HTTP 403" in shown
