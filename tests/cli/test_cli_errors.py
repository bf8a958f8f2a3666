"""Bad input prints one line ``lakefuse: error: ...`` on stderr, exits with the code of its kind
(see ``lakefuse.errors``) and writes nothing; the error boundary's other cases (internal errors,
interrupts, broken pipes, merge conflicts, failed hooks)."""

from __future__ import annotations

import contextlib
import io
import json
import socket
import subprocess
import sys

import pytest

from lakefuse.cli.main import main

from .conftest import REPO_ROOT, snapshot

NOT_FOUND, USAGE, EXISTS, CONFLICT, NO_CHANGES, DIRTY, HOOK, READ_ONLY = 3, 2, 4, 5, 6, 7, 8, 10


@pytest.fixture(scope="module")
def shared_home(tmp_path_factory):
    """One ``sales`` repository for every case of this module (cases must not change it: each
    asserts so).  Returns (home, baseline snapshot, a local file, a local directory)."""
    home = tmp_path_factory.mktemp("cli-errors-home")
    files = tmp_path_factory.mktemp("cli-errors-files")
    source = files / "b.csv"
    source.write_text("x,y\n")
    (files / "dir").mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAKEFUSE_HOME", str(home))
        steps = [
            ("repo", "create", "lakefs://sales"),
            ("fs", "upload", "lakefs://sales/main/a/b.csv", "--source", source),
            ("commit", "lakefs://sales/main", "-m", "add b"),
            ("tag", "create", "lakefs://sales/v1", "lakefs://sales/main"),
            ("branch", "create", "lakefs://sales/dev", "--source", "lakefs://sales/main"),
            ("fs", "upload", "lakefs://sales/dev/dev.txt", "--source", source),
            ("commit", "lakefs://sales/dev", "-m", "add dev.txt"),
            ("branch", "create", "lakefs://sales/clean", "--source", "lakefs://sales/dev"),
            ("fs", "upload", "lakefs://sales/dev/staged.txt", "--source", source),
            ("repo", "create", "lakefs://other"),
        ]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            for step in steps:
                assert main([str(a) for a in step]) == 0, (step, err.getvalue())
        baseline = snapshot()
    return home, baseline, source, files / "dir"


@pytest.fixture
def shared(shared_home, monkeypatch):
    home, baseline, source, directory = shared_home
    monkeypatch.setenv("LAKEFUSE_HOME", str(home))
    return baseline, str(source), str(directory)


