"""Suite-wide fixtures: every test gets its own LAKEFUSE_HOME, so nothing touches the user's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# tests/ helpers (s3server, pgserver) are importable as top-level modules
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True)
def lakefuse_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("lakefuse-home")
    monkeypatch.setenv("LAKEFUSE_HOME", str(home))
    for var in ("LAKEFUSE_CONFIG", "LAKEFUSE_DATABASE_URL", "LAKEFUSE_CACHE_DIR",
                "LAKEFUSE_CACHE_DISK_BYTES", "LAKEFUSE_CACHE_RAM_BYTES",
                "LAKEFUSE_S3_ENDPOINT_URL", "LAKEFUSE_S3_REGION"):
        monkeypatch.delenv(var, raising=False)
    return home


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"
