"""Fixtures of the Spark job tests: ONE local[2] Spark session for the whole test session
(Spark start-up is slow; the ``spark`` fixture lives in tests/sparksession.py, shared with
tests/fuse), and per test an ``App`` over a SQLite database and local storage
namespaces in tmp_path, with small ranges so a few hundred objects span several ranges."""

from __future__ import annotations

import pytest

from lakefuse.app import App
from lakefuse.config import CacheConfig, CommittedConfig, Config
from sparksession import spark  # noqa: F401  (the shared session: skips without PySpark/Java, fails under CI=true)

SMALL_RANGES = CommittedConfig(range_min_bytes=2000, range_max_bytes=8000, range_raggedness=16)


@pytest.fixture
def app_config(tmp_path) -> Config:
    return Config(
        home=tmp_path / "home",
        database_url=f"sqlite:///{tmp_path}/lakefuse.db",
        cache=CacheConfig(dir=tmp_path / "cache", disk_bytes=64 * 1024**2, ram_bytes=16 * 1024**2),
        committed=SMALL_RANGES,
    )


@pytest.fixture
def app(app_config):
    application = App.from_config(app_config)
    yield application
    application.close()


@pytest.fixture
def repo(app, tmp_path) -> str:
    app.catalog.create_repository("repo1", f"local://{tmp_path}/storage/repo1")
    return "repo1"
