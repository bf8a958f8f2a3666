"""POSIX fidelity of branch directories without a kernel: symbolic links, FIFOs, sockets and
devices as entries, owners from the requester with chown, the three times with utime, set-ID
bits, directory attributes in markers, owner mapping options, and entries written before any
of this (they show what they always showed)."""

from __future__ import annotations

import errno
import os
import stat
import time

import pytest

from lakefuse.errors import LakefuseError
from lakefuse.fs.filesystem import LakeFilesystem, WouldBlock
from fs_staging import staged_entry, staged_entry_where

ERRORS = (OSError, LakefuseError)
ME = (os.getuid(), os.getgid())


def errno_of(excinfo) -> int:
    return excinfo.value.errno


def create(fs, drive, path: str, mode: int = 0o644, uid: int | None = None, gid: int | None = None,
           data: bytes = b"") -> int:
    parent, name = drive.parent(path)
    result, attrs = fs.create(parent, name, stat.S_IFREG | mode, os.O_WRONLY | os.O_CREAT, uid=uid, gid=gid)
    if data:
        fs.write(result.fh, 0, data)
    fs.flush(result.fh)
    fs.release(result.fh)
    return attrs.ino


# ------------------------------------------------------------------ symbolic links

def test_symlink_is_an_entry_with_its_target(fs, drive, backend, make_driver, tmp_path):
    parent = drive.ino("sales/main/a")
    attrs = fs.symlink(parent, "rel", "../top.csv", uid=1000, gid=100)
    assert stat.S_ISLNK(attrs.mode) and stat.S_IMODE(attrs.mode) == 0o777
    assert attrs.size == len("../top.csv") and (attrs.uid, attrs.gid) == (1000, 100)
    assert fs.readlink(attrs.ino) == b"../top.csv"
    assert fs.readlink(attrs.ino, blocking=False) == b"../top.csv"  # from memory
    absolute = fs.symlink(parent, "abs", "/etc/hostname")
    assert fs.readlink(absolute.ino) == b"/etc/hostname"
    entry = staged_entry(backend, "sales", "main", "a/rel")
    assert entry.metadata["lakefuse-type"] == "symlink" and entry.metadata["lakefuse-target"] == "../top.csv"
    assert entry.metadata["lakefuse-uid"] == "1000" and entry.metadata["lakefuse-gid"] == "100"
    assert backend.object_bytes(entry) == b"../top.csv"  # readers that know nothing of links see the target
    assert sorted(drive.listdir("sales/main/a")) == ["abs", "b.txt", "rel"]
    # a second mount (what a remount sees)
    other = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool-2"))
    again = make_driver(other)
    assert stat.S_ISLNK(again.stat("sales/main/a/rel").mode)
    assert other.readlink(again.ino("sales/main/a/rel")) == b"../top.csv"


def test_symlink_errors(fs, drive):
    parent = drive.ino("sales/main")
    fs.symlink(parent, "link", "top.csv")
    for name, target, code in (("link", "x", errno.EEXIST), ("top.csv", "x", errno.EEXIST),
                               ("long", "x" * 4096, errno.ENAMETOOLONG), ("n" * 256, "x", errno.ENAMETOOLONG),
                               ("empty", "", errno.ENOENT), ("bad", b"\xff", errno.EILSEQ)):
        with pytest.raises(ERRORS) as exc:
            fs.symlink(parent, name, target)
        assert errno_of(exc) == code, name
    assert fs.readlink(fs.symlink(parent, "longest", "y" * 4095).ino) == b"y" * 4095
    with pytest.raises(ERRORS) as exc:
        fs.readlink(drive.ino("sales/main/top.csv"))
    assert errno_of(exc) == errno.EINVAL
    with pytest.raises(ERRORS) as exc:
        fs.readlink(drive.ino("sales/main/a"))
    assert errno_of(exc) == errno.EINVAL
    with pytest.raises(ERRORS) as exc:
        fs.symlink(drive.ino("sales/v1"), "link", "top.csv")
    assert errno_of(exc) == errno.EROFS


