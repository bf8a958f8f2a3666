"""Fixtures of the CLI tests: run ``lakefuse`` in-process (``cli``) or as a real subprocess
(``cli_process``), a repository with history (``sales``), and ``snapshot()`` of everything a
command could have written (refs, staged changes, stored files) to assert "nothing written"."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakefuse.cli.main import main

REPO_ROOT = Path(__file__).resolve().parents[2]
PROCESS_TIMEOUT_S = 60


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return self.err.splitlines()


@pytest.fixture
def cli(capsys, monkeypatch):
    """``cli("repo", "list", stdin=b"...")`` -> Result, running ``main`` in this process."""

    def run(*argv: str, stdin: bytes | None = None) -> Result:
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        code = main([str(arg) for arg in argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def cli_process():
    """``cli_process("repo", "list", stdin=b"...")`` -> Result, a real ``python -m lakefuse.cli.main``."""

    def run(*argv: str, stdin: bytes | None = None, env: dict | None = None) -> Result:
        environment = dict(os.environ)
        environment["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + environment.get("PYTHONPATH", "")
        environment.update(env or {})
        done = subprocess.run(
            [sys.executable, "-m", "lakefuse.cli.main", *map(str, argv)],
            input=stdin if stdin is not None else b"", capture_output=True, timeout=PROCESS_TIMEOUT_S,
            env=environment, cwd=str(REPO_ROOT),
        )
        return Result(done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))

    return run


def snapshot() -> dict:
    """Everything a command may change: repositories, branches (head + uncommitted changes),
    tags, and the files stored under the storage root."""
    from lakefuse.app import App

    app = App.from_config()
    try:
        catalog = app.catalog
        state: dict = {}
        for repo in catalog.list_repositories():
            branches = {
                branch.id: (branch.commit_id, tuple((d.type.value, d.path, d.right.checksum if d.right else None)
                                                    for d in catalog.diff_uncommitted(repo.id, branch.id)))
                for branch in catalog.list_branches(repo.id)
            }
            state[repo.id] = {"namespace": repo.storage_namespace, "branches": branches,
                              "tags": dict(catalog.list_tags(repo.id))}
        root = app.config.storage_root
        state["_files"] = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []
        return state
    finally:
        app.close()


@pytest.fixture
def sales(cli, tmp_path):
    """Repository ``sales``: main has a/b.csv (commit "add b") and README, dev has one more
    commit (dev.txt), tag v1 at main."""
    source = tmp_path / "b.csv"
    source.write_text("x,y\n1,2\n")
    steps = [
        ("repo", "create", "lakefs://sales"),
        ("fs", "upload", "lakefs://sales/main/a/b.csv", "--source", source),
        ("commit", "lakefs://sales/main", "-m", "add b"),
        ("fs", "upload", "lakefs://sales/main/README.md", "--source", source),
        ("commit", "lakefs://sales/main", "-m", "add readme"),
        ("tag", "create", "lakefs://sales/v1", "lakefs://sales/main"),
        ("branch", "create", "lakefs://sales/dev", "--source", "lakefs://sales/main"),
        ("fs", "upload", "lakefs://sales/dev/dev.txt", "--source", source),
        ("commit", "lakefs://sales/dev", "-m", "add dev.txt"),
    ]
    for step in steps:
        result = cli(*step)
        assert result.code == 0, (step, result.err)
    return "sales"
