"""``lakefuse commit|log|show|diff|merge``."""

from __future__ import annotations

import json
import os
import pwd


def test_commit_with_metadata_committer_and_default_committer(cli, sales, tmp_path, monkeypatch):
    source = tmp_path / "f"
    source.write_text("x")
    assert cli("fs", "upload", "lakefs://sales/dev/new.txt", "--source", source).code == 0
    result = cli("commit", "lakefs://sales/dev", "-m", "add new", "--meta", "k=v", "--meta", "empty=",
                 "--committer", "alice", "--json")
    assert result.code == 0, result.err
    commit = json.loads(result.out)
    assert commit["message"] == "add new" and commit["committer"] == "alice"
    assert commit["metadata"] == {"k": "v", "empty": ""}

    monkeypatch.delenv("LAKEFUSE_USER", raising=False)
    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):  # what getpass.getuser() reads first
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("LOGNAME", "bob")
    human = cli("commit", "lakefs://sales/dev", "-m", "empty one", "--allow-empty")
    assert human.code == 0, human.err
    assert "Committer:  bob" in human.out and "ID:" in human.out
    monkeypatch.delenv("LOGNAME")
    assert json.loads(cli("commit", "lakefs://sales/dev", "-m", "e", "--allow-empty", "--json").out)[
        "committer"] == pwd.getpwuid(os.getuid()).pw_name


def test_log_amount_all_parents_and_ref_expressions(cli, sales):
    log = json.loads(cli("log", "lakefs://sales/main", "--json").out)
    assert [c["message"] for c in log] == ["add readme", "add b", "Repository created"]
    assert [c["message"] for c in json.loads(cli("log", "lakefs://sales/main~1", "--json").out)] == [
        "add b", "Repository created"]
    assert len(json.loads(cli("log", "lakefs://sales/main", "--amount", "1", "--json").out)) == 1

    assert cli("merge", "lakefs://sales/dev", "lakefs://sales/main").code == 0
    first_parent = [c["message"] for c in json.loads(cli("log", "lakefs://sales/main", "--first-parent", "--json").out)]
    every = [c["message"] for c in json.loads(cli("log", "lakefs://sales/main", "--json").out)]
    assert "add dev.txt" not in first_parent and "add dev.txt" in every
    assert [c["message"] for c in json.loads(cli("log", "lakefs://sales/main", "--all-parents", "--json").out)] == every

    human = cli("log", "lakefs://sales/main", "-n", "1").out
    assert human.startswith("commit ") and "Merge:" in human and "Merge 'dev' into 'main'" in human


def test_show_prints_commit_details_of_any_ref(cli, sales):
    result = cli("show", "lakefs://sales/v1")
    assert result.code == 0, result.err
    assert "add readme" in result.out and "(tag)" in result.out
    shown = json.loads(cli("show", "lakefs://sales/main~1", "--json").out)
    assert shown["message"] == "add b" and shown["ref_type"] == "expression" and len(shown["parents"]) == 1
    by_prefix = json.loads(cli("show", f"lakefs://sales/{shown['id'][:10]}", "--json").out)
    assert by_prefix["id"] == shown["id"] and by_prefix["ref_type"] == "commit"


def test_diff_between_refs_and_uncommitted(cli, sales, tmp_path):
    assert cli("diff", "lakefs://sales/main", "lakefs://sales/dev").out == "+ dev.txt\n"
    assert cli("diff", "lakefs://sales/dev", "lakefs://sales/main").out == "- dev.txt\n"
    assert cli("diff", "lakefs://sales/main", "lakefs://sales/main").out == ""

    source = tmp_path / "f"
    source.write_text("changed")
    assert cli("fs", "upload", "lakefs://sales/dev/a/b.csv", "--source", source).code == 0
    assert cli("fs", "upload", "lakefs://sales/dev/z.txt", "--source", source).code == 0
    assert cli("fs", "rm", "lakefs://sales/dev/README.md").code == 0
    result = cli("diff", "lakefs://sales/dev")
    assert result.code == 0, result.err
    assert result.out.splitlines() == ["- README.md", "~ a/b.csv", "+ z.txt"]
    assert cli("diff", "lakefs://sales/dev/a/").out == "~ a/b.csv\n"

    as_json = json.loads(cli("diff", "lakefs://sales/dev", "--json").out)
    assert [(d["type"], d["path"]) for d in as_json] == [("removed", "README.md"), ("changed", "a/b.csv"),
                                                          ("added", "z.txt")]
    assert as_json[0]["right"] is None and as_json[2]["left"] is None


def test_merge_fast_and_with_strategy(cli, sales, tmp_path):
    result = cli("merge", "lakefs://sales/dev", "lakefs://sales/main", "-m", "bring dev", "--meta", "by=test")
    assert result.code == 0, result.err
    assert "Merged 'dev' into 'main'" in result.out
    shown = json.loads(cli("show", "lakefs://sales/main", "--json").out)
    assert shown["message"] == "bring dev" and len(shown["parents"]) == 2 and shown["metadata"] == {"by": "test"}
    assert cli("fs", "stat", "lakefs://sales/main/dev.txt").code == 0

    # a conflict resolved by --strategy
    for branch, text in (("main", "main side"), ("dev", "dev side")):
        source = tmp_path / branch
        source.write_text(text)
        assert cli("fs", "upload", f"lakefs://sales/{branch}/a/b.csv", "--source", source).code == 0
        assert cli("commit", f"lakefs://sales/{branch}", "-m", f"{branch} edit").code == 0
    result = cli("merge", "lakefs://sales/dev", "lakefs://sales/main", "--strategy", "source-wins", "--json")
    assert result.code == 0, result.err
    assert cli("fs", "cat", "lakefs://sales/main/a/b.csv").out == "dev side"


def test_merge_dest_wins(cli, sales, tmp_path):
    for branch, text in (("main", "main side"), ("dev", "dev side")):
        source = tmp_path / branch
        source.write_text(text)
        assert cli("fs", "upload", f"lakefs://sales/{branch}/a/b.csv", "--source", source).code == 0
        assert cli("commit", f"lakefs://sales/{branch}", "-m", f"{branch} edit").code == 0
    assert cli("merge", "lakefs://sales/dev", "lakefs://sales/main", "--strategy", "dest-wins").code == 0
    assert cli("fs", "cat", "lakefs://sales/main/a/b.csv").out == "main side"
    assert cli("fs", "stat", "lakefs://sales/main/dev.txt").code == 0