def test_links_are_kept_by_rename_commit_and_read_only_in_commits(fs, drive, backend):
    main = drive.ino("sales/main")
    fs.symlink(main, "link", "a/b.txt")
    drive.rename("sales/main/link", "sales/main/a/moved")
    moved = drive.stat("sales/main/a/moved")
    assert stat.S_ISLNK(moved.mode) and fs.readlink(moved.ino) == b"a/b.txt"
    drive.commit("sales/main", "links")
    commit = backend.branch_head("sales", "main")
    in_commit = drive.ino(f"sales/{commit}/a/moved")
    assert stat.S_ISLNK(fs.getattr(in_commit).mode) and fs.readlink(in_commit) == b"a/b.txt"
    drive.unlink("sales/main/a/moved")
    assert "moved" not in drive.listdir("sales/main/a")


def test_a_link_written_by_another_client_without_its_target_key_reads_its_bytes(fs, drive, backend):
    backend.put_object("sales", "main", "other-link", b"a/b.txt", metadata={"lakefuse-type": "symlink"})
    ino = drive.ino("sales/main/other-link")
    assert stat.S_ISLNK(fs.getattr(ino).mode)
    with pytest.raises(WouldBlock):
        fs.readlink(ino, blocking=False)
    assert fs.readlink(ino) == b"a/b.txt"


