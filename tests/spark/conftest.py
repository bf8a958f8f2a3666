"""Fixtures of the Spark job tests: ONE local[2] Spark session for the whole test session
(Spark start-up is slow), and per test an ``App`` over a SQLite database and local storage
namespaces in tmp_path, with small ranges so a few hundred objects span several ranges."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="PySpark (the 'spark' extra) is not installed")

from lakefuse.app import App  # noqa: E402
from lakefuse.config import CacheConfig, CommittedConfig, Config  # noqa: E402

SMALL_RANGES = CommittedConfig(range_min_bytes=2000, range_max_bytes=8000, range_raggedness=16)


@pytest.fixture(scope="session")
def spark():
    from lakefuse.spark.session import spark_session

    session = spark_session(
        "local[2]",
        app_name="lakefuse-tests",
        conf={
            "spark.sql.shuffle.partitions": "4",
            "spark.default.parallelism": "2",
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.python.worker.reuse": "true",
        },
    )
    yield session
    session.stop()


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
