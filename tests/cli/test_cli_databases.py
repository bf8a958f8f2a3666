"""One smoke run of the CLI over each database: SQLite (the default) and PostgreSQL (a
throwaway loopback server from ``tests/pgserver.py``, via ``LAKEFUSE_DATABASE_URL``)."""

from __future__ import annotations

import json
import uuid

import pytest

try:
    from tests.pgserver import postgres_url_for_tests
except ModuleNotFoundError:  # tests/ itself is on sys.path (see tests/conftest.py)
    from pgserver import postgres_url_for_tests


@pytest.fixture(scope="session")
def cli_pg_url():
    with postgres_url_for_tests() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, monkeypatch):
    if request.param == "postgres":
        monkeypatch.setenv("LAKEFUSE_DATABASE_URL", request.getfixturevalue("cli_pg_url"))
    return request.param


def test_smoke(cli, database, tmp_path):
    repo = f"smoke-{database}-{uuid.uuid4().hex[:8]}"  # an external LAKEFUSE_TEST_PG_URL may keep old ones
    source = tmp_path / "t.csv"
    source.write_text("a,b\n")
    steps = [
        ("repo", "create", f"lakefs://{repo}"),
        ("fs", "upload", f"lakefs://{repo}/main/t.csv", "--source", source),
        ("commit", f"lakefs://{repo}/main", "-m", "first"),
        ("branch", "create", f"lakefs://{repo}/dev", "--source", f"lakefs://{repo}/main"),
        ("fs", "rm", f"lakefs://{repo}/dev/t.csv"),
        ("commit", f"lakefs://{repo}/dev", "-m", "remove"),
        ("merge", f"lakefs://{repo}/dev", f"lakefs://{repo}/main"),
        ("tag", "create", f"lakefs://{repo}/v1", f"lakefs://{repo}/main~1"),
    ]
    for step in steps:
        result = cli(*step)
        assert result.code == 0, (step, result.err)
    assert cli("diff", f"lakefs://{repo}/v1", f"lakefs://{repo}/main").out == "- t.csv\n"
    assert [c["message"] for c in json.loads(cli("log", f"lakefs://{repo}/main", "--first-parent", "--json").out)][
        :2] == ["Merge 'dev' into 'main'", "first"]
    assert [c["message"] for c in json.loads(cli("log", f"lakefs://{repo}/main", "--json").out)][:3] == [
        "Merge 'dev' into 'main'", "remove", "first"]
    assert cli("fs", "cat", f"lakefs://{repo}/v1/t.csv").out == "a,b\n"
    failed = cli("commit", f"lakefs://{repo}/main", "-m", "nothing")
    assert failed.code == 6 and len(failed.err_lines) == 1