def test_a_file_replaced_by_a_link_gets_a_new_inode(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    assert stat.S_ISREG(fs.getattr(ino).mode)
    backend.put_object("sales", "main", "top.csv", b"a/b.txt", metadata={"lakefuse-type": "symlink",
                                                                      "lakefuse-target": "a/b.txt"})
    time.sleep(fs.branch_ttl + 0.1)
    attrs = fs.lookup(drive.ino("sales/main"), "top.csv")
    assert stat.S_ISLNK(attrs.mode) and attrs.ino != ino


def test_hard_links_are_eperm(fs, drive):
    with pytest.raises(ERRORS) as exc:
        fs.link(drive.ino("sales/main/top.csv"), drive.ino("sales/main"), "hard")
    assert errno_of(exc) == errno.EPERM


# ------------------------------------------------------------------ special files

@pytest.mark.parametrize("fmt, name, device", [
    (stat.S_IFIFO, "fifo", 0), (stat.S_IFSOCK, "socket", 0),
    (stat.S_IFCHR, "char", os.makedev(4, 1)), (stat.S_IFBLK, "block", os.makedev(8, 16)),
])
def test_mknod_makes_metadata_only_entries(fs, drive, backend, fmt, name, device):
    attrs = fs.mknod(drive.ino("sales/main"), "node", fmt | 0o640, device, uid=1000, gid=100)
    assert stat.S_IFMT(attrs.mode) == fmt and stat.S_IMODE(attrs.mode) == 0o640
    assert attrs.rdev == device and attrs.size == 0 and (attrs.uid, attrs.gid) == (1000, 100)
    entry = staged_entry(backend, "sales", "main", "node")
    assert entry.metadata["lakefuse-type"] == name and entry.metadata["lakefuse-mode"] == "640"
    assert ("lakefuse-rdev" in entry.metadata) == (device != 0)
    assert backend.object_bytes(entry) == b""
    with pytest.raises(ERRORS) as exc:
        fs.mknod(drive.ino("sales/main"), "node", fmt | 0o640, device)
    assert errno_of(exc) == errno.EEXIST


def test_mknod_of_a_regular_file_creates_it(fs, drive, backend):
    attrs = fs.mknod(drive.ino("sales/main"), "plain", stat.S_IFREG | 0o600, 0, uid=1000, gid=100)
    assert stat.S_ISREG(attrs.mode) and stat.S_IMODE(attrs.mode) == 0o600 and attrs.uid == 1000
    assert staged_entry(backend, "sales", "main", "plain").metadata.get("lakefuse-type") is None


# ------------------------------------------------------------------ owners

def test_new_entries_store_the_requesters_owner(fs, drive, backend):
    create(fs, drive, "sales/main/mine", uid=1000, gid=100)
    attrs = drive.stat("sales/main/mine")
    assert (attrs.uid, attrs.gid) == (1000, 100)
    entry = staged_entry(backend, "sales", "main", "mine")
    assert entry.metadata["lakefuse-uid"] == "1000" and entry.metadata["lakefuse-gid"] == "100"
    directory = fs.mkdir(drive.ino("sales/main"), "d", 0o750, uid=1000, gid=100)
    assert (directory.uid, directory.gid, stat.S_IMODE(directory.mode)) == (1000, 100, 0o750)
    marker = staged_entry(backend, "sales", "main", "d/")
    assert marker.metadata["lakefuse-uid"] == "1000" and marker.metadata["lakefuse-mode"] == "750"
    assert stat.S_IMODE(drive.stat("sales/main/d").mode) == 0o750
    assert [n for n in drive.listdir("sales/main") if n == "d"] == ["d"]


def test_old_entries_show_exactly_what_they_showed(fs, drive):
    """Entries without the POSIX keys: mode 0644 / 0755, the mount's owner, one time."""
    for path, fmt, mode in (("sales/main/top.csv", stat.S_IFREG, 0o644), ("sales/main/a", stat.S_IFDIR, 0o755),
                            ("sales/v1/a/b.txt", stat.S_IFREG, 0o644), ("sales/main", stat.S_IFDIR, 0o755)):
        attrs = drive.stat(path)
        assert stat.S_IFMT(attrs.mode) == fmt and stat.S_IMODE(attrs.mode) == mode, path
        assert (attrs.uid, attrs.gid) == ME and attrs.rdev == 0, path
    top = drive.stat("sales/main/top.csv")
    assert top.atime_ns == top.mtime_ns == top.ctime_ns and top.nlink == 1


def test_chown_is_stored_and_clears_set_id_bits(fs, drive, backend):
    ino = create(fs, drive, "sales/main/tool", mode=0o6755, uid=0, gid=0)  # a write would clear them
    assert stat.S_IMODE(fs.getattr(ino).mode) == 0o6755
    attrs = fs.setattr(ino, uid=1000, gid=100)
    assert (attrs.uid, attrs.gid) == (1000, 100) and stat.S_IMODE(attrs.mode) == 0o755
    entry = staged_entry_where(backend, "sales", "main", "tool", lambda e: e.metadata.get("lakefuse-uid") == "1000")
    assert entry.metadata["lakefuse-gid"] == "100" and entry.metadata["lakefuse-mode"] == "755"
    # set-group-ID without group execute is mandatory locking, not a privilege: kept
    fs.setattr(ino, mode=0o2644)
    assert stat.S_IMODE(fs.setattr(ino, gid=200).mode) == 0o2644
    # a directory keeps its set-group-ID bit
    directory = fs.mkdir(drive.ino("sales/main"), "shared", 0o2775, uid=0, gid=0)
    assert stat.S_IMODE(fs.setattr(directory.ino, gid=100).mode) == 0o2775
    with pytest.raises(ERRORS) as exc:
        fs.setattr(drive.ino("sales/v1/top.csv"), uid=1000)
    assert errno_of(exc) == errno.EROFS


def test_a_write_clears_set_id_bits(fs, drive, backend):
    ino = create(fs, drive, "sales/main/tool", mode=0o4755, uid=0, gid=0)
    assert stat.S_IMODE(fs.getattr(ino).mode) == 0o4755
    result = fs.open(ino, os.O_WRONLY)
    fs.write(result.fh, 0, b"v2")
    fs.release(result.fh)
    assert stat.S_IMODE(fs.getattr(ino).mode) == 0o755
    entry = staged_entry_where(backend, "sales", "main", "tool", lambda e: backend.object_bytes(e) == b"v2")
    assert entry.metadata["lakefuse-mode"] == "755"


def test_a_set_group_id_directory_gives_its_group(fs, drive):
    shared = fs.mkdir(drive.ino("sales/main"), "shared", 0o2775, uid=0, gid=50)
    create(fs, drive, "sales/main/shared/f", uid=1000, gid=100)
    assert drive.stat("sales/main/shared/f").gid == 50
    sub = fs.mkdir(shared.ino, "sub", 0o755, uid=1000, gid=100)
    assert sub.gid == 50 and sub.mode & stat.S_ISGID
    link = fs.symlink(shared.ino, "l", "f", uid=1000, gid=100)
    assert link.gid == 50


def test_a_set_group_id_branch_root_gives_its_group(fs, drive):
    # the root of a ref has no marker: its mode and group are what was set through the mount
    main = drive.ino("sales/main")
    fs.setattr(main, gid=60)
    fs.setattr(main, mode=0o2775)
    ino = create(fs, drive, "sales/main/shared-root-file", uid=1000, gid=100)
    assert fs.getattr(ino).gid == 60
    assert fs.mkdir(main, "sub", 0o755, uid=1000, gid=100).gid == 60
    fs.setattr(main, mode=0o775)  # no longer set-group-ID: the creator's group
    assert fs.getattr(create(fs, drive, "sales/main/own-group", uid=1000, gid=100)).gid == 100


def test_a_create_answers_the_attributes_a_stat_then_shows(fs, drive):
    parent, name = drive.parent("sales/main/new.txt")
    result, attrs = fs.create(parent, name, stat.S_IFREG | 0o640, os.O_WRONLY | os.O_CREAT, uid=1000, gid=100)
    try:
        shown = fs.getattr(attrs.ino)
        assert (attrs.mode, attrs.size, attrs.uid, attrs.gid, attrs.mtime_ns) == \
            (shown.mode, shown.size, shown.uid, shown.gid, shown.mtime_ns) == \
            (stat.S_IFREG | 0o640, 0, 1000, 100, shown.mtime_ns)
    finally:
        fs.release(result.fh)


def test_owner_options_map_and_force(backend, tmp_path, make_driver):
    backend.put_object("sales", "main", "theirs", b"x", metadata={"lakefuse-uid": "1000", "lakefuse-gid": "100"})
    mapped_fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s1"), uid=7, gid=8,
                               uid_map={1000: 2000}, gid_map={100: 200})
    mapped = make_driver(mapped_fs)
    assert (mapped.stat("sales/main/theirs").uid, mapped.stat("sales/main/theirs").gid) == (2000, 200)
    assert (mapped.stat("sales/main/top.csv").uid, mapped.stat("sales/main/top.csv").gid) == (7, 8)  # default owner
    create(mapped_fs, mapped, "sales/main/new", uid=2000, gid=200)
    entry = staged_entry(backend, "sales", "main", "new")
    assert (entry.metadata["lakefuse-uid"], entry.metadata["lakefuse-gid"]) == ("1000", "100")  # stored as elsewhere
    assert mapped.stat("sales/main/new").uid == 2000
    forced = make_driver(LakeFilesystem(backend, spool_dir=str(tmp_path / "s2"), uid=7, gid=8, force_owner=True))
    assert (forced.stat("sales/main/theirs").uid, forced.stat("sales/main/theirs").gid) == (7, 8)


