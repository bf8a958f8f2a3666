"""``lakefuse fs ls|cat|stat|upload|download|rm``."""

from __future__ import annotations

import json

import blake3


def test_upload_file_then_stat_cat_download(cli, sales, tmp_path):
    data = b"id,amount\n1,10\n2,20\n"
    source = tmp_path / "c.csv"
    source.write_bytes(data)
    result = cli("fs", "upload", "lakefs://sales/dev/tables/c.csv", "--source", source)
    assert result.code == 0, result.err
    assert "lakefs://sales/dev/tables/c.csv" in result.out

    stat = json.loads(cli("fs", "stat", "lakefs://sales/dev/tables/c.csv", "--json").out)
    assert stat["size_bytes"] == len(data)
    assert stat["checksum"] == "blake3:" + blake3.blake3(data).hexdigest()
    assert stat["content_type"] == "text/csv"
    human = cli("fs", "stat", "lakefs://sales/dev/tables/c.csv").out
    assert "Checksum:" in human and stat["checksum"] in human

    assert cli("fs", "cat", "lakefs://sales/dev/tables/c.csv").out == data.decode()

    target = tmp_path / "out.csv"
    result = cli("fs", "download", "lakefs://sales/dev/tables/c.csv", "--dest", target)
    assert result.code == 0, result.err
    assert target.read_bytes() == data
    assert [p.name for p in tmp_path.iterdir() if "lakefuse-part" in p.name] == []

    into_dir = tmp_path / "dir"
    into_dir.mkdir()
    assert cli("fs", "download", "lakefs://sales/dev/tables/c.csv", "--dest", into_dir).code == 0
    assert (into_dir / "c.csv").read_bytes() == data

    to_stdout = cli("fs", "download", "lakefs://sales/dev/tables/c.csv", "--dest", "-")
    assert to_stdout.out == data.decode()


def test_upload_to_a_directory_path_appends_the_file_name(cli, sales, tmp_path):
    source = tmp_path / "notes.txt"
    source.write_text("n")
    assert cli("fs", "upload", "lakefs://sales/dev/docs/", "--source", source).code == 0
    assert cli("fs", "cat", "lakefs://sales/dev/docs/notes.txt").out == "n"


def test_upload_from_stdin_in_process(cli, sales):
    result = cli("fs", "upload", "lakefs://sales/dev/in.txt", "--source", "-", "--content-type", "text/x-test",
                 stdin=b"from stdin\n")
    assert result.code == 0, result.err
    assert cli("fs", "cat", "lakefs://sales/dev/in.txt").out == "from stdin\n"
    assert json.loads(cli("fs", "stat", "lakefs://sales/dev/in.txt", "--json").out)["content_type"] == "text/x-test"


def test_upload_recursive_stages_every_file_then_download_recursive(cli, sales, tmp_path):
    tree = tmp_path / "tree"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "one.csv").write_text("1")
    (tree / "sub" / "two.json").write_text("{}")
    (tree / "sub" / "deeper" / "three.txt").write_text("3")
    result = cli("fs", "upload", "lakefs://sales/dev/imported", "--source", tree, "--recursive")
    assert result.code == 0, result.err
    assert "3 objects" in result.out
    assert cli("diff", "lakefs://sales/dev").out.splitlines() == [
        "+ imported/one.csv", "+ imported/sub/deeper/three.txt", "+ imported/sub/two.json"]

    out_dir = tmp_path / "down"
    result = cli("fs", "download", "lakefs://sales/dev/imported/", "--dest", out_dir, "--recursive")
    assert result.code == 0, result.err
    assert (out_dir / "sub" / "deeper" / "three.txt").read_text() == "3"
    assert (out_dir / "one.csv").read_text() == "1"


def test_ls_groups_by_directory_and_recursive_lists_all(cli, sales):
    top = cli("fs", "ls", "lakefs://sales/main/")
    assert top.code == 0, top.err
    rows = [line.split() for line in top.out.splitlines()]
    assert rows[0][0] == "object" and rows[0][-1] == "README.md"  # bytewise order: 'R' < 'a'
    assert rows[1] == ["common_prefix", "a/"]

    inside = cli("fs", "ls", "lakefs://sales/main/a/").out.splitlines()
    assert [line.split()[-1] for line in inside] == ["b.csv"]

    everything = json.loads(cli("fs", "ls", "-r", "lakefs://sales/main", "--json").out)
    assert [item["path"] for item in everything] == ["README.md", "a/b.csv"]
    assert all(item["path_type"] == "object" for item in everything)
    grouped = json.loads(cli("fs", "ls", "lakefs://sales/main", "--json").out)
    assert grouped[1] == {"path": "a/", "path_type": "common_prefix"}
    assert json.loads(cli("fs", "ls", "lakefs://sales/main/nothing/", "--json").out) == []


def test_ls_reads_tags_and_ref_expressions(cli, sales):
    assert [line.split()[-1] for line in cli("fs", "ls", "-r", "lakefs://sales/main~1").out.splitlines()] == ["a/b.csv"]
    assert "README.md" in cli("fs", "ls", "lakefs://sales/v1/").out


