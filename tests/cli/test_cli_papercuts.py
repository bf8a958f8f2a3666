"""Issue 15, "Papercuts", through the CLI without a mount: ``log`` shows the whole history,
one committer rule, ``cache status`` while a cache has not persisted counters yet, messages
(articles, the checksum label, the demo's older commit).  The same items through a real
mount are in tests/fuse/test_papercuts_mount.py."""

from __future__ import annotations

import json
import os
import pwd

import pytest


# --------------------------------------------------------------------------------------------
# log: every ancestor by default, --first-parent on request


def _messages(cli, *argv) -> list[str]:
    result = cli("log", *argv, "--json")
    assert result.code == 0, result.err
    return [c["message"] for c in json.loads(result.out)]


@pytest.fixture
def merged_twice(cli, sales, tmp_path):
    """sales with dev merged into main twice (a commit on dev in between) and one more commit
    on main: main's history has two merge commits and dev's commits only behind their second
    parents."""
    source = tmp_path / "more.txt"
    source.write_text("more")
    steps = [
        ("merge", "lakefs://sales/dev", "lakefs://sales/main", "-m", "merge 1"),
        ("fs", "upload", "lakefs://sales/dev/more.txt", "--source", source),
        ("commit", "lakefs://sales/dev", "-m", "add more.txt"),
        ("merge", "lakefs://sales/dev", "lakefs://sales/main", "-m", "merge 2"),
        ("fs", "upload", "lakefs://sales/main/after.txt", "--source", source),
        ("commit", "lakefs://sales/main", "-m", "after the merges"),
    ]
    for step in steps:
        result = cli(*step)
        assert result.code == 0, (step, result.err)
    return "sales"


def test_log_shows_merged_branches_commits_newest_first_each_once(cli, merged_twice):
    log = json.loads(cli("log", "lakefs://sales/main", "--json").out)
    messages = [c["message"] for c in log]
    assert sorted(messages) == sorted(["after the merges", "merge 2", "add more.txt", "merge 1", "add dev.txt",
                                       "add readme", "add b", "Repository created"])
    assert len({c["id"] for c in log}) == len(log)  # each commit once
    assert messages[0] == "after the merges" and messages[-1] == "Repository created"
    dates = [c["creation_date"] for c in log]
    assert dates == sorted(dates, reverse=True)  # newest first
    position = {c["id"]: i for i, c in enumerate(log)}
    for commit in log:  # nothing is listed before a commit that descends from it
        assert all(position[parent] > position[commit["id"]] for parent in commit["parents"])

    assert _messages(cli, "lakefs://sales/main", "--first-parent") == [
        "after the merges", "merge 2", "merge 1", "add readme", "add b", "Repository created"]
    assert _messages(cli, "lakefs://sales/main", "--amount", "3") == messages[:3]
    assert _messages(cli, "lakefs://sales/main", "-n", "2", "--first-parent") == ["after the merges", "merge 2"]
    assert _messages(cli, "lakefs://sales/main~1") == [m for m in messages if m != "after the merges"]
    # the old spelling of the default still works; contradicting it is a usage error
    assert _messages(cli, "lakefs://sales/main", "--all-parents") == messages
    both = cli("log", "lakefs://sales/main", "--all-parents", "--first-parent")
    assert both.code == 2 and len(both.err_lines) == 1 and "--first-parent" in both.err


def test_log_help_documents_first_parent(cli):
    result = cli("log", "--help")
    assert result.code == 0 and "--first-parent" in result.out and "--all-parents" not in result.out


# --------------------------------------------------------------------------------------------
# one committer rule: --committer > $LAKEFUSE_USER > user.name of the config > the OS user


@pytest.fixture
def no_user_env(monkeypatch):
    monkeypatch.delenv("LAKEFUSE_USER", raising=False)


def _committer(cli, *extra) -> str:
    result = cli("commit", "lakefs://sales/dev", "-m", "empty", "--allow-empty", "--json", *extra)
    assert result.code == 0, result.err
    return json.loads(result.out)["committer"]


def test_committer_comes_from_lakefuse_user_then_config_then_the_os(cli, sales, lakefuse_home, monkeypatch,
                                                                    no_user_env):
    import getpass

    assert _committer(cli) == getpass.getuser()
    (lakefuse_home / "config.yaml").write_text("user:\n  name: dave\n")
    assert _committer(cli) == "dave"
    monkeypatch.setenv("LAKEFUSE_USER", "carol")
    assert _committer(cli) == "carol"
    assert _committer(cli, "--committer", "eve") == "eve"

    merged = cli("merge", "lakefs://sales/dev", "lakefs://sales/main", "--json")
    assert merged.code == 0, merged.err
    assert json.loads(merged.out)["committer"] == "carol"
    reverted = cli("branch", "revert", "lakefs://sales/dev", "dev", "--allow-empty", "--json")
    assert reverted.code == 0, reverted.err
    assert json.loads(reverted.out)["committer"] == "carol"


