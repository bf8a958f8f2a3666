"""Files made where they become objects (``SpoolReserve`` in place), over the real core: SQLite
and a local storage namespace, driven without a kernel.  A new file's spool is made in the
namespace's ``data/`` under a fresh address, and storing it gives that file an entry where it
lies: no rename, no copy.  A spool made too long ago is moved to a fresh address; one deleted
meanwhile (by hand, or by a gc with a short ``--min-age``) is stored from its descriptor."""

from __future__ import annotations

import logging
import os

import pytest

import lakefuse.fs.spool as spool_module
from lakefuse.fs.app_backend import AppBackend
from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.memory import MemoryBackend


@pytest.fixture
def app(core):
    return core


@pytest.fixture
def fs(app, tmp_path):
    fs = LakeFilesystem(AppBackend(app), spool_dir=str(tmp_path / "spool"))
    yield fs
    fs.close()


@pytest.fixture
def drive(fs, make_driver):
    return make_driver(fs)


def open_new_file(fs, drive, path: str, data: bytes):
    """Create ``path`` and write ``data`` through the mount (not closed yet): (fh, its spool)."""
    parent, name = drive.parent(path)
    result, _ = fs.create(parent, name, 0o100644, os.O_WRONLY | os.O_CREAT)
    fs.write(result.fh, 0, data)
    return result.fh, fs.state.handles.get(result.fh).open_file.spool


def staged(app, path: str):
    return app.catalog.stat("sales", "main", path)


def test_a_new_file_becomes_an_object_where_its_spool_was_made(app, fs, drive, namespace):
    fh, spool = open_new_file(fs, drive, "sales/main/new.txt", b"written in place")
    made = os.stat(spool.path)
    assert os.path.dirname(spool.path) == os.path.join(namespace, "data")
    fs.release(fh)
    fs.state.stager.flush_all()
    entry = staged(app, "new.txt")
    assert entry.physical_address == "data/" + os.path.basename(spool.path)
    stored = os.stat(os.path.join(namespace, entry.physical_address))
    assert (stored.st_dev, stored.st_ino) == (made.st_dev, made.st_ino)  # the same file: not moved
    assert app.catalog.read_object("sales", "main", "new.txt") == b"written in place"  # checksum verified
    assert drive.read("sales/main/new.txt") == b"written in place"


def test_directory_markers_are_made_where_they_become_objects(app, fs, drive, namespace):
    fs.mkdir(drive.ino("sales/main"), "folder", 0o40755)
    fs.state.stager.flush_all()
    marker = staged(app, "folder/")
    assert marker.size == 0 and os.path.getsize(os.path.join(namespace, marker.physical_address)) == 0


def test_a_spool_deleted_before_its_store_is_stored_from_its_descriptor(app, fs, drive, namespace, caplog):
    payload = os.urandom(10_000)
    fh, spool = open_new_file(fs, drive, "sales/main/collected.bin", payload)
    os.unlink(spool.path)  # what a gc run with a --min-age shorter than the file's life would do
    with caplog.at_level(logging.WARNING, logger="lakefuse.fs.uploads"):
        fs.release(fh)
    fs.state.stager.flush_all()
    entry = staged(app, "collected.bin")
    assert entry.physical_address != "data/" + os.path.basename(spool.path)
    assert app.catalog.read_object("sales", "main", "collected.bin") == payload
    assert "deleted before it was stored" in caplog.text


def test_a_spool_made_too_long_ago_is_moved_to_a_fresh_address(app, fs, drive, namespace, monkeypatch):
    fh, spool = open_new_file(fs, drive, "sales/main/old.txt", b"written for a long time")
    made = os.stat(spool.path)
    monkeypatch.setattr(spool_module, "_IN_PLACE_NS", 0)  # older than IN_PLACE_SECONDS now
    fs.release(fh)
    fs.state.stager.flush_all()
    entry = staged(app, "old.txt")
    assert entry.physical_address != "data/" + os.path.basename(spool.path)
    assert not os.path.exists(spool.path)
    stored = os.stat(os.path.join(namespace, entry.physical_address))
    assert (stored.st_dev, stored.st_ino) == (made.st_dev, made.st_ino)  # moved, not copied
    assert app.catalog.read_object("sales", "main", "old.txt") == b"written for a long time"


def test_an_unmount_leaves_no_spool_files_behind_in_storage(app, tmp_path, make_driver, namespace):
    fs = LakeFilesystem(AppBackend(app), spool_dir=str(tmp_path / "spool"))
    drive = make_driver(fs)
    for number in range(20):
        drive.write(f"sales/main/f{number}.txt", b"file %d" % number)
    fh, _spool = open_new_file(fs, drive, "sales/main/unlinked.txt", b"gone before its close")
    parent, name = drive.parent("sales/main/unlinked.txt")
    fs.unlink(parent, name)
    fs.release(fh)
    fs.close()
    referenced = {item.entry.physical_address for item in app.catalog.list_objects("sales", "main").items}
    in_storage = {"data/" + name for name in os.listdir(os.path.join(namespace, "data"))}
    assert in_storage == referenced and len(referenced) == 20


def test_the_memory_backend_offers_in_place_objects_too(tmp_path, make_driver):
    backend = MemoryBackend(in_place_directory=str(tmp_path / "data"))
    backend.create_repository("sales")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"))
    drive = make_driver(fs)
    try:
        for number in range(3):
            drive.write(f"sales/main/f{number}.txt", b"file %d" % number)
        fs.state.stager.flush_all()
        assert backend.calls["store_in_place"] == 3 and backend.calls["store_file"] == 0
        assert drive.read("sales/main/f2.txt") == b"file 2"
    finally:
        fs.close()
