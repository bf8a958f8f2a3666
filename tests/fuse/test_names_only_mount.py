"""Listings by name alone through a real kernel mount (``--names-only-for``): the named
programs' walks see every name with its type, the inode numbers they read are the files'
own, and a program that stats after them (``du``) is served attributes and right sizes."""

from __future__ import annotations

import os
import subprocess

import pytest

from lakefuse.fuse.operations import LISTINGS_BY_NAME
from lakemount import mounted

FILES = 300

pytestmark = pytest.mark.skipif(not LISTINGS_BY_NAME, reason="a stock pyfuse3 gives every entry its attributes")


@pytest.fixture(scope="module")
def named(lake_home, tmp_path_factory):
    """A commit with a directory of FILES files (sizes 0..FILES-1) and a subdirectory, mounted
    with ``--names-only-for find,ls``."""
    catalog = lake_home.catalog
    catalog.create_branch("sales", "by-name", "main")
    for i in range(FILES):
        catalog.upload_bytes("sales", "by-name", f"walk/f{i:04d}.bin", b"z" * i)
    catalog.upload_bytes("sales", "by-name", "walk/sub/inner.bin", b"inner")
    commit = catalog.commit("sales", "by-name", "files to walk", "tests").id
    with mounted(lake_home, tmp_path_factory.mktemp("mnt") / "named", args=("--names-only-for", "find,ls")) as mount:
        yield mount.mountpoint, commit


@pytest.mark.parametrize("ref", ["by-name", "commit"])
def test_find_lists_every_name_and_type(named, ref):
    mountpoint, commit = named
    root = mountpoint / "sales" / (commit if ref == "commit" else ref) / "walk"
    files = subprocess.run(["find", str(root), "-type", "f"], capture_output=True, text=True, check=True).stdout
    dirs = subprocess.run(["find", str(root), "-type", "d"], capture_output=True, text=True, check=True).stdout
    assert sorted(os.path.relpath(p, root) for p in files.split()) == sorted(
        [f"f{i:04d}.bin" for i in range(FILES)] + ["sub/inner.bin"])
    assert sorted(os.path.relpath(p, root) for p in dirs.split()) == [".", "sub"]


def test_inode_numbers_read_from_a_listing_by_name_are_the_files_own(named):
    mountpoint, commit = named
    root = mountpoint / "sales" / commit / "walk"
    listed = subprocess.run(["ls", "-i", "-1", str(root)], capture_output=True, text=True, check=True).stdout
    numbers = dict(reversed(line.split()) for line in listed.splitlines())
    assert len(numbers) == FILES + 1
    for name in ("f0000.bin", "f0150.bin", f"f{FILES - 1:04d}.bin"):
        assert os.stat(root / name).st_ino == int(numbers[name])


def test_du_after_find_is_served_attributes_and_counts_every_byte(named):
    mountpoint, commit = named
    root = mountpoint / "sales" / commit / "walk"
    subprocess.run(["find", str(root)], capture_output=True, check=True)
    out = subprocess.run(["du", "-s", "-b", str(root)], capture_output=True, text=True, check=True).stdout
    directories = int(subprocess.run(["du", "-s", "-b", "-S", str(root / "sub")], capture_output=True, text=True,
                                     check=True).stdout.split()[0]) - len(b"inner")
    assert int(out.split()[0]) == sum(range(FILES)) + len(b"inner") + directories + os.stat(root).st_size
    assert os.stat(root / "f0123.bin").st_size == 123
