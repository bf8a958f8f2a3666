"""Commits through ``.lakefuse/commit`` on a real mount fail where the user sees them: a write
that ends with a newline commits before write(2) returns, so ``echo``, ``printf`` and ``tee``
exit non-zero when the commit fails (nothing to commit: ENODATA, a hook rejected it: EPERM,
an empty message: EINVAL) and zero when it succeeds; a message without a newline commits at
close, so Python's ``write()`` + ``close()`` raises there.  Reading the file shows the last
result either way."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakemount import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "actions"))
from actions_helpers import action_yaml, running_hook_server  # noqa: E402

#: each writes MESSAGE (+ newline where the tool adds one) to the file named by $TARGET
SHELL_WRITERS = {
    "echo": 'echo "$MESSAGE" > "$TARGET"',
    "printf": 'printf "%s\\n" "$MESSAGE" > "$TARGET"',
    "tee": 'echo "$MESSAGE" | tee "$TARGET" > /dev/null',
}


def shell_write(tool: str, target: Path, message: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", SHELL_WRITERS[tool]], env=dict(os.environ, TARGET=str(target), MESSAGE=message),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def python_write(target: Path, message: str) -> None:
    """Python's buffered text write: the bytes reach the mount at close()."""
    with open(target, "w") as control:
        control.write(message)


@pytest.mark.parametrize("tool", sorted(SHELL_WRITERS))
def test_shell_tools_exit_zero_on_a_commit_and_non_zero_when_nothing_changed(branch, lake_home, tool):
    control = branch / ".lakefuse/commit"
    (branch / f"by-{tool}.txt").write_text(tool)
    done = shell_write(tool, control, f"add by-{tool}.txt")
    assert done.returncode == 0, done.stderr
    commit_id = control.read_text().strip()
    assert lake_home.catalog.get_commit("sales", commit_id).message == f"add by-{tool}.txt"
    assert (branch / ".lakefuse/head").read_text().strip() == commit_id

    failed = shell_write(tool, control, "nothing new")
    assert failed.returncode != 0
    assert os.strerror(errno.ENODATA) in failed.stderr
    assert control.read_text().startswith("error: nothing to commit")
    assert (branch / ".lakefuse/head").read_text().strip() == commit_id


def test_an_empty_message_fails_the_write_with_einval(branch):
    (branch / "empty-message.txt").write_text("x")
    failed = shell_write("echo", branch / ".lakefuse/commit", "")
    assert failed.returncode != 0 and os.strerror(errno.EINVAL) in failed.stderr
    assert (branch / ".lakefuse/commit").read_text() == "error: empty commit message\n"
    assert "+ empty-message.txt" in (branch / ".lakefuse/status").read_text()


def test_python_write_and_close_raise_on_failure_and_not_on_success(branch, lake_home):
    control = branch / ".lakefuse/commit"
    with pytest.raises(OSError) as exc:
        python_write(control, "no newline, nothing staged")
    assert exc.value.errno == errno.ENODATA
    with pytest.raises(OSError) as exc:
        python_write(control, "with a newline, nothing staged\n")
    assert exc.value.errno == errno.ENODATA

    (branch / "py.txt").write_text("p")
    python_write(control, "add py.txt")
    commit_id = control.read_text().strip()
    assert lake_home.catalog.get_commit("sales", commit_id).message == "add py.txt"


def test_an_unbuffered_write_with_a_newline_fails_at_write_not_close(branch):
    descriptor = os.open(branch / ".lakefuse/commit", os.O_WRONLY | os.O_TRUNC)
    try:
        with pytest.raises(OSError) as exc:
            os.write(descriptor, b"nothing staged\n")
        assert exc.value.errno == errno.ENODATA
    finally:
        os.close(descriptor)  # the failed message is not committed again at close


@pytest.mark.parametrize("tool", ["echo", "tee"])
def test_a_rejecting_hook_fails_the_shell_tool_with_eperm_and_keeps_the_staged_change(
        branch, lake_home, monkeypatch, capsys, tmp_path, tool):
    with running_hook_server() as server:
        server.switch_status = 403
        action_file = tmp_path / "gate.yaml"
        action_file.write_bytes(action_yaml("Gate", [("gate", server.url("/switch"))],
                                            on=f"  pre-commit:\n    branches: [{branch.name}]\n"))
        run_cli(monkeypatch, capsys, lake_home, "fs", "upload",
                f"lakefs://sales/{branch.name}/_lakefs_actions/gate.yaml", "--source", str(action_file))
        (branch / "gated.txt").write_text("g")
        head = (branch / ".lakefuse/head").read_text().strip()

        failed = shell_write(tool, branch / ".lakefuse/commit", "add gated.txt")
        assert failed.returncode != 0
        assert os.strerror(errno.EPERM) in failed.stderr
        assert "pre-commit hook 'gate'" in (branch / ".lakefuse/commit").read_text()
        assert (branch / ".lakefuse/head").read_text().strip() == head
        assert "+ gated.txt" in (branch / ".lakefuse/status").read_text()

        server.switch_status = 200
        done = shell_write(tool, branch / ".lakefuse/commit", "add gated.txt")
        assert done.returncode == 0, done.stderr
        assert (branch / ".lakefuse/head").read_text().strip() != head
