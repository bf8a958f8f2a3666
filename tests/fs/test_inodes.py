"""What the inodes a walk leaves behind keep (``lakefuse.fs.inodes``, ``lakefuse.fs.nodes``):
a regular file a listing reports gets an inode number but no node, and a node made for it
later keeps no stat; every request that needs one reads it again, with the same answers as
for a file looked up by name."""

from __future__ import annotations

import errno
import gc
import os
import stat
import tracemalloc

import pytest

from lakefuse.fs.filesystem import LakeFilesystem


def listed(fs, ino) -> dict[str, object]:
    """name -> the attributes a READDIRPLUS listing of directory ``ino`` reported."""
    fh = fs.opendir(ino)
    found = {}
    fs.readdir(fh, 0, lambda name, attrs, offset: found.__setitem__(name.decode(), attrs) or True)
    fs.releasedir(fh)
    found.pop(".", None)
    found.pop("..", None)
    return found


def forget_memory(fs, ino) -> None:
    """Drop what the tree of node ``ino`` keeps (its metadata cache and listing pages), as a
    walk of more paths than it keeps would."""
    fs.table.get(ino).tree.forget_all()


def read_all(fs, ino) -> bytes:
    result = fs.open(ino, os.O_RDONLY)
    try:
        return fs.read(result.fh, 0, 1 << 20)
    finally:
        fs.release(result.fh)


@pytest.mark.parametrize("ref", ["main", "v1"])
def test_a_listed_file_keeps_no_stat_and_answers_from_its_tree(fs, drive, ref):
    shown = listed(fs, drive.ino(f"sales/{ref}/a"))["b.txt"]
    assert shown.size == 5 and stat.S_ISREG(shown.mode)
    node = fs.table.get(shown.ino)
    assert node.stat is None  # what a walk of a million files does not keep a million times
    forget_memory(fs, shown.ino)
    again = fs.getattr(shown.ino)
    assert (again.ino, again.size, again.mode, again.mtime_ns) == (shown.ino, 5, shown.mode, shown.mtime_ns)
    assert read_all(fs, shown.ino) == b"hello"
    assert fs.getxattr(shown.ino, "lakefuse.size") == b"5"
    assert fs.lookup(drive.ino(f"sales/{ref}/a"), "b.txt").ino == shown.ino  # the same inode


def test_a_change_to_a_listed_file_starts_from_its_stored_state(fs, drive):
    directory = drive.ino("sales/main/a")
    shown = listed(fs, directory)["b.txt"]
    forget_memory(fs, directory)
    after = fs.setattr(shown.ino, mode=0o600)  # chmod: the times stay what they were
    assert stat.S_IMODE(after.mode) == 0o600
    assert (after.mtime_ns, after.atime_ns) == (shown.mtime_ns, shown.atime_ns)
    forget_memory(fs, directory)
    listed(fs, directory)  # listed again: the node's stat, once read, stays
    fs.setattr(shown.ino, size=2)  # truncate keeps what is before the new end
    assert read_all(fs, shown.ino) == b"he"
    assert drive.stat("sales/main/a/b.txt").size == 2


def test_a_listed_file_that_is_gone_is_enoent_and_a_new_file_of_its_name_is_another_inode(fs, drive, backend):
    directory = drive.ino("sales/main/a")
    shown = listed(fs, directory)["b.txt"]
    backend.delete_object("sales", "main", "a/b.txt")  # another writer
    forget_memory(fs, directory)
    with pytest.raises(OSError) as exc:
        fs.getattr(shown.ino)
    assert exc.value.errno == errno.ENOENT


def test_files_being_written_are_listed_with_their_stat(fs, drive):
    drive.write("sales/main/a/new.txt", b"12345678")
    shown = listed(fs, drive.ino("sales/main/a"))["new.txt"]
    assert shown.size == 8
    assert fs.table.get(shown.ino).stat is not None  # the mount's own, waiting for the stager
    assert drive.read("sales/main/a/new.txt") == b"12345678"


def test_a_walk_keeps_little_per_file_beyond_the_bounded_caches(backend, tmp_path):
    count = 3000
    backend.put_entries("sales", "main", [(f"big/f{i:05d}.csv", b"1,2\n") for i in range(count)])
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"))
    directory = fs.lookup(fs.lookup(fs.lookup(1, "sales").ino, "main").ino, "big").ino
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert len(listed(fs, directory)) == count
        forget_memory(fs, directory)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # an inode number, its path and its place in the two indexes, no node: about 120 bytes
    # here (it was about 220 with a node, 380 with the node's stat and key, and 800 with a
    # decoded entry of its own)
    assert kept / count < 160


