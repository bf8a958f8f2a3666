"""``lakefuse repo ...``, ``branch ...`` and ``tag ...``: happy paths and their output."""

from __future__ import annotations

import json

from lakefuse.app import App


def test_repo_create_with_namespace_list_show_delete(cli, tmp_path):
    namespace = tmp_path / "data" / "sales"
    result = cli("repo", "create", "lakefs://sales", f"local://{namespace}")
    assert result.code == 0, result.err
    assert "lakefs://sales" in result.out and f"local://{namespace}" in result.out

    listed = cli("repo", "list", "--json")
    assert listed.code == 0
    [repo] = json.loads(listed.out)
    assert repo["id"] == "sales" and repo["storage_namespace"] == f"local://{namespace}"
    assert repo["default_branch"] == "main"
    assert "sales" in cli("repo", "list").out

    shown = json.loads(cli("repo", "show", "lakefs://sales", "--json").out)
    assert shown["branches"] == 1 and shown["tags"] == 0
    assert "Default branch" in cli("repo", "show", "lakefs://sales").out

    deleted = cli("repo", "delete", "lakefs://sales", "--yes")
    assert deleted.code == 0, deleted.err
    assert json.loads(cli("repo", "list", "--json").out) == []


def test_repo_create_defaults_to_the_storage_root(cli):
    result = cli("repo", "create", "lakefs://sales", "--default-branch", "trunk", "--json")
    assert result.code == 0, result.err
    created = json.loads(result.out)
    app = App.from_config()
    try:
        assert created["storage_namespace"] == app.default_namespace("sales")
    finally:
        app.close()
    assert created["default_branch"] == "trunk"


def test_repo_delete_without_yes_and_without_terminal_refuses(cli, sales):
    result = cli("repo", "delete", "lakefs://sales", stdin=b"y\n")
    assert result.code == 2
    assert len(result.err_lines) == 1 and "--yes" in result.err
    assert cli("repo", "show", "lakefs://sales").code == 0


def test_branch_create_list_show_delete(cli, sales):
    created = cli("branch", "create", "lakefs://sales/feature", "--source", "lakefs://sales/main~1", "--json")
    assert created.code == 0, created.err
    main_parent = json.loads(cli("show", "lakefs://sales/main~1", "--json").out)["id"]
    assert json.loads(created.out)["commit_id"] == main_parent

    branches = {b["id"]: b for b in json.loads(cli("branch", "list", "lakefs://sales", "--json").out)}
    assert set(branches) == {"dev", "feature", "main"}
    assert branches["main"]["default"] and not branches["dev"]["default"]
    table = cli("branch", "list", "lakefs://sales").out
    assert "feature" in table and "(default)" in table

    shown = json.loads(cli("branch", "show", "lakefs://sales/feature", "--json").out)
    assert shown["commit_id"] == main_parent and shown["has_uncommitted_changes"] is False
    assert "Uncommitted changes: no" in cli("branch", "show", "lakefs://sales/feature").out

    assert cli("branch", "delete", "lakefs://sales/feature").code == 0
    assert "feature" not in cli("branch", "list", "lakefs://sales").out


def test_branch_create_from_a_tag_and_a_commit_id(cli, sales):
    tagged = json.loads(cli("tag", "show", "lakefs://sales/v1", "--json").out)["commit_id"]
    assert cli("branch", "create", "lakefs://sales/from-tag", "--source", "lakefs://sales/v1").code == 0
    assert cli("branch", "create", "lakefs://sales/from-id", "--source", f"lakefs://sales/{tagged[:12]}").code == 0
    for name in ("from-tag", "from-id"):
        assert json.loads(cli("branch", "show", f"lakefs://sales/{name}", "--json").out)["commit_id"] == tagged


def test_branch_reset_all_and_by_prefix(cli, sales, tmp_path):
    source = tmp_path / "f"
    source.write_text("data")
    for path in ("keep/x", "drop/y", "drop/z"):
        assert cli("fs", "upload", f"lakefs://sales/dev/{path}", "--source", source).code == 0
    result = cli("branch", "reset", "lakefs://sales/dev/drop/")
    assert result.code == 0, result.err
    assert cli("diff", "lakefs://sales/dev").out == "+ keep/x\n"
    assert cli("branch", "reset", "lakefs://sales/dev").code == 0
    assert cli("diff", "lakefs://sales/dev").out == ""


def test_branch_revert(cli, sales):
    result = cli("branch", "revert", "lakefs://sales/dev", "dev", "--json")
    assert result.code == 0, result.err
    commit = json.loads(result.out)
    assert commit["message"].startswith('Revert "add dev.txt"')
    assert cli("fs", "stat", "lakefs://sales/dev/dev.txt").code == 3
    # the same as a URI, with a message and metadata
    assert cli("branch", "revert", "lakefs://sales/dev", "lakefs://sales/dev", "--message", "undo undo",
               "--meta", "why=test").code == 0
    shown = json.loads(cli("show", "lakefs://sales/dev", "--json").out)
    assert shown["message"] == "undo undo" and shown["metadata"] == {"why": "test"}
    assert cli("fs", "stat", "lakefs://sales/dev/dev.txt").code == 0


def test_branch_revert_of_a_merge_commit_needs_a_parent_number(cli, sales):
    assert cli("merge", "lakefs://sales/dev", "lakefs://sales/main").code == 0
    without = cli("branch", "revert", "lakefs://sales/main", "main")
    assert without.code == 2 and "merge commit" in without.err
    result = cli("branch", "revert", "lakefs://sales/main", "main", "-m", "1")
    assert result.code == 0, result.err
    assert cli("fs", "stat", "lakefs://sales/main/dev.txt").code == 3


def test_tag_create_list_show_delete_and_force(cli, sales):
    assert cli("tag", "create", "lakefs://sales/v2", "lakefs://sales/dev").code == 0
    tags = {t["id"]: t["commit_id"] for t in json.loads(cli("tag", "list", "lakefs://sales", "--json").out)}
    dev_head = json.loads(cli("show", "lakefs://sales/dev", "--json").out)["id"]
    assert tags["v2"] == dev_head and set(tags) == {"v1", "v2"}
    assert "v2" in cli("tag", "list", "lakefs://sales").out

    shown = cli("tag", "show", "lakefs://sales/v2")
    assert shown.code == 0 and dev_head in shown.out and "add dev.txt" in shown.out
    assert json.loads(cli("tag", "show", "lakefs://sales/v2", "--json").out)["commit"]["message"] == "add dev.txt"

    again = cli("tag", "create", "lakefs://sales/v2", "lakefs://sales/main")
    assert again.code == 4
    assert cli("tag", "create", "lakefs://sales/v2", "lakefs://sales/main", "--force").code == 0
    main_head = json.loads(cli("show", "lakefs://sales/main", "--json").out)["id"]
    assert json.loads(cli("tag", "show", "lakefs://sales/v2", "--json").out)["commit_id"] == main_head

    assert cli("tag", "delete", "lakefs://sales/v2").code == 0
    assert cli("tag", "show", "lakefs://sales/v2").code == 3