def test_committer_without_any_user_name_is_the_passwd_name_or_uid(cli, sales, monkeypatch, no_user_env):
    for variable in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(variable, raising=False)
    assert _committer(cli) == pwd.getpwuid(os.getuid()).pw_name

    def no_passwd_entry(uid):
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_passwd_entry)
    assert _committer(cli) == f"uid {os.getuid()}"


def test_an_empty_user_name_in_the_config_is_a_config_error(cli, sales, lakefuse_home, no_user_env):
    (lakefuse_home / "config.yaml").write_text("user:\n  name: ''\n")
    result = cli("commit", "lakefs://sales/dev", "-m", "x", "--allow-empty")
    assert result.code == 2 and len(result.err_lines) == 1 and "user.name" in result.err


def test_commit_help_states_the_rule(cli):
    assert "LAKEFUSE_USER" in " ".join(cli("commit", "--help").out.split())


# --------------------------------------------------------------------------------------------
# cache status while a cache has not persisted its counters yet (a running mount's blocks)


def test_cache_status_reads_a_cache_that_has_not_persisted_counters_yet(cli, sales, lakefuse_home):
    from lakefuse.cache import DiskCache

    assert cli("fs", "cat", "lakefs://sales/main/a/b.csv").code == 0  # the graveler cache persists counters
    blocks = DiskCache(lakefuse_home / "cache" / "blocks", 1 << 20, name="blocks")  # as a mount opens it
    try:
        result = cli("cache", "status")
        assert result.code == 0, result.err
        assert "graveler" in result.out
        caches = json.loads(cli("cache", "status", "--json").out)["caches"]
        assert [c["directory"] for c in caches] == ["graveler"]  # blocks: nothing to show yet
    finally:
        blocks.close()
    caches = {c["directory"]: c for c in json.loads(cli("cache", "status", "--json").out)["caches"]}
    assert caches["blocks"]["max_bytes"] == 1 << 20 and caches["blocks"]["name"] == "blocks"


# --------------------------------------------------------------------------------------------
# messages


def test_read_only_messages_use_the_right_article(cli, sales, tmp_path):
    result = cli("commit", "lakefs://sales/main~1", "-m", "x")
    assert result.code == 10 and "'main~1' is an expression" in result.err
    source = tmp_path / "x"
    source.write_text("x")
    result = cli("fs", "upload", "lakefs://sales/v1/x", "--source", source)
    assert result.code == 10 and "'v1' is a tag" in result.err
    result = cli("diff", "lakefs://sales/main~1")
    assert result.code == 2 and "'main~1' is an expression" in result.err


def test_upload_labels_the_checksum_with_its_algorithm(cli, sales, tmp_path):
    import blake3

    source = tmp_path / "c.csv"
    source.write_bytes(b"a,b\n")
    result = cli("fs", "upload", "lakefs://sales/dev/c.csv", "--source", source)
    assert result.code == 0, result.err
    assert f"checksum blake3:{blake3.blake3(b'a,b' + bytes([10])).hexdigest()}" in result.out
    assert "SHA-256" not in result.out


def test_demo_makes_main_1_an_older_commit_with_data(cli, tmp_path):
    result = cli("demo", "--no-mount", "--mountpoint", tmp_path / "mnt")
    assert result.code == 0, result.err
    assert _messages(cli, "lakefs://demo/main")[:2] == ["Add February sales", "Add sample data"]
    older = cli("fs", "ls", "lakefs://demo/main~1/tables/sales/")
    assert older.code == 0, older.err
    assert "2024-01.csv" in older.out and "2024-02.csv" not in older.out
    assert "2024-02.csv" in cli("fs", "ls", "lakefs://demo/main/tables/sales/").out


def test_mounts_without_any_mount(cli):
    result = cli("mounts")
    assert result.code == 0 and result.out == "No mounts yet.\n"
    assert json.loads(cli("mounts", "--json").out) == []
    missing = cli("mounts", "/nowhere")
    assert missing.code == 3 and len(missing.err_lines) == 1


def test_download_into_a_fifo_or_device_writes_into_it_and_keeps_it(cli, sales, tmp_path):
    import stat
    import threading

    (tmp_path / "fifo").mkdir()
    fifo = tmp_path / "fifo" / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = cli("fs", "download", "lakefs://sales/main/a/b.csv", "--dest", fifo)
    reader.join(30)
    assert result.code == 0, result.err
    assert received == [b"x,y\n1,2\n"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert [p.name for p in fifo.parent.iterdir()] == ["pipe"]  # no temporary file left beside it