# ------------------------------------------------------------------ times

def test_utime_sets_atime_and_mtime_each_and_ctime_moves(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    before = fs.getattr(ino)
    started = time.time_ns()
    attrs = fs.setattr(ino, atime_ns=1_500_000_000_000_000_001)
    assert attrs.atime_ns == 1_500_000_000_000_000_001 and attrs.mtime_ns == before.mtime_ns
    assert attrs.ctime_ns >= started - 1_000_000
    attrs = fs.setattr(ino, mtime_ns=1_600_000_000_000_000_002)
    assert attrs.atime_ns == 1_500_000_000_000_000_001 and attrs.mtime_ns == 1_600_000_000_000_000_002
    entry = staged_entry_where(backend, "sales", "main", "top.csv",
                               lambda e: e.metadata.get("lakefuse-mtime-ns") == "1600000000000000002")
    assert entry.metadata["lakefuse-atime-ns"] == "1500000000000000001" and "lakefuse-ctime-ns" in entry.metadata
    # chmod and chown move the ctime too, and only it
    ctime = attrs.ctime_ns
    time.sleep(0.01)
    attrs = fs.setattr(ino, mode=0o600)
    assert attrs.ctime_ns > ctime and attrs.mtime_ns == 1_600_000_000_000_000_002
    ctime = attrs.ctime_ns
    time.sleep(0.01)
    assert fs.setattr(ino, uid=1234).ctime_ns > ctime
    # a time equal to the mtime is not stored twice
    fs.setattr(ino, atime_ns=1_600_000_000_000_000_002)
    entry = staged_entry_where(backend, "sales", "main", "top.csv",
                               lambda e: "lakefuse-atime-ns" not in e.metadata)
    assert "lakefuse-atime-ns" not in entry.metadata and fs.getattr(ino).atime_ns == 1_600_000_000_000_000_002


def test_a_write_moves_mtime_and_ctime_and_forgets_a_stored_ctime(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    fs.setattr(ino, mtime_ns=1_600_000_000_000_000_000, atime_ns=1_600_000_000_000_000_000)
    started = time.time_ns() - 1_000_000_000
    result = fs.open(ino, os.O_WRONLY)
    fs.write(result.fh, 0, b"changed")
    fs.release(result.fh)
    attrs = fs.getattr(ino)
    assert attrs.mtime_ns >= started and attrs.ctime_ns >= started
    assert attrs.atime_ns == 1_600_000_000_000_000_000  # reads and writes don't move the atime
    entry = staged_entry_where(backend, "sales", "main", "top.csv", lambda e: backend.object_bytes(e) == b"changed")
    assert "lakefuse-ctime-ns" not in entry.metadata


def test_directory_times_and_modes(fs, drive, backend):
    main = drive.ino("sales/main")
    a = drive.ino("sales/main/a")  # implied by keys: no marker
    before = fs.getattr(a)
    time.sleep(0.01)
    create(fs, drive, "sales/main/a/new")
    after = fs.getattr(a)
    assert after.mtime_ns > before.mtime_ns and after.ctime_ns == after.mtime_ns  # an entry was added
    ref = backend.resolve_ref("sales", "main")
    assert backend.get_entry("sales", ref, "a/") is None  # not stored: see Tree.touch_dirs
    fs.setattr(a, mode=0o700, mtime_ns=1_600_000_000_000_000_000)  # an implied directory gets a marker
    marker = backend.get_entry("sales", backend.resolve_ref("sales", "main"), "a/")
    assert marker.metadata["lakefuse-mode"] == "700" and marker.metadata["lakefuse-mtime-ns"] == "1600000000000000000"
    attrs = drive.stat("sales/main/a")
    assert stat.S_IMODE(attrs.mode) == 0o700 and attrs.mtime_ns == 1_600_000_000_000_000_000
    assert sorted(drive.listdir("sales/main/a")) == ["b.txt", "new"]  # the marker is no entry
    drive.rename("sales/main/a", "sales/main/renamed")
    assert stat.S_IMODE(drive.stat("sales/main/renamed").mode) == 0o700
    # the branch root keeps what is set in memory (it has no marker)
    assert stat.S_IMODE(fs.setattr(main, mode=0o750).mode) == 0o750
    assert stat.S_IMODE(fs.getattr(main).mode) == 0o750