CASES = [
    # unknown repository
    (NOT_FOUND, ["branch", "list", "lakefs://nope"], "repository 'nope' not found"),
    (NOT_FOUND, ["branch", "create", "lakefs://nope/x", "--source", "lakefs://nope/main"], "nope"),
    (NOT_FOUND, ["tag", "list", "lakefs://nope"], "nope"),
    (NOT_FOUND, ["fs", "ls", "lakefs://nope/main/"], "nope"),
    (NOT_FOUND, ["fs", "upload", "lakefs://nope/main/x", "--source", "{source}"], "nope"),
    (NOT_FOUND, ["commit", "lakefs://nope/main", "-m", "x"], "nope"),
    (NOT_FOUND, ["log", "lakefs://nope/main"], "nope"),
    (NOT_FOUND, ["repo", "show", "lakefs://nope"], "nope"),
    (NOT_FOUND, ["repo", "delete", "lakefs://nope", "--yes"], "nope"),
    # unknown ref or object
    (NOT_FOUND, ["branch", "create", "lakefs://sales/x", "--source", "lakefs://sales/nope"], "'nope' not found"),
    (NOT_FOUND, ["log", "lakefs://sales/nope"], "nope"),
    (NOT_FOUND, ["show", "lakefs://sales/main~5"], "main~5"),
    (NOT_FOUND, ["diff", "lakefs://sales/main", "lakefs://sales/nope"], "nope"),
    (NOT_FOUND, ["diff", "lakefs://sales/nope"], "nope"),
    (NOT_FOUND, ["merge", "lakefs://sales/nope", "lakefs://sales/main"], "nope"),
    (NOT_FOUND, ["merge", "lakefs://sales/dev", "lakefs://sales/nope"], "nope"),
    (NOT_FOUND, ["commit", "lakefs://sales/nope", "-m", "x"], "nope"),
    (NOT_FOUND, ["fs", "upload", "lakefs://sales/nope/x", "--source", "{source}"], "nope"),
    (NOT_FOUND, ["fs", "cat", "lakefs://sales/main/missing.csv"], "missing.csv"),
    (NOT_FOUND, ["fs", "stat", "lakefs://sales/main/a/"], "a/"),
    (NOT_FOUND, ["fs", "download", "lakefs://sales/main/missing.csv", "--dest", "{directory}"], "missing.csv"),
    (NOT_FOUND, ["fs", "rm", "lakefs://sales/dev/missing.csv"], "missing.csv"),
    (NOT_FOUND, ["fs", "rm", "-r", "lakefs://sales/dev/missing/"], "missing"),
    (NOT_FOUND, ["branch", "delete", "lakefs://sales/nope"], "nope"),
    (NOT_FOUND, ["branch", "show", "lakefs://sales/nope"], "nope"),
    (NOT_FOUND, ["branch", "reset", "lakefs://sales/nope"], "nope"),
    (NOT_FOUND, ["branch", "revert", "lakefs://sales/dev", "nope"], "nope"),
    (NOT_FOUND, ["tag", "show", "lakefs://sales/nope"], "nope"),
    (NOT_FOUND, ["tag", "delete", "lakefs://sales/nope"], "nope"),
    # invalid names
    (USAGE, ["repo", "create", "lakefs://Bad_Name"], "invalid repository name"),
    (USAGE, ["repo", "create", "lakefs://new-repo", "--default-branch", "bad name"], "invalid branch name"),
    (USAGE, ["repo", "create", "lakefs://new-repo", "ftp://bucket/x"], "storage namespace"),
    (USAGE, ["branch", "create", "lakefs://sales/bad~name", "--source", "lakefs://sales/main"], "invalid branch name"),
    (USAGE, ["branch", "create", "lakefs://sales/cafe", "--source", "lakefs://sales/main"], "commit ID"),
    (USAGE, ["tag", "create", "lakefs://sales/v:1", "lakefs://sales/main"], "invalid tag name"),
    (USAGE, ["tag", "create", "lakefs://sales/" + "t" * 256, "lakefs://sales/main"], "at most 255"),
    # bad usage
    (USAGE, ["fs", "ls", "sales/main"], "not a lakefs:// URI"),
    (USAGE, ["log", "lakefs://sales"], "a ref is required"),
    (USAGE, ["show", "lakefs://sales/main/path"], "unexpected path"),
    (USAGE, ["fs", "cat", "lakefs://sales/main"], "object path is required"),
    (USAGE, ["commit", "lakefs://sales/dev"], "-m/--message"),
    (USAGE, ["commit", "lakefs://sales/dev", "-m", "  "], "must not be empty"),
    (USAGE, ["commit", "lakefs://sales/dev", "-m", "x", "--meta", "novalue"], "KEY=VALUE"),
    (USAGE, ["commit", "lakefs://sales/dev", "-m", "x", "--meta", "k=1", "--meta", "k=2"], "more than once"),
    (USAGE, ["commit", "lakefs://sales/dev", "-m", "x", "--committer", ""], "--committer"),
    (USAGE, ["commit", "./not-a-mount", "-m", "x"], "no such file"),
    (USAGE, ["log", "lakefs://sales/main", "--amount", "0"], "at least 1"),
    (USAGE, ["merge", "lakefs://sales/dev", "lakefs://sales/main", "--strategy", "ours"], "invalid choice"),
    (USAGE, ["merge", "lakefs://sales/dev", "lakefs://other/main"], "different repositories"),
    (USAGE, ["branch", "create", "lakefs://sales/x", "--source", "lakefs://other/main"], "different repositories"),
    (USAGE, ["branch", "delete", "lakefs://sales/main"], "default branch"),
    (USAGE, ["branch", "revert", "lakefs://sales/dev", "lakefs://other/main"], "not in repository"),
    (USAGE, ["branch", "revert", "lakefs://sales/main", "main~1"], "initial commit"),
    (USAGE, ["diff", "lakefs://sales/v1"], "only a branch"),
    (USAGE, ["fs", "upload", "lakefs://sales/dev/x", "--source", "/nonexistent/file"], "no such readable file"),
    (USAGE, ["fs", "upload", "lakefs://sales/dev/x", "--source", "{directory}"], "--recursive"),
    (USAGE, ["fs", "upload", "lakefs://sales/dev/x/", "--source", "{directory}", "--recursive"], "no files"),
    (USAGE, ["fs", "upload", "lakefs://sales/dev/x", "--source", "-", "--recursive"], "not stdin"),
    (USAGE, ["fs", "download", "lakefs://sales/main/a/b.csv", "--dest", "/nonexistent/dir/f"], "does not exist"),
    (USAGE, ["mount", "{directory}", "--change-poll", "-1"], "between 0 and 3600"),
    (USAGE, ["mount", "{directory}", "--change-poll", "soon"], "not a number of seconds"),
    (USAGE, ["mount", "{directory}", "--branch-timeout", "-1"], "between 0 and 86400"),
    (USAGE, ["mount", "{directory}", "--branch-timeout", "a day"], "not a number of seconds"),
    (USAGE, ["mount", "{directory}", "--names-only-for", "/usr/bin/find"], "not a program name"),
    (USAGE, ["mount", "{directory}", "--names-only-for", "a-program-name-too-long"], "at most 15 bytes"),
    (USAGE, ["mount", "{directory}", "--spin-us", "1.5"], "not a whole number of microseconds"),
    (USAGE, ["mount", "{directory}", "--spin-us", "200000"], "between 0 and 100000"),
    (USAGE, ["mount", "{directory}", "--metadata-entries", "0"], "between 1 and 1000000000"),
    (USAGE, ["mount", "{directory}", "--metadata-entries", "many"], "not a whole number of entries"),
    (USAGE, ["mount", "{directory}", "--cache-ram-bytes", "64MiB", "--cache-scan-bytes", "128MiB"], "must not exceed"),
    (USAGE, ["mount", "{directory}", "--cache-scan-bytes", "lots"], "cannot parse size"),
    (USAGE, ["no-such-command"], "invalid choice"),
    (USAGE, ["branch"], "required"),
    (USAGE, ["--config", "/nonexistent/config.yaml", "repo", "list"], "does not exist"),
    # already exists
    (EXISTS, ["repo", "create", "lakefs://sales"], "already exists"),
    (EXISTS, ["branch", "create", "lakefs://sales/dev", "--source", "lakefs://sales/main"], "exists"),
    (EXISTS, ["branch", "create", "lakefs://sales/v1", "--source", "lakefs://sales/main"], "tag"),
    (EXISTS, ["tag", "create", "lakefs://sales/v1", "lakefs://sales/dev"], "exists"),
    (EXISTS, ["tag", "create", "lakefs://sales/dev", "lakefs://sales/main"], "branch"),
    # no changes
    (NO_CHANGES, ["commit", "lakefs://sales/main", "-m", "nothing"], "nothing to commit"),
    (NO_CHANGES, ["merge", "lakefs://sales/main", "lakefs://sales/clean"], "already contained"),
    (NO_CHANGES, ["commit", "lakefs://sales/clean", "-m", "nothing", "--meta", "k=v"], "nothing to commit"),
    # dirty branch (dev has a staged file)
    (DIRTY, ["merge", "lakefs://sales/main", "lakefs://sales/dev", "--strategy", "dest-wins"],
     "uncommitted changes"),
    (DIRTY, ["branch", "revert", "lakefs://sales/dev", "dev"], "uncommitted changes"),
    # read-only refs
    (READ_ONLY, ["fs", "upload", "lakefs://sales/v1/x", "--source", "{source}"], "read-only"),
    (READ_ONLY, ["fs", "rm", "lakefs://sales/v1/a/b.csv"], "read-only"),
    (READ_ONLY, ["commit", "lakefs://sales/v1", "-m", "x"], "read-only"),
    (READ_ONLY, ["commit", "lakefs://sales/main~1", "-m", "x"], "read-only"),
    (READ_ONLY, ["merge", "lakefs://sales/dev", "lakefs://sales/v1"], "read-only"),
    (READ_ONLY, ["branch", "revert", "lakefs://sales/v1", "main"], "read-only"),
]