def test_rm_single_and_recursive(cli, sales, tmp_path):
    result = cli("fs", "rm", "lakefs://sales/dev/README.md")
    assert result.code == 0, result.err
    assert cli("diff", "lakefs://sales/dev").out == "- README.md\n"

    source = tmp_path / "f"
    source.write_text("x")
    for path in ("t/1", "t/2", "t/sub/3"):
        assert cli("fs", "upload", f"lakefs://sales/dev/{path}", "--source", source).code == 0
    assert cli("commit", "lakefs://sales/dev", "-m", "three").code == 0
    result = cli("fs", "rm", "--recursive", "lakefs://sales/dev/t/")
    assert result.code == 0, result.err
    assert "3 objects" in result.out
    assert cli("diff", "lakefs://sales/dev/t/").out.splitlines() == ["- t/1", "- t/2", "- t/sub/3"]


def test_download_defaults_to_the_object_name_in_the_current_directory(cli, sales, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli("fs", "download", "lakefs://sales/main/a/b.csv")
    assert result.code == 0, result.err
    assert (tmp_path / "b.csv").read_text() == "x,y\n1,2\n"


def test_cat_of_a_corrupted_object_exits_11(cli, sales):
    import json as _json

    from lakefuse.app import App

    stat = _json.loads(cli("fs", "stat", "lakefs://sales/main/a/b.csv", "--json").out)
    app = App.from_config()
    try:
        app.block_for_repository("sales").put(stat["physical_address"], b"x,y\n9,9\n")
    finally:
        app.close()
    result = cli("fs", "cat", "lakefs://sales/main/a/b.csv")
    assert result.code == 11 and "differs from entry checksum" in result.err
    result = cli("fs", "download", "lakefs://sales/main/a/b.csv", "--dest", "-")
    assert result.code == 11


def _stage_posix_entries(repo: str, branch: str) -> None:
    """Entries as the mount writes them: a symbolic link, a FIFO, a character device, a file
    with owner and mode (``lakefuse.posix`` keys)."""
    from lakefuse.app import App

    app = App.from_config()
    try:
        catalog = app.catalog
        catalog.upload_bytes(repo, branch, "posix/link", b"../a/b.csv", metadata={
            "lakefuse-type": "symlink", "lakefuse-target": "../a/b.csv", "lakefuse-uid": "1000", "lakefuse-gid": "100"})
        catalog.upload_bytes(repo, branch, "posix/pipe", b"", metadata={"lakefuse-type": "fifo", "lakefuse-mode": "640"})
        catalog.upload_bytes(repo, branch, "posix/tty", b"", metadata={
            "lakefuse-type": "char", "lakefuse-mode": "620", "lakefuse-rdev": "4:1"})
        catalog.upload_bytes(repo, branch, "posix/tool", b"#!/bin/sh\n", metadata={
            "lakefuse-mode": "4755", "lakefuse-uid": "0", "lakefuse-gid": "0",
            "lakefuse-mtime-ns": "1700000000123456789", "lakefuse-ctime-ns": "1700000001000000000"})
    finally:
        app.close()


def test_ls_stat_and_diff_show_links_special_files_and_owners(cli, sales):
    _stage_posix_entries(sales, "dev")
    listing = cli("fs", "ls", "lakefs://sales/dev/posix/").out.splitlines()
    kinds = {line.split()[-1] if "->" not in line else line.split()[-3]: line.split()[0] for line in listing}
    assert kinds == {"link": "symlink", "pipe": "fifo", "tty": "char", "tool": "object"}
    assert [line for line in listing if "->" in line][0].endswith("link -> ../a/b.csv")

    human = cli("fs", "stat", "lakefs://sales/dev/posix/link").out
    assert "Type:" in human and "symlink" in human and "lrwxrwxrwx (0777)" in human
    assert "Link target:" in human and "../a/b.csv" in human and "1000:100" in human
    tool = cli("fs", "stat", "lakefs://sales/dev/posix/tool").out
    assert "-rwsr-xr-x (4755)" in tool and "0:0" in tool and "Change time:" in tool
    tty = json.loads(cli("fs", "stat", "lakefs://sales/dev/posix/tty", "--json").out)
    assert tty["posix"] == {"type": "char", "mode": "0620", "rdev": "4:1"}
    assert "crw--w----" in cli("fs", "stat", "lakefs://sales/dev/posix/tty").out
    plain = json.loads(cli("fs", "stat", "lakefs://sales/dev/dev.txt", "--json").out)
    assert "posix" not in plain  # old entries: shown exactly as before
    assert "Mode:" not in cli("fs", "stat", "lakefs://sales/dev/dev.txt").out

    diff = cli("diff", "lakefs://sales/dev").out.splitlines()
    assert diff == ["+ posix/link -> ../a/b.csv", "+ posix/pipe (fifo)", "+ posix/tool", "+ posix/tty (char 4:1)"]
    as_json = json.loads(cli("diff", "lakefs://sales/dev", "--json").out)
    assert [d["right"]["posix"]["type"] for d in as_json] == ["symlink", "fifo", "file", "char"]
