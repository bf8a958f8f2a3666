"""The local directory adapter: the shared contract plus what only a directory can show."""

from __future__ import annotations

import errno
import os
import shutil
import threading

import pytest

from block.contract import CONTRACT_TRANSFER, BlockAdapterContract
from lakefuse.block import local as local_module
from lakefuse.block.base import RESERVED_SEGMENT_PREFIX
from lakefuse.block.local import LocalBlockAdapter
from lakefuse.errors import NameTooLong, ObjectNotFound, StorageError


class TestLocalContract(BlockAdapterContract):
    @pytest.fixture
    def adapter(self, tmp_path):
        return LocalBlockAdapter(tmp_path / "store", transfer=CONTRACT_TRANSFER)


@pytest.fixture
def store(tmp_path):
    return LocalBlockAdapter(tmp_path / "store")


def test_uri_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    adapter = LocalBlockAdapter("relative/dir/")
    assert adapter.root == str(tmp_path / "relative" / "dir")
    assert adapter.uri == "local://" + str(tmp_path / "relative" / "dir")
    assert adapter.uri.startswith("local:///")


def test_objects_are_plain_files_under_the_root(store):
    store.put("a/b/c.txt", b"data")
    assert open(os.path.join(store.root, "a", "b", "c.txt"), "rb").read() == b"data"


def test_the_root_is_created_on_first_put_only(store):
    assert list(store.list()) == []
    assert not os.path.exists(store.root)
    store.put("k", b"x")
    assert os.path.isdir(store.root)


def test_leftover_temporary_files_are_never_listed(store):
    store.put("dir/k", b"x")
    for directory in (store.root, os.path.join(store.root, "dir")):
        with open(os.path.join(directory, RESERVED_SEGMENT_PREFIX + "crashed"), "wb") as f:
            f.write(b"partial")
    assert [s.key for s in store.list()] == ["dir/k"]


def test_failed_put_leaves_no_temporary_file(store):
    store.put("dir/k", b"x")

    class Broken:
        def read(self, size=-1):
            raise OSError(5, "Input/output error")

    with pytest.raises(StorageError, match="Input/output error"):
        store.put_stream("dir/k", Broken())
    assert sorted(os.listdir(os.path.join(store.root, "dir"))) == ["k"]


def test_delete_prunes_empty_directories_but_not_the_root(store):
    store.put("a/b/c/d", b"x")
    store.put("a/keep", b"x")
    store.delete("a/b/c/d")
    assert os.listdir(store.root) == ["a"]
    assert os.listdir(os.path.join(store.root, "a")) == ["keep"]
    store.delete("a/keep")
    assert os.listdir(store.root) == []


def test_a_file_and_a_directory_cannot_share_a_name(store):
    store.put("a", b"file")
    with pytest.raises(StorageError, match="not a directory"):
        store.put("a/b", b"x")
    store.put("d/e", b"x")
    with pytest.raises(StorageError, match="directory"):
        store.put("d", b"x")
    assert store.get("a") == b"file" and store.get("d/e") == b"x"
    assert [s.key for s in store.list()] == ["a", "d/e"]


def test_a_name_too_long_for_the_filesystem(store):
    with pytest.raises(NameTooLong):
        store.put("x" * 300, b"x")


def test_concurrent_puts_and_deletes_in_one_directory(store):
    """Deletes prune directories that concurrent puts are about to write into."""
    errors = []

    def worker(number):
        try:
            for i in range(50):
                key = f"shared/dir/{number}-{i}"
                store.put(key, b"x")
                store.delete(key)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert list(store.list()) == []


def test_permissions_follow_the_umask(store):
    old = os.umask(0o022)
    try:
        store.put("k", b"x")
    finally:
        os.umask(old)
    assert os.stat(os.path.join(store.root, "k")).st_mode & 0o777 == 0o644


def test_a_move_on_the_same_filesystem_renames_the_file_durably(store, tmp_path, monkeypatch):
    store.put("dir/other", b"x")  # the directory exists: the object's own directory is fsynced
    source = tmp_path / "spool"
    source.write_bytes(b"spooled")
    inode = os.stat(source).st_ino
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store.put_file("dir/k", str(source), move=True)
    target = os.path.join(store.root, "dir", "k")
    assert os.stat(target).st_ino == inode  # renamed, not copied
    assert synced == [str(source), os.path.dirname(target)]  # the file before the rename, then the directory
    assert not source.exists()