def _case_id(case) -> str:
    code, argv, _ = case
    return f"{code}-" + "-".join(a.replace("lakefs://", "").replace("/", "_")[:20] for a in argv[:3])


@pytest.mark.parametrize("code, argv, fragment", CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_prints_one_line_exits_with_its_code_and_writes_nothing(cli, shared, code, argv, fragment):
    baseline, source, directory = shared
    argv = [a.format(source=source, directory=directory) for a in argv]
    result = cli(*argv)
    assert result.code == code, result.err
    assert len(result.err_lines) == 1, result.err
    assert result.err.startswith("lakefuse: error: ")
    assert fragment in result.err
    assert result.out == ""
    assert snapshot() == baseline


def test_merge_conflict_lists_the_paths_and_exits_5(cli, sales, tmp_path):
    for branch in ("main", "dev"):
        source = tmp_path / branch
        source.write_text(branch)
        for path in ("a/b.csv", "README.md"):
            assert cli("fs", "upload", f"lakefs://sales/{branch}/{path}", "--source", source).code == 0
        assert cli("commit", f"lakefs://sales/{branch}", "-m", f"{branch} edits").code == 0
    before = snapshot()
    result = cli("merge", "lakefs://sales/dev", "lakefs://sales/main")
    assert result.code == CONFLICT
    lines = result.err_lines
    assert lines[0].startswith("lakefuse: error: ") and "conflict" in lines[0]
    assert lines[1:] == ["conflict: README.md", "conflict: a/b.csv"]
    assert result.out == ""
    assert snapshot() == before


def test_dirty_destination_of_a_merge_exits_7_and_writes_nothing(cli, sales, tmp_path):
    source = tmp_path / "f"
    source.write_text("staged")
    assert cli("fs", "upload", "lakefs://sales/main/staged.txt", "--source", source).code == 0
    before = snapshot()
    result = cli("merge", "lakefs://sales/dev", "lakefs://sales/main")
    assert result.code == DIRTY and len(result.err_lines) == 1
    assert snapshot() == before


def _closed_port() -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def test_failing_pre_commit_hook_names_action_and_hook_and_exits_8(cli, sales, tmp_path):
    action = tmp_path / "check.yaml"
    action.write_text(
        "name: quality gate\n"
        "on:\n  pre-commit:\n"
        "hooks:\n"
        "  - id: no_csv\n    type: webhook\n"
        f"    properties:\n      url: http://127.0.0.1:{_closed_port()}/hook\n      timeout: 5s\n")
    assert cli("fs", "upload", "lakefs://sales/dev/_lakefs_actions/check.yaml", "--source", action).code == 0
    before = snapshot()
    result = cli("commit", "lakefs://sales/dev", "-m", "guarded")
    assert result.code == HOOK, result.err
    assert len(result.err_lines) == 1
    assert "no_csv" in result.err and "quality gate" in result.err and "pre-commit" in result.err
    after = snapshot()
    before.pop("_files"), after.pop("_files")  # the run's manifest and log are stored, nothing else
    assert after == before


def test_internal_error_is_one_line_without_traceback_unless_debug(cli, sales, monkeypatch):
    from lakefuse.catalog import Catalog

    def boom(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(Catalog, "list_branches", boom)
    result = cli("branch", "list", "lakefs://sales")
    assert result.code == 1
    assert result.err_lines == ["lakefuse: internal error: RuntimeError: boom second line"]

    monkeypatch.setenv("LAKEFUSE_DEBUG", "1")
    result = cli("branch", "list", "lakefs://sales")
    assert result.code == 1 and "Traceback" in result.err


def test_keyboard_interrupt_exits_130(cli, sales, monkeypatch):
    from lakefuse.catalog import Catalog

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Catalog, "list_tags", interrupted)
    result = cli("tag", "list", "lakefs://sales")
    assert result.code == 130


def test_broken_pipe_on_stdout_exits_quietly_in_process(sales, monkeypatch, capsys):
    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["log", "lakefs://sales/main"]) == 141
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------------------------
# as a real process


