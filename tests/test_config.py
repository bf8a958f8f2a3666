"""Configuration: defaults under LAKEFUSE_HOME, YAML file, environment overrides, bad input."""

from __future__ import annotations

import pytest

from lakefuse.config import load_config, parse_size
from lakefuse.errors import ConfigError


def test_defaults_live_under_lakefuse_home(lakefuse_home):
    cfg = load_config()
    assert cfg.home == lakefuse_home
    assert cfg.database_url == f"sqlite:///{lakefuse_home / 'lakefuse.db'}"
    assert cfg.cache.dir == lakefuse_home / "cache"
    assert cfg.storage_root == lakefuse_home / "storage"


def test_yaml_file_then_environment_override(lakefuse_home, monkeypatch):
    (lakefuse_home / "config.yaml").write_text(
        "database:\n  url: postgresql+psycopg://u@127.0.0.1/db\n"
        "cache:\n  disk_bytes: 2GiB\n  ram_bytes: 64MiB\n"
        "storage:\n  s3:\n    endpoint_url: http://127.0.0.1:9000\n    region: eu-west-1\n"
    )
    cfg = load_config()
    assert cfg.database_url == "postgresql+psycopg://u@127.0.0.1/db"
    assert cfg.cache.disk_bytes == 2 * 1024**3
    assert cfg.cache.ram_bytes == 64 * 1024**2
    assert cfg.s3.endpoint_url == "http://127.0.0.1:9000"
    assert cfg.s3.region == "eu-west-1"
    monkeypatch.setenv("LAKEFUSE_CACHE_RAM_BYTES", "1MB")
    monkeypatch.setenv("LAKEFUSE_DATABASE_URL", "sqlite:///x.db")
    cfg = load_config()
    assert cfg.cache.ram_bytes == 1_000_000
    assert cfg.database_url == "sqlite:///x.db"


def test_config_path_from_environment(tmp_path, monkeypatch):
    path = tmp_path / "other.yaml"
    path.write_text("cache:\n  dir: /tmp/elsewhere\n")
    monkeypatch.setenv("LAKEFUSE_CONFIG", str(path))
    assert str(load_config().cache.dir) == "/tmp/elsewhere"


@pytest.mark.parametrize(
    "text, message",
    [
        ("database: [1, 2\n", "not valid YAML"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("caches:\n  dir: x\n", "unknown section"),
        ("cache:\n  disk_bytes: lots\n", "cannot parse size"),
        ("cache: 3\n", "must be a mapping"),
        ("committed:\n  range_min_bytes: 8MiB\n  range_max_bytes: 1MiB\n", "range_max_bytes"),
    ],
)
def test_bad_config_is_one_clear_error(lakefuse_home, text, message):
    (lakefuse_home / "config.yaml").write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config()
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_missing_explicit_config_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEFUSE_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_config()


@pytest.mark.parametrize(
    "value, expected",
    [(0, 0), (1048576, 1048576), ("512KiB", 512 * 1024), ("10GB", 10 * 10**9), ("4M", 4 * 1024**2), ("7", 7)],
)
def test_parse_size(value, expected):
    assert parse_size(value) == expected


@pytest.mark.parametrize("value", [-1, "many", True, "1.5.2GB"])
def test_parse_size_rejects(value):
    with pytest.raises(ConfigError):
        parse_size(value)


def test_the_share_of_the_ram_cache_walks_may_keep(lakefuse_home, monkeypatch):
    assert load_config().cache.scan_limit == 128 * 1024**2  # the default
    from lakefuse.app import App

    app = App(load_config())
    try:
        assert (app.ram_cache.max_bytes, app.ram_cache.scan_bytes) == (1024**3, 128 * 1024**2)
    finally:
        app.close()
    (lakefuse_home / "config.yaml").write_text("cache:\n  ram_bytes: 64MiB\n")
    assert load_config().cache.scan_limit == 64 * 1024**2  # the default, but no more than all of it
    (lakefuse_home / "config.yaml").write_text("cache:\n  ram_bytes: 1GiB\n  scan_bytes: 1GiB\n")
    assert load_config().cache.scan_limit == 1024**3
    monkeypatch.setenv("LAKEFUSE_CACHE_SCAN_BYTES", "64MiB")
    assert load_config().cache.scan_limit == 64 * 1024**2
    monkeypatch.setenv("LAKEFUSE_CACHE_SCAN_BYTES", "2GiB")
    with pytest.raises(ConfigError, match="cache.scan_bytes .* must not exceed cache.ram_bytes"):
        load_config()