def test_the_metadata_entries_option_bounds_what_each_ref_keeps(backend, tmp_path):
    backend.put_entries("sales", "main", [(f"big/f{i:04d}.csv", b"1,2\n") for i in range(300)])

    def walk_then_stat_the_first(fs) -> int:
        """Backend reads that a stat of the first file listed needs after a listing of all."""
        directory = fs.lookup(fs.lookup(fs.lookup(1, "sales").ino, "main").ino, "big").ino
        first = listed(fs, directory)["f0000.csv"]
        reads = backend.calls["get_entry"] + backend.calls["list_entries"]
        assert fs.getattr(first.ino).size == 4
        return backend.calls["get_entry"] + backend.calls["list_entries"] - reads

    assert walk_then_stat_the_first(LakeFilesystem(backend, spool_dir=str(tmp_path / "a"))) == 0
    small = LakeFilesystem(backend, spool_dir=str(tmp_path / "b"), metadata_entries=100)
    assert walk_then_stat_the_first(small) == 1  # pushed out by the 200 listed after it


def test_a_listed_file_has_no_node_until_a_request_needs_one(fs, drive):
    directory = drive.ino("sales/main/a")
    shown = listed(fs, directory)["b.txt"]
    assert shown.ino not in {node.ino for node in fs.table.nodes()}
    assert fs.getattr(shown.ino).size == 5  # made now, with the listing's lookup count
    node = fs.table.get(shown.ino)
    assert (node.path, node.lookups, node.attached) == ("a/b.txt", 1, True)
    assert fs.lookup(directory, "b.txt").ino == shown.ino


def test_a_listed_file_counts_each_listing_until_the_kernel_forgets_them(fs, drive):
    directory = drive.ino("sales/main/a")
    first = listed(fs, directory)["b.txt"].ino
    assert listed(fs, directory)["b.txt"].ino == first  # the same inode, its count now 2
    fs.forget([(first, 1)])
    assert fs.getattr(first).size == 5  # still known
    fs.forget([(first, 1)])
    with pytest.raises(OSError) as exc:
        fs.getattr(first)
    assert exc.value.errno == errno.ESTALE
    again = listed(fs, directory)["b.txt"].ino
    assert again != first
    fs.forget([(again, 1)])
    with pytest.raises(OSError):
        fs.getattr(again)


def test_listed_files_follow_their_directory_when_it_is_renamed(fs, drive):
    shown = listed(fs, drive.ino("sales/main/a"))["b.txt"]
    drive.rename("sales/main/a", "sales/main/moved")
    assert fs.table.get(shown.ino).path == "moved/b.txt"
    assert drive.ino("sales/main/moved/b.txt") == shown.ino
    assert read_all(fs, shown.ino) == b"hello"


def test_a_listed_file_unlinked_by_name_keeps_its_inode_with_no_link(fs, drive):
    shown = listed(fs, drive.ino("sales/main/a"))["b.txt"]
    drive.unlink("sales/main/a/b.txt")
    assert fs.getattr(shown.ino).nlink == 0
    drive.write("sales/main/a/b.txt", b"new")
    assert drive.ino("sales/main/a/b.txt") != shown.ino


def test_listed_files_of_many_directories_and_refs_tell_their_tree(backend, tmp_path):
    """Listed files take inode numbers in blocks per tree: walks of two refs interleaved,
    past a block's end, still give each inode its own file."""
    backend.put_entries("sales", "main", [(f"d{d}/f{i:04d}", str(i).encode()) for d in range(3) for i in range(3000)])
    backend.commit("sales", "main", "many")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"))
    repo = fs.lookup(1, "sales").ino
    refs = {ref: fs.lookup(repo, ref).ino for ref in ("main", backend.branch_head("sales", "main"))}
    shown = {}
    for d in range(3):
        for ref, root in refs.items():
            for name, attrs in listed(fs, fs.lookup(root, f"d{d}").ino).items():
                shown[(ref, f"d{d}/{name}")] = attrs.ino
    assert len(set(shown.values())) == len(shown) == 18000
    for (ref, path), ino in list(shown.items())[::997]:
        node = fs.table.get(ino)
        assert node.path == path and node.tree.ref.name == ref
        assert read_all(fs, ino) == str(int(path[-4:])).encode()