def test_exit_codes_and_single_line_in_a_real_process(cli_process):
    assert cli_process("repo", "create", "lakefs://sales").code == 0
    cases = [
        (["branch", "list", "lakefs://nope"], NOT_FOUND),
        (["repo", "create", "lakefs://sales"], EXISTS),
        (["commit", "lakefs://sales/main", "-m", "x"], NO_CHANGES),
        (["branch", "create", "lakefs://sales/a b", "--source", "lakefs://sales/main"], USAGE),
        (["bogus"], USAGE),
    ]
    for argv, code in cases:
        result = cli_process(*argv)
        assert result.code == code, (argv, result.err)
        assert len(result.err_lines) == 1 and result.err.startswith("lakefuse: error: "), result.err
        assert result.out == ""


def test_upload_from_stdin_and_cat_in_a_real_process(cli_process):
    assert cli_process("repo", "create", "lakefs://sales").code == 0
    data = bytes(range(256)) * 1000
    result = cli_process("fs", "upload", "lakefs://sales/main/blob.bin", "--source", "-", stdin=data)
    assert result.code == 0, result.err
    done = subprocess.run([sys.executable, "-m", "lakefuse.cli.main", "fs", "cat", "lakefs://sales/main/blob.bin"],
                          capture_output=True, timeout=60, cwd=str(REPO_ROOT))
    assert done.returncode == 0 and done.stdout == data


