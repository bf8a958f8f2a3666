"""tests/pgserver.py: a missing PostgreSQL skips locally but fails on CI (CI=true)."""

from __future__ import annotations

import pytest

from tests import pgserver


@pytest.fixture
def no_postgres(monkeypatch):
    monkeypatch.delenv(pgserver.ENV_URL, raising=False)
    monkeypatch.setattr(pgserver, "find_postgres_bin", lambda: None)


def test_missing_postgres_skips_outside_ci(no_postgres, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="PostgreSQL binaries not found"):
        with pgserver.postgres_url_for_tests():
            pass


def test_missing_postgres_fails_on_ci(no_postgres, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required on CI"):
        with pgserver.postgres_url_for_tests():
            pass


def test_env_url_is_used_as_is(monkeypatch):
    monkeypatch.setenv(pgserver.ENV_URL, "postgresql+psycopg://someone@127.0.0.1:5999/x")
    with pgserver.postgres_server() as url:
        assert url == "postgresql+psycopg://someone@127.0.0.1:5999/x"
