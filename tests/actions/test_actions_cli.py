"""`lakefuse actions ...` verbs, through an argparse parser built like the main CLI's."""

from __future__ import annotations

import argparse
import json

import pytest
from actions_helpers import action_yaml, make_event

from lakefuse.actions import ActionsRunner
from lakefuse.actions.cli import add_actions_commands, parse_repository_uri
from lakefuse.errors import HookFailed, InvalidArgument, ObjectNotFound


class FakeApp:
    def __init__(self, block_for_repo):
        self.block_for_repository = block_for_repo


@pytest.fixture
def cli(namespaces):
    parser = argparse.ArgumentParser(prog="lakefuse")
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_actions_commands(subparsers, lambda: FakeApp(namespaces))

    def run(*argv: str) -> int:
        args = parser.parse_args(list(argv))
        return args.func(args)

    return run


def test_validate_success_and_errors(cli, tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_bytes(action_yaml("ok", [("check", "http://127.0.0.1:1/x")]))
    assert cli("actions", "validate", str(good)) == 0
    assert capsys.readouterr().out == f"File validated successfully: '{good}'\n"

    bad = tmp_path / "bad.yaml"
    bad.write_text("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {url: 'http://h', timeout: soon}}]\n")
    with pytest.raises(InvalidArgument) as caught:
        cli("actions", "validate", str(bad))
    assert caught.value.message.startswith(f"invalid action file '{bad}': hook 'hk': timeout: invalid duration 'soon'")
    assert caught.value.exit_code == 2


def _make_runs(hook_server, namespaces):
    runner = ActionsRunner(namespaces, http_timeout_default=5)
    files = [("_lakefs_actions/check.yaml",
              action_yaml("Good files", [("ok", hook_server.url("/ok")), ("no", hook_server.url("/forbidden"))],
                          on="  pre-commit:\n    branches: [main]\n")),
             ("_lakefs_actions/notify.yaml", action_yaml("notify", [("tell", hook_server.url("/ok"))],
                                                         on="  post-commit:\n"))]
    with pytest.raises(HookFailed) as caught:
        runner.pre_commit(make_event(files))
    passed = runner.post_commit(make_event(files, event_type="post-commit", branch_id="dev", commit_id="c0ffee"))
    return caught.value.details["run_id"], passed.run_id


def test_runs_list(cli, hook_server, namespaces, capsys):
    failed_run, passed_run = _make_runs(hook_server, namespaces)
    assert cli("actions", "runs", "list", "lakefs://repo1") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["RUN", "ID", "EVENT", "BRANCH", "COMMIT", "START", "TIME", "END", "TIME", "STATUS"]
    assert lines[1].split()[:4] == [passed_run, "post-commit", "dev", "c0ffee"]
    assert lines[1].split()[-1] == "passed"
    assert lines[2].split()[:4] == [failed_run, "pre-commit", "main", "-"]
    assert lines[2].split()[-1] == "failed"

    cli("actions", "runs", "list", "lakefs://repo1/", "--branch", "main", "--json")
    (only,) = json.loads(capsys.readouterr().out)
    assert only["run_id"] == failed_run and only["passed"] is False and "hooks" not in only

    cli("actions", "runs", "list", "lakefs://repo1", "--commit", "c0f", "--json")
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [passed_run]
    cli("actions", "runs", "list", "lakefs://repo1", "--amount", "1", "--json")
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [passed_run]
    cli("actions", "runs", "list", "lakefs://repo1", "--after", passed_run, "--json")
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [failed_run]
    cli("actions", "runs", "list", "lakefs://empty-repo", "--json")
    assert json.loads(capsys.readouterr().out) == []


def test_runs_show(cli, hook_server, namespaces, capsys):
    failed_run, _ = _make_runs(hook_server, namespaces)
    assert cli("actions", "runs", "show", "lakefs://repo1", failed_run) == 0
    out = capsys.readouterr().out
    assert "Run ID:" in out and failed_run in out and "Status:" in out and "failed" in out
    assert "=== 0000_0000  action 'Good files'" in out and "=== 0000_0001" in out
    assert "error: HTTP 403: no temporary files allowed" in out
    assert "response: HTTP 403 Forbidden" in out  # the hook's log follows its header

    cli("actions", "runs", "show", "lakefs://repo1", failed_run, "--json")
    data = json.loads(capsys.readouterr().out)
    assert data["run_id"] == failed_run and data["status"] == "failed"
    assert [h["hook_id"] for h in data["hooks"]] == ["ok", "no"]
    assert "response: HTTP 200 OK" in data["hooks"][0]["log"]


def test_runs_show_errors(cli):
    with pytest.raises(ObjectNotFound, match="action run '.*' not found"):
        cli("actions", "runs", "show", "lakefs://repo1", "0" * 17 + "abcdef")
    with pytest.raises(InvalidArgument, match="invalid run ID"):
        cli("actions", "runs", "show", "lakefs://repo1", "../../etc")


@pytest.mark.parametrize("uri", ["repo1", "s3://repo1", "lakefs://", "lakefs://repo1/main"])
def test_repository_uri_is_checked(uri):
    with pytest.raises(InvalidArgument, match="expected lakefs://REPO"):
        parse_repository_uri(uri)


def test_amount_must_be_positive(cli, capsys):
    with pytest.raises(SystemExit):
        cli("actions", "runs", "list", "lakefs://repo1", "--amount", "0")
    assert "must be at least 1" in capsys.readouterr().err