def test_broken_pipe_in_a_real_process_exits_141_quietly(cli, tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"z" * (2 * 1024 * 1024))  # more than the pipe buffer and one write
    assert cli("repo", "create", "lakefs://sales").code == 0
    assert cli("fs", "upload", "lakefs://sales/main/big", "--source", big).code == 0
    process = subprocess.Popen([sys.executable, "-m", "lakefuse.cli.main", "fs", "cat", "lakefs://sales/main/big"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(REPO_ROOT))
    try:
        assert process.stdout.read(1024) == b"z" * 1024
        process.stdout.close()
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 141
    assert err == b""


def test_json_output_is_valid_for_scripts(cli, sales):
    for argv in (["repo", "list"], ["branch", "list", "lakefs://sales"], ["tag", "list", "lakefs://sales"],
                 ["log", "lakefs://sales/main"], ["diff", "lakefs://sales/main", "lakefs://sales/dev"],
                 ["fs", "ls", "lakefs://sales/main/"], ["fs", "stat", "lakefs://sales/main/a/b.csv"],
                 ["show", "lakefs://sales/main"], ["repo", "show", "lakefs://sales"],
                 ["branch", "show", "lakefs://sales/main"], ["tag", "show", "lakefs://sales/v1"], ["cache", "status"]):
        result = cli(*argv, "--json")
        assert result.code == 0, (argv, result.err)
        json.loads(result.out)


def test_failing_post_commit_hook_is_reported_but_the_commit_stands(cli, sales, tmp_path):
    action = tmp_path / "notify.yaml"
    action.write_text(
        "name: notify\non:\n  post-commit:\nhooks:\n  - id: tell\n    type: webhook\n"
        f"    properties:\n      url: http://127.0.0.1:{_closed_port()}/hook\n      timeout: 5s\n")
    assert cli("fs", "upload", "lakefs://sales/dev/_lakefs_actions/notify.yaml", "--source", action).code == 0
    result = cli("commit", "lakefs://sales/dev", "-m", "with notification", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["message"] == "with notification"
    [line] = result.err_lines
    assert "post-commit" in line and "tell" in line and "ignored" in line