def test_a_put_that_need_not_be_durable_skips_the_fsyncs_and_sync_is_one_syncfs(store, tmp_path, monkeypatch):
    store.put("dir/other", b"x")
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    for move in (False, True):
        source = tmp_path / f"spool-{move}"
        source.write_bytes(b"spooled")
        store.put_file(f"dir/{move}", str(source), move=move, durable=False)
    assert synced == []
    assert store.get("dir/True") == store.get("dir/False") == b"spooled"
    calls = []
    real_syncfs = local_module._syncfs
    monkeypatch.setattr(local_module, "_syncfs", lambda fd: calls.append(os.readlink(f"/proc/self/fd/{fd}")) or real_syncfs(fd))
    store.sync()
    assert calls == [store.root]


def test_a_move_across_filesystems_copies_then_deletes(store, tmp_path, monkeypatch):
    source = tmp_path / "elsewhere"
    source.write_bytes(b"far away")

    def rename(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "rename", rename)
    store.put_file("k", str(source), move=True)
    assert store.get("k") == b"far away"
    assert not source.exists()
    assert os.listdir(store.root) == ["k"]  # no temporary file left


def test_a_hard_linked_or_symlinked_file_is_copied_not_moved(store, tmp_path):
    source = tmp_path / "linked"
    source.write_bytes(b"shared inode")
    other_name = tmp_path / "other-name"
    os.link(source, other_name)
    store.put_file("hard", str(source), move=True)
    assert os.stat(os.path.join(store.root, "hard")).st_ino != os.stat(other_name).st_ino
    assert not source.exists() and other_name.read_bytes() == b"shared inode"

    symlink = tmp_path / "symlink"
    symlink.symlink_to(other_name)
    store.put_file("soft", str(symlink), move=True)
    assert store.get("soft") == b"shared inode"
    assert not os.path.lexists(symlink) and other_name.read_bytes() == b"shared inode"


def test_a_file_written_at_a_new_keys_own_path_is_adopted_as_it_is(store, monkeypatch):
    store.put("data/other", b"x")  # the directory exists
    path = store.local_path("data/written-here")
    assert path == os.path.join(store.root, "data", "written-here")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        os.write(fd, b"written in place")
        inode = os.fstat(fd).st_ino
        synced = []
        real_fsync = os.fsync
        monkeypatch.setattr(os, "fsync",
                            lambda f: synced.append(os.path.realpath(f"/proc/self/fd/{f}")) or real_fsync(f))
        stat = store.adopt_file("data/written-here", fd, durable=False)
        assert (stat.key, stat.size) == ("data/written-here", 16) and synced == []
        store.adopt_file("data/written-here", fd)  # durable: the file, then its directory
        assert synced == [path, os.path.dirname(path)]
        assert store.get("data/written-here") == b"written in place" and os.stat(path).st_ino == inode
        os.unlink(path)
        with pytest.raises(ObjectNotFound, match="deleted"):
            store.adopt_file("data/written-here", fd)
    finally:
        os.close(fd)


def test_a_move_of_a_file_deleted_meanwhile_copies_it_from_its_descriptor(store, tmp_path):
    source = tmp_path / "spool"
    source.write_bytes(b"still open")
    fd = os.open(source, os.O_RDONLY)
    try:
        source.unlink()
        stat = store.put_file("k", str(source), move=True, source_fd=fd)
    finally:
        os.close(fd)
    assert stat.size == 10 and store.get("k") == b"still open"


def test_a_put_makes_again_a_directory_removed_after_an_earlier_put_made_it(store, tmp_path):
    for round in range(2):  # the adapter remembers the directory it made: a delete pruned it since
        source = tmp_path / f"source{round}"
        source.write_bytes(b"round %d" % round)
        store.put_file(f"pruned/deep/k{round}", str(source), move=bool(round))
        assert store.get(f"pruned/deep/k{round}") == b"round %d" % round
        store.delete(f"pruned/deep/k{round}")
        shutil.rmtree(os.path.join(store.root, "pruned"), ignore_errors=True)
    store.put("pruned/deep/put", b"and a put")
    assert store.get("pruned/deep/put") == b"and a put"
