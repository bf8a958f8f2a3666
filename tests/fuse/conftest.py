"""Fixtures of the kernel mount tests: a lakefuse home seeded through the core (module-wide),
every repository mounted read-write, and a fresh branch per test.  See lakemount.py.  The
``spark`` fixture is the suite's one shared local SparkSession (tests/sparksession.py)."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from lakemount import LakeHome, MountedLake, require_fuse
from sparksession import spark  # noqa: F401  (shared with tests/spark: one JVM per test session)

_names = itertools.count()


@pytest.fixture(scope="module")
def lake_home(tmp_path_factory):
    require_fuse()
    home = LakeHome(tmp_path_factory.mktemp("lakehome"))
    home.create_repository("sales")
    catalog = home.catalog
    catalog.upload_bytes("sales", "main", "data/a.csv", b"id,v\n1,2\n")
    catalog.upload_bytes("sales", "main", "data/sub/b.txt", b"bee")
    catalog.upload_bytes("sales", "main", "readme.md", b"# sales\n")
    catalog.commit("sales", "main", "seed", "tests")
    catalog.create_tag("sales", "v1", "main")
    yield home
    home.close()


@pytest.fixture(scope="module")
def lake(lake_home, tmp_path_factory):
    """Every repository mounted read-write (module-wide: tests use their own branches)."""
    mount = MountedLake(lake_home, tmp_path_factory.mktemp("mnt") / "lake")
    mount.start()
    yield mount
    mount.stop()


@pytest.fixture
def branch(lake_home, lake):
    """A fresh branch of sales (from main) and its directory in the mount."""
    name = f"b{next(_names)}-{os.getpid()}"
    lake_home.catalog.create_branch("sales", name, "main")
    return lake / f"sales/{name}"


@pytest.fixture(scope="module")
def shared_lake(lake_home):
    """Every repository mounted read-write with ``--allow-other``, under a directory every user
    can traverse (the POSIX tests act as other users too)."""
    root = Path(tempfile.mkdtemp(prefix="lakefuse-shared-"))
    os.chmod(root, 0o755)
    mount = MountedLake(lake_home, root / "lake", args=("--allow-other",))
    mount.start()
    yield mount
    mount.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def shared_branch(lake_home, shared_lake):
    """A fresh branch of sales (from main) and its directory in ``shared_lake``."""
    name = f"p{next(_names)}-{os.getpid()}"
    lake_home.catalog.create_branch("sales", name, "main")
    return shared_lake / f"sales/{name}"
