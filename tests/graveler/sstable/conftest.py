"""Fixtures of the SSTable format tests: tables written with write_sstable and opened, and
the lakeFS-written files (a copy of ``shared/compat`` kept in ``tests/data/lakefs_files``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakefuse.graveler.sstable import SSTableReader, write_sstable


def _repo_root() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists():
            return parent
    raise RuntimeError("repository root (pyproject.toml) not found above the tests")


COMPAT_DIR = _repo_root() / "tests" / "data" / "lakefs_files"


@pytest.fixture
def compat_dir() -> Path:
    return COMPAT_DIR


@pytest.fixture
def table(tmp_path):
    """``table(items, **write_kwargs) -> SSTableReader`` through write_sstable + open."""
    counter = iter(range(1_000_000))

    def make(items, properties=None, **kwargs) -> SSTableReader:
        path = tmp_path / f"t{next(counter)}.sst"
        size = write_sstable(str(path), items, properties, **kwargs)
        assert size == path.stat().st_size
        return SSTableReader.open(str(path))

    return make
