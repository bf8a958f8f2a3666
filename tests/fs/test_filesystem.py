"""LakeFilesystem semantics without a kernel: layout, lookups and forget, readdir paging,
writes through spool files, directories, renames, metadata, xattrs, the control directory and
the errors every refused operation answers with."""

from __future__ import annotations

import errno
import os
import stat
import time

import pytest

from lakefuse.errors import LakefuseError
from lakefuse.fs.filesystem import MODE_KEY, MTIME_NS_KEY, LakeFilesystem, WouldBlock
from lakefuse.fs.memory import MemoryBackend
from lakefuse.fs.namespace import RENAME_NOREPLACE
from lakefuse.fs.xattrs import UNSUPPORTED_NAMESPACES
from fs_staging import staged_away, staged_entry, staged_entry_where


def spool_files_left(fs, spool_dir) -> list[str]:
    """Spool files still in ``spool_dir`` once the mount's reserve of empty ones is gone."""
    fs.state.spools.close()
    return [str(path.relative_to(spool_dir)) for path in spool_dir.rglob("*") if path.is_file()]


ERRORS = (OSError, LakefuseError)


def errno_of(excinfo) -> int:
    exc = excinfo.value
    return exc.errno


# ------------------------------------------------------------------ layout

def test_root_lists_repositories_then_refs_then_objects(drive):
    assert drive.listdir("") == ["other", "sales"]
    assert drive.listdir("sales") == ["main", "v1"]
    assert drive.listdir("sales/main") == ["a", "top.csv"]
    assert drive.listdir("sales/v1/a") == ["b.txt"]
    assert drive.read("sales/main/a/b.txt") == b"hello"
    assert stat.S_ISDIR(drive.stat("sales/main/a").mode)
    assert drive.stat("sales/main/top.csv").size == 8


def test_dot_entries_are_listed_without_lookup_counts(fs, drive):
    ino = drive.ino("sales/main")
    fh = fs.opendir(ino)
    names = []
    fs.readdir(fh, 0, lambda name, attrs, off: names.append(name) or True)
    assert names[:2] == [b".", b".."]
    before = fs.table.get(ino).lookups
    fs.readdir(fh, 0, lambda name, attrs, off: True)
    assert fs.table.get(ino).lookups == before


def test_ref_expressions_and_commit_ids_resolve_on_lookup_read_only(backend, drive):
    first = backend.branch_head("sales", "main")
    backend.put_object("sales", "main", "later.txt", b"new")
    backend.commit("sales", "main", "second")
    assert "later.txt" in drive.listdir("sales/main")
    assert "later.txt" not in drive.listdir("sales/main~1")
    assert drive.listdir(f"sales/{first}") == ["a", "top.csv"]
    assert drive.listdir(f"sales/{first[:10]}") == ["a", "top.csv"]
    assert "main~1" not in drive.listdir("sales")
    with pytest.raises(ERRORS) as exc:
        drive.write("sales/main~1/x", b"no")
    assert errno_of(exc) == errno.EROFS


def test_unknown_names_are_enoent(drive):
    for path in ("nope", "sales/nosuchref", "sales/main/missing", "sales/main/a/missing", "sales/main~9"):
        with pytest.raises(ERRORS) as exc:
            drive.ino(path)
        assert errno_of(exc) == errno.ENOENT


def test_immutable_trees_cache_negative_entries(fs, drive):
    attrs = fs.lookup(drive.ino("sales/v1"), "missing")
    assert attrs.ino == 0 and attrs.entry_timeout >= 3600


def test_timeouts_long_on_tags_short_on_branches(drive, fs):
    assert drive.stat("sales/v1/top.csv").attr_timeout >= 3600
    assert drive.stat("sales/main/top.csv").attr_timeout == fs.branch_ttl == 1.0


def test_mount_of_one_repository_or_one_ref(backend, tmp_path, make_driver):
    repo_fs = make_driver(LakeFilesystem(backend, spool_dir=str(tmp_path / "s1"), repo="sales"))
    assert repo_fs.listdir("") == ["main", "v1"]
    ref_fs = make_driver(LakeFilesystem(backend, spool_dir=str(tmp_path / "s2"), repo="sales", ref="v1"))
    assert ref_fs.listdir("") == ["a", "top.csv"]
    with pytest.raises(ERRORS) as exc:
        LakeFilesystem(backend, spool_dir=str(tmp_path / "s3"), repo="nope")
    assert exc.value.errno == errno.ENOENT


# ------------------------------------------------------------------ inode table

def test_lookup_counts_and_forget_drop_nodes(fs, drive):
    ino = drive.ino("sales/main/top.csv")
    node = fs.table.get(ino)
    assert node.lookups == 1
    assert fs.lookup(drive.ino("sales/main"), "top.csv").ino == ino  # same inode while known
    assert node.lookups == 2
    fs.forget([(ino, 2)])
    with pytest.raises(ERRORS) as exc:
        fs.table.get(ino)
    assert errno_of(exc) == errno.ESTALE


def test_open_file_survives_forget(fs, drive):
    ino = drive.ino("sales/main/top.csv")
    result = fs.open(ino, os.O_RDONLY)
    fs.forget([(ino, 1)])
    assert fs.read(result.fh, 0, 100) == b"x,y\n1,2\n"
    fs.release(result.fh)
    with pytest.raises(ERRORS):
        fs.table.get(ino)


def test_nonblocking_calls_answer_from_memory_or_raise_wouldblock(fs, drive):
    main = drive.ino("sales/main")
    with pytest.raises(WouldBlock):
        fs.lookup(main, "top.csv", blocking=False)
    ino = fs.lookup(main, "top.csv").ino
    assert fs.lookup(main, "top.csv", blocking=False).ino == ino
    assert fs.getattr(ino, blocking=False).size == 8


# ------------------------------------------------------------------ readdir

def test_readdir_of_100k_entries_pages_through_the_backend(backend, tmp_path, make_driver):
    backend.put_entries("sales", "main", [(f"big/f{i:06d}", b"x") for i in range(100_000)])
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), readdir_page=1000)
    d = make_driver(fs)
    ino = d.ino("sales/main/big")
    fh = fs.opendir(ino)
    backend.calls.clear()
    names: list[bytes] = []
    offset = 0
    started = time.monotonic()
    while True:  # like the kernel: small buffers, resume at the last offset
        batch = []

        def add(name, attrs, next_offset):
            if len(batch) == 30:
                return False
            batch.append((name, next_offset))
            return True

        fs.readdir(fh, offset, add)
        if not batch:
            break
        names.extend(n for n, _ in batch)
        offset = batch[-1][1]
    elapsed = time.monotonic() - started
    real = [n for n in names if n not in (b".", b"..")]
    assert len(real) == 100_000 and real[0] == b"f000000" and real[-1] == b"f099999"
    assert len(set(real)) == 100_000
    assert backend.calls["list_entries"] <= 102  # one page per 1000 entries, never re-read
    assert elapsed < 20


def test_a_second_listing_is_answered_from_kept_pages_without_blocking(backend, tmp_path, make_driver):
    # pages are kept for the branch's TTL: long here, so a loaded machine cannot expire them
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), branch_ttl=600.0)
    drive = make_driver(fs)
    backend.put_entries("sales", "main", [(f"d/f{i:04d}", b"x") for i in range(2500)])
    fs.readdir_page = 1000
    ino = drive.ino("sales/main/d")
    fh = fs.opendir(ino)
    with pytest.raises(WouldBlock):  # nothing listed yet: raised before anything is reported
        fs.readdir(fh, 0, lambda *args: pytest.fail("reported an entry before raising WouldBlock"),
                   blocking=False)
    fs.releasedir(fh)
    assert len(drive.listdir("sales/main/d")) == 2500
    backend.calls.clear()
    fh = fs.opendir(ino)
    names = []
    fs.readdir(fh, 0, lambda name, attrs, offset: names.append(name) or True, blocking=False)
    fs.releasedir(fh)
    assert len(names) == 2502 and names[2] == b"f0000" and names[-1] == b"f2499"
    assert backend.calls["list_entries"] == 0


def test_readdir_resumes_at_any_earlier_offset(fs, drive, backend):
    backend.put_entries("sales", "main", [(f"d/f{i:03d}", b"x") for i in range(50)])
    fh = fs.opendir(drive.ino("sales/main/d"))
    seen = []
    fs.readdir(fh, 0, lambda n, a, o: seen.append((n, o)) or True)
    offset_of_f010 = dict(seen)[b"f009"]
    again = []
    fs.readdir(fh, offset_of_f010, lambda n, a, o: again.append(n) or True)
    assert again[0] == b"f010" and again[-1] == b"f049" and len(again) == 40


def test_readdir_stops_when_buffer_full_without_counting_lookups(fs, drive):
    fh = fs.opendir(drive.ino("sales/main"))
    got = []
    fs.readdir(fh, 0, lambda n, a, o: (len(got) < 3) and (got.append(n) or True))
    assert got == [b".", b"..", b"a"]
    top = fs.table.find_path(fs.table.get(drive.ino("sales/main")).tree.key, "top.csv")
    assert top is None or top.lookups == 0


def test_control_directory_is_hidden_but_reachable(drive):
    assert ".lakefuse" not in drive.listdir("sales/main")
    assert drive.listdir("sales/main/.lakefuse") == ["branch", "commit", "head", "merge", "reset", "status", "tag"]


def test_keys_that_cannot_be_names_are_skipped(backend, drive):
    backend.put_object("sales", "main", "weird//double", b"x")
    backend.put_object("sales", "main", "x" * 300, b"x")
    assert drive.listdir("sales/main") == ["a", "top.csv", "weird"]
    assert drive.listdir("sales/main/weird") == []


# ------------------------------------------------------------------ files

def test_writes_are_visible_at_once_and_uploaded_on_close(fs, drive, backend):
    parent, _ = drive.parent("sales/main/new.txt")
    result, attrs = fs.create(parent, "new.txt", 0o100644, os.O_RDWR | os.O_CREAT)
    fs.write(result.fh, 0, b"hello ")
    fs.write(result.fh, 6, b"world")
    assert fs.read(result.fh, 0, 100) == b"hello world"
    assert fs.getattr(attrs.ino).size == 11
    assert "new.txt" in drive.listdir("sales/main")  # listed while being written
    ref = backend.resolve_ref("sales", "main")
    assert backend.get_entry("sales", ref, "new.txt") is None
    fs.flush(result.fh)  # close(2): stored now, staged with the next batch
    assert backend.object_bytes(staged_entry(backend, "sales", "main", "new.txt")) == b"hello world"
    fs.release(result.fh)
    assert drive.read("sales/main/new.txt") == b"hello world"


def test_a_readers_close_stages_nothing_of_another_handles_writes_but_its_fsync_does(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    writer = fs.open(ino, os.O_WRONLY | os.O_TRUNC)
    fs.write(writer.fh, 0, b"half")
    reader = fs.open(ino, os.O_RDONLY)
    ref = backend.resolve_ref("sales", "main")
    fs.flush(reader.fh)  # its close(2)
    assert backend.object_bytes(backend.get_entry("sales", ref, "top.csv")) == b"x,y\n1,2\n"
    fs.fsync(reader.fh)  # fsync(2) is about the file, whichever descriptor asks
    assert backend.object_bytes(backend.get_entry("sales", ref, "top.csv")) == b"half"
    for result in (reader, writer):
        fs.release(result.fh)


def test_readers_of_a_file_being_written_bypass_the_kernels_page_cache(fs, drive):
    ino = drive.ino("sales/main/top.csv")
    before = fs.open(ino, os.O_RDONLY)
    assert not before.direct_io
    writer = fs.open(ino, os.O_WRONLY | os.O_TRUNC)
    assert not writer.direct_io  # not the file's only handle: writes go through the page cache
    during = fs.open(ino, os.O_RDONLY)
    assert during.direct_io  # reads come from the spool as it is, never from zero-filled pages
    for result in (before, writer, during):
        fs.release(result.fh)
    alone = fs.open(ino, os.O_WRONLY | os.O_TRUNC)
    assert alone.direct_io  # cp into a file nobody else has open
    beside = fs.open(ino, os.O_RDONLY)
    assert beside.direct_io
    for result in (alone, beside):
        fs.release(result.fh)
    assert not fs.open(ino, os.O_RDONLY).direct_io


def test_random_write_append_and_truncate_keep_existing_bytes(fs, drive, backend):
    ino = drive.ino("sales/main/a/b.txt")
    result = fs.open(ino, os.O_WRONLY)
    fs.write(result.fh, 1, b"E")
    fs.write(result.fh, 5, b"!!")
    fs.release(result.fh)
    assert drive.read("sales/main/a/b.txt") == b"hEllo!!"
    fs.setattr(ino, size=3)
    assert drive.read("sales/main/a/b.txt") == b"hEl"
    fs.setattr(ino, size=5)
    assert drive.read("sales/main/a/b.txt") == b"hEl\0\0"
    result = fs.open(ino, os.O_WRONLY | os.O_TRUNC)
    fs.release(result.fh)
    assert drive.read("sales/main/a/b.txt") == b""


def test_fsync_uploads_and_a_later_write_uploads_again(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    result = fs.open(ino, os.O_WRONLY)
    fs.write(result.fh, 0, b"A")
    fs.fsync(result.fh)
    ref = backend.resolve_ref("sales", "main")
    assert backend.object_bytes(backend.get_entry("sales", ref, "top.csv")).startswith(b"A,y")
    fs.write(result.fh, 1, b"B")
    fs.release(result.fh)
    assert backend.object_bytes(backend.get_entry("sales", ref, "top.csv")).startswith(b"AB")


def test_reads_of_a_tag_keep_kernel_cache_and_writes_are_erofs(fs, drive):
    ino = drive.ino("sales/v1/top.csv")
    assert fs.open(ino, os.O_RDONLY).keep_cache
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        with pytest.raises(ERRORS) as exc:
            fs.open(ino, flags)
        assert exc.value.errno == errno.EROFS
    parent = drive.ino("sales/v1")
    for call in (lambda: fs.create(parent, "x", 0o644, os.O_WRONLY), lambda: fs.mkdir(parent, "d", 0o755),
                 lambda: fs.unlink(parent, "top.csv"), lambda: fs.setattr(ino, mode=0o600),
                 lambda: fs.setxattr(ino, "user.k", b"v"), lambda: fs.rename(parent, "top.csv", parent, "y")):
        with pytest.raises(ERRORS) as exc:
            call()
        assert exc.value.errno == errno.EROFS


def test_branch_file_page_cache_kept_only_while_object_unchanged(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    first = fs.open(ino, os.O_RDONLY)
    assert not first.keep_cache  # first open: nothing cached yet
    assert fs.open(ino, os.O_RDONLY).keep_cache
    backend.put_object("sales", "main", "top.csv", b"changed")
    fs.table.get(ino).expires = 0  # as after the branch timeout
    fs.table.get(ino).tree.forget_all()
    assert not fs.open(ino, os.O_RDONLY).keep_cache


def test_read_only_mount_refuses_branch_writes(backend, tmp_path, make_driver):
    d = make_driver(LakeFilesystem(backend, spool_dir=str(tmp_path / "s"), read_only=True))
    with pytest.raises(ERRORS) as exc:
        d.write("sales/main/x", b"x")
    assert exc.value.errno == errno.EROFS
    assert d.read("sales/main/top.csv") == b"x,y\n1,2\n"


def test_unlinked_open_file_stays_readable_and_is_not_uploaded(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    result = fs.open(ino, os.O_RDWR)
    fs.write(result.fh, 0, b"Z")
    drive.unlink("sales/main/top.csv")
    assert fs.read(result.fh, 0, 3) == b"Z,y"
    fs.release(result.fh)
    assert staged_away(backend, "sales", "main", "top.csv")
    assert "top.csv" not in drive.listdir("sales/main")


# ------------------------------------------------------------------ directories

def test_mkdir_persists_an_empty_directory_as_a_marker(drive, backend):
    drive.mkdir("sales/main/empty", 0o700)
    parent = drive.fs.opendir(drive.ino("sales/main"))
    drive.fs.fsyncdir(parent)  # the marker waits for the stager's batch; fsync(2) writes it
    drive.fs.releasedir(parent)
    ref = backend.resolve_ref("sales", "main")
    marker = backend.get_entry("sales", ref, "empty/")
    assert marker is not None and marker.size == 0
    assert stat.S_IMODE(drive.stat("sales/main/empty").mode) == 0o700
    assert "empty" in drive.listdir("sales/main")
    assert drive.listdir("sales/main/empty") == []
    with pytest.raises(FileExistsError):
        drive.mkdir("sales/main/empty")


def test_rmdir_refuses_non_empty_and_removes_empty(drive, backend):
    with pytest.raises(ERRORS) as exc:
        drive.rmdir("sales/main/a")
    assert errno_of(exc) == errno.ENOTEMPTY
    drive.unlink("sales/main/a/b.txt")
    assert drive.listdir("sales/main/a") == []  # emptied, still there (POSIX)
    drive.rmdir("sales/main/a")
    assert drive.listdir("sales/main") == ["top.csv"]
    assert backend.list_entries("sales", backend.resolve_ref("sales", "main"), "", delimiter="") == [
        backend.list_entries("sales", backend.resolve_ref("sales", "main"), "top.csv")[0]]


def test_rename_file_is_a_metadata_move(drive, backend):
    ref = backend.resolve_ref("sales", "main")
    before = backend.get_entry("sales", ref, "top.csv")
    drive.rename("sales/main/top.csv", "sales/main/a/moved.csv")
    after = backend.get_entry("sales", ref, "a/moved.csv")
    assert after.physical_address == before.physical_address
    assert backend.get_entry("sales", ref, "top.csv") is None
    assert drive.read("sales/main/a/moved.csv") == b"x,y\n1,2\n"


def test_rename_directory_moves_every_key_in_one_transaction(drive, backend):
    backend.put_entries("sales", "main", [(f"a/sub/f{i}", b"%d" % i) for i in range(20)])
    backend.calls.clear()
    drive.rename("sales/main/a", "sales/main/z")
    assert backend.calls["stage_entries"] == 1
    assert drive.listdir("sales/main") == ["top.csv", "z"]
    assert len(drive.listdir("sales/main/z/sub")) == 20
    assert drive.read("sales/main/z/sub/f7") == b"7"
    assert drive.read("sales/main/z/b.txt") == b"hello"


def test_rename_errors(drive):
    drive.mkdir("sales/main/d")
    with pytest.raises(ERRORS) as exc:
        drive.rename("sales/main/top.csv", "sales/main/d")
    assert errno_of(exc) == errno.EISDIR
    with pytest.raises(ERRORS) as exc:
        drive.rename("sales/main/d", "sales/main/top.csv")
    assert errno_of(exc) == errno.ENOTDIR
    drive.mkdir("sales/main/e")
    drive.write("sales/main/e/f", b"x")
    with pytest.raises(ERRORS) as exc:
        drive.rename("sales/main/d", "sales/main/e")
    assert errno_of(exc) == errno.ENOTEMPTY
    with pytest.raises(ERRORS) as exc:
        drive.rename("sales/main/top.csv", "sales/main/a/b.txt", flags=1)  # RENAME_NOREPLACE
    assert errno_of(exc) == errno.EEXIST
    with pytest.raises(ERRORS) as exc:
        drive.rename("sales/main/top.csv", "sales/v1/top2.csv")
    assert errno_of(exc) in (errno.EXDEV, errno.EROFS)
    drive.rename("sales/main/d", "sales/main/a/d")  # into another dir: fine
    assert "d" in drive.listdir("sales/main/a")


def test_rename_of_an_open_written_file_uploads_it_first(fs, drive, backend):
    parent, _ = drive.parent("sales/main/w.txt")
    result, _ = fs.create(parent, "w.txt", 0o100644, os.O_WRONLY | os.O_CREAT)
    fs.write(result.fh, 0, b"data")
    drive.rename("sales/main/w.txt", "sales/main/w2.txt")
    fs.write(result.fh, 4, b"+more")
    fs.release(result.fh)
    assert drive.read("sales/main/w2.txt") == b"data+more"
    assert "w.txt" not in drive.listdir("sales/main")


# ------------------------------------------------------------------ metadata

def test_chmod_and_utime_are_stored_in_user_metadata(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    fs.setattr(ino, mode=0o600, mtime_ns=1_600_000_000_123_456_789)
    entry = staged_entry_where(backend, "sales", "main", "top.csv", lambda entry: MODE_KEY in entry.metadata)
    assert entry.metadata[MODE_KEY] == "600" and entry.mtime == 1_600_000_000
    assert entry.metadata[MTIME_NS_KEY] == "1600000000123456789"
    attrs = fs.getattr(ino)
    assert stat.S_IMODE(attrs.mode) == 0o600 and attrs.mtime_ns == 1_600_000_000_123_456_789
    fs.setattr(ino, chown=True)  # accepted, not stored
    assert fs.listxattr(ino) == []  # the mode and mtime keys are internal; lakefuse.* are not listed


def test_access_applies_the_mode_bits_as_the_kernel_would(fs, drive):
    """access(2) where the kernel leaves it to the mount: root may do anything but execute a
    file without execute bits; others are held to their class's bits (primary or
    supplementary group)."""
    ino = drive.ino("sales/main/top.csv")
    owner = fs.getattr(ino).uid
    other = owner + 1
    fs.setattr(ino, mode=0o640)
    assert fs.access(ino, os.R_OK | os.W_OK, 0, 0) and not fs.access(ino, os.X_OK, 0, 0)
    assert fs.access(ino, os.R_OK | os.W_OK, owner, 12345) and not fs.access(ino, os.X_OK, owner, 12345)
    gid = fs.getattr(ino).gid
    assert fs.access(ino, os.R_OK, other, gid) and not fs.access(ino, os.W_OK, other, gid)
    assert fs.access(ino, os.R_OK, other, 12345, groups=(gid,))
    assert not fs.access(ino, os.R_OK, other, 12345) and fs.access(ino, os.F_OK, other, 12345)
    fs.setattr(ino, mode=0o001)
    assert fs.access(ino, os.X_OK, 0, 0)  # one execute bit anywhere is enough for root
    directory = drive.ino("sales/main/a")
    fs.setattr(directory, mode=0o000)
    assert fs.access(directory, os.R_OK | os.W_OK | os.X_OK, 0, 0)  # root searches any directory
    assert not fs.access(directory, os.X_OK, other, 12345)


def test_every_truncate_to_empty_forgets_an_mtime_set_by_utime(fs, drive, backend):
    """open(O_TRUNC), create of an existing file and truncate(2) are one operation: the file
    changes now, so an mtime set earlier by utime is not stored with the new bytes."""
    parent, _ = drive.parent("sales/main/top.csv")
    ino = drive.ino("sales/main/top.csv")
    main = backend.resolve_ref("sales", "main")
    for truncate in (lambda: fs.open(ino, os.O_WRONLY | os.O_TRUNC).fh,
                     lambda: fs.create(parent, "top.csv", 0o100644, os.O_WRONLY | os.O_TRUNC)[0].fh,
                     lambda: fs.setattr(ino, size=0) and None):
        writer = fs.open(ino, os.O_WRONLY).fh
        fs.write(writer, 0, b"written")
        fs.setattr(ino, mtime_ns=1_600_000_000_123_456_789)
        second = truncate()
        fs.release(writer)
        if second is not None:
            fs.release(second)
        entry = backend.get_entry("sales", main, "top.csv")
        assert entry.size == 0 and MTIME_NS_KEY not in entry.metadata and entry.mtime > 1_600_000_000


def test_xattrs_are_user_metadata_and_object_properties(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    fs.setxattr(ino, "user.owner", b"ana")
    assert fs.getxattr(ino, "user.owner") == b"ana"
    entry = staged_entry_where(backend, "sales", "main", "top.csv", lambda entry: "owner" in entry.metadata)
    assert entry.metadata["owner"] == "ana"
    assert fs.getxattr(ino, "lakefuse.checksum") == entry.checksum.encode()
    assert fs.getxattr(ino, "lakefuse.physical_address") == entry.physical_address.encode()
    fs.setxattr(ino, "lakefuse.content_type", b"text/csv")
    assert fs.getxattr(ino, "lakefuse.content_type") == b"text/csv"
    assert fs.listxattr(ino) == [b"user.owner"]  # virtual lakefuse.* attributes are readable, not listed
    fs.removexattr(ino, "user.owner")
    # a namespace we do not have is ENOTSUP (ls -l then stops asking), a missing name ENODATA
    for name, code in (("user.owner", errno.ENODATA), ("lakefuse.nothing", errno.ENODATA),
                       ("security.selinux", errno.ENOTSUP), ("system.posix_acl_access", errno.ENOTSUP)):
        with pytest.raises(ERRORS) as exc:
            fs.getxattr(ino, name)
        assert errno_of(exc) == code
    for name, code in (("user.owner", errno.ENODATA), ("security.selinux", errno.ENOTSUP)):
        with pytest.raises(ERRORS) as exc:
            fs.removexattr(ino, name)
        assert errno_of(exc) == code
    for name, code in (("lakefuse.checksum", errno.EPERM), ("trusted.x", errno.ENOTSUP),
                       ("user." + MODE_KEY, errno.EPERM)):
        with pytest.raises(ERRORS) as exc:
            fs.setxattr(ino, name, b"v")
        assert errno_of(exc) == code


def test_the_namespaces_an_adapter_may_refuse_itself_are_refused_here_on_every_node(fs, drive):
    """UNSUPPORTED_NAMESPACES is what the FUSE binding answers ENOTSUP without asking: it must
    be what the filesystem answers, for every name in them and every kind of node."""
    nodes = [drive.ino(path) for path in ("sales/main/top.csv", "sales/main", "sales", "sales/main/.lakefuse")]
    for prefix in UNSUPPORTED_NAMESPACES:
        for ino in nodes:
            for name in (prefix + "capability", prefix + "posix_acl_access", prefix + "x"):
                with pytest.raises(ERRORS) as exc:
                    fs.getxattr(ino, name)
                assert errno_of(exc) == errno.ENOTSUP, (ino, name)


# ------------------------------------------------------------------ refused operations and names

def test_names_longer_than_255_bytes(drive, fs):
    main = drive.ino("sales/main")
    for call in (lambda n: fs.create(main, n, 0o644, os.O_WRONLY), lambda n: fs.mkdir(main, n, 0o755),
                 lambda n: fs.lookup(main, n)):
        with pytest.raises((OSError, LakefuseError)) as exc:
            call("é" * 128)  # 256 bytes
        assert exc.value.errno == errno.ENAMETOOLONG
    result, _ = fs.create(main, "é" * 127 + "x", 0o644, os.O_WRONLY)  # 255 bytes: fine
    fs.release(result.fh)
    # the kernel passes bytes: their length is what counts
    with pytest.raises(ERRORS) as exc:
        fs.lookup(main, "é".encode() * 128)
    assert errno_of(exc) == errno.ENAMETOOLONG
    assert fs.lookup(main, ("é" * 127 + "x").encode()).ino != 0


def test_reserved_control_name_and_links_are_refused(drive, fs):
    main = drive.ino("sales/main")
    ctl = drive.ino("sales/main/.lakefuse")
    with pytest.raises(ERRORS) as exc:
        fs.create(ctl, "x", 0o644, os.O_WRONLY)
    assert errno_of(exc) == errno.EPERM
    with pytest.raises(ERRORS) as exc:
        fs.mkdir(main, ".lakefuse", 0o755)
    assert errno_of(exc) == errno.EEXIST
    with pytest.raises(ERRORS) as exc:
        drive.rename("sales/main/top.csv", "sales/main/.lakefuse")
    assert errno_of(exc) == errno.EPERM
    for call in (lambda: fs.link(drive.ino("sales/main/top.csv"), main, "h"),
                 lambda: fs.symlink(ctl, "s", b"top.csv"), lambda: fs.mknod(ctl, "n", stat.S_IFIFO | 0o644),
                 lambda: fs.symlink(main, ".lakefuse", b"top.csv") and None):
        with pytest.raises(ERRORS) as exc:
            call()
        assert errno_of(exc) in (errno.EPERM, errno.EEXIST)
    assert stat.S_ISREG(fs.mknod(main, "plain", stat.S_IFREG | 0o644).mode)
    with pytest.raises(ERRORS) as exc:
        fs.mkdir(1, "newrepo", 0o755)  # repositories are made with the CLI (branches with mkdir)
    assert errno_of(exc) == errno.EPERM


def test_the_control_directory_name_is_refused_as_before_by_every_namespace_call(drive, fs):
    """One guard: making the name says EEXIST (it is taken), removing or replacing it EPERM."""
    main = drive.ino("sales/main")
    for call, code in ((lambda: fs.create(main, ".lakefuse", 0o644, os.O_WRONLY), errno.EEXIST),
                       (lambda: fs.mkdir(main, ".lakefuse", 0o755), errno.EEXIST),
                       (lambda: fs.unlink(main, ".lakefuse"), errno.EPERM),
                       (lambda: fs.rmdir(main, ".lakefuse"), errno.EPERM),
                       (lambda: drive.rename("sales/main/.lakefuse", "sales/main/elsewhere"), errno.EPERM)):
        with pytest.raises(ERRORS) as exc:
            call()
        assert errno_of(exc) == code
    drive.mkdir("sales/main/sub")
    assert fs.mkdir(drive.ino("sales/main/sub"), ".lakefuse", 0o755).ino  # only a branch's root is reserved


def test_invalid_utf8_names_are_refused(fs, drive):
    with pytest.raises(ERRORS) as exc:
        fs.create(drive.ino("sales/main"), b"\xff\xfe", 0o644, os.O_WRONLY)
    assert errno_of(exc) == errno.EILSEQ
    for parent in ("sales/main", "sales", ""):
        with pytest.raises(ERRORS) as exc:
            fs.lookup(drive.ino(parent), b"\xff\xfe")
        assert errno_of(exc) == errno.EILSEQ


# ------------------------------------------------------------------ control files

def test_commit_through_the_control_file(fs, drive, backend):
    drive.write("sales/main/new.txt", b"n")
    status = drive.read("sales/main/.lakefuse/status").decode()
    assert status == "+ new.txt\n"
    drive.commit("sales/main", "add new.txt\n")
    head = drive.read("sales/main/.lakefuse/head").decode().strip()
    assert head == backend.branch_head("sales", "main")
    assert drive.read("sales/main/.lakefuse/commit").decode() == head + "\n"
    assert drive.read("sales/main/.lakefuse/status") == b""
    assert drive.listdir(f"sales/{head}") == ["a", "new.txt", "top.csv"]


def test_status_names_files_being_written_and_directories_made_meanwhile(fs, drive, monkeypatch):
    """What the stager has not staged when ``status`` is read (made after its flush, as a
    cancelled Spark task does): a directory as its marker's key, a file as being written."""
    monkeypatch.setattr(fs.state.stager, "flush", lambda tree: None)  # made right after the flush
    drive.mkdir("sales/main/made")
    result, _ = fs.create(drive.ino("sales/main"), "new.txt", 0o644, os.O_WRONLY | os.O_CREAT)
    try:
        fs.write(result.fh, 0, b"half")
        status = drive.read("sales/main/.lakefuse/status").decode().splitlines()
    finally:
        fs.release(result.fh)
    assert status == ["+ made/", "+ new.txt (being written)"]


def test_commit_without_changes_fails_with_enodata_and_says_why(drive):
    with pytest.raises(ERRORS) as exc:
        drive.commit("sales/main", "nothing")
    assert exc.value.errno == errno.ENODATA
    assert drive.read("sales/main/.lakefuse/commit").decode().startswith("error: no changes")


def test_commit_uploads_files_still_open_for_writing(fs, drive, backend):
    parent, _ = drive.parent("sales/main/open.txt")
    result, _ = fs.create(parent, "open.txt", 0o100644, os.O_WRONLY | os.O_CREAT)
    fs.write(result.fh, 0, b"in progress")
    drive.commit("sales/main", "with an open file")
    head = backend.branch_head("sales", "main")
    assert drive.read(f"sales/{head}/open.txt") == b"in progress"
    fs.release(result.fh)


def test_control_files_refuse_writes_except_the_operations(fs, drive):
    for name in ("head", "status"):
        with pytest.raises(ERRORS) as exc:
            fs.open(drive.ino(f"sales/main/.lakefuse/{name}"), os.O_WRONLY)
        assert errno_of(exc) == errno.EACCES
        assert drive.stat(f"sales/main/.lakefuse/{name}").mode & 0o777 == 0o444
    for name in ("branch", "commit", "merge", "reset", "tag"):
        assert fs.open(drive.ino(f"sales/main/.lakefuse/{name}"), os.O_WRONLY).direct_io
        assert drive.stat(f"sales/main/.lakefuse/{name}").mode & 0o777 == 0o644


# ------------------------------------------------------------------ other writers

def test_another_writers_change_shows_after_the_branch_timeout(backend, tmp_path, make_driver):
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"), branch_ttl=0.2)
    d = make_driver(fs)
    assert d.read("sales/main/top.csv") == b"x,y\n1,2\n"
    backend.put_object("sales", "main", "top.csv", b"updated elsewhere")
    backend.put_object("sales", "main", "fresh.txt", b"f")
    time.sleep(0.3)
    assert d.read("sales/main/top.csv") == b"updated elsewhere"
    assert "fresh.txt" in d.listdir("sales/main")


def test_backend_errors_keep_their_errno(tmp_path, make_driver):
    class Failing(MemoryBackend):
        def get_entry(self, *args):
            from lakefuse.errors import StorageError

            raise StorageError("database down")

    backend = Failing()
    backend.create_repository("r")
    d = make_driver(LakeFilesystem(backend, spool_dir=str(tmp_path / "s")))
    with pytest.raises(ERRORS) as exc:
        d.ino("r/main/x")
    assert exc.value.errno == errno.EIO


# ------------------------------------------------------------------ batching and streaming

def test_stat_of_many_siblings_lists_pages_instead_of_one_get_each(backend, tmp_path, make_driver):
    backend.put_entries("sales", "main", [(f"many/f{i:04d}", b"x") for i in range(3000)])
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"), branch_ttl=600.0)  # nothing expires meanwhile
    d = make_driver(fs)
    many = d.ino("sales/main/many")
    backend.calls.clear()
    for i in range(3000):
        assert fs.lookup(many, f"f{i:04d}").size == 1
    # a point read where a page ends, then the next page: 64, 128, ... 1000 names
    assert backend.calls["get_entry"] <= 8
    assert backend.calls["list_entries"] <= 8
    backend.calls.clear()
    with pytest.raises(ERRORS):
        fs.lookup(many, "f9999")
    assert backend.calls["get_entry"] + backend.calls["list_entries"] == 2  # one point read: object, else prefix


def test_lookups_of_missing_names_read_one_point_whatever_the_directory_size(backend, tmp_path, make_driver):
    backend.put_entries("sales", "main", [(f"many/f{i:05d}", b"x") for i in range(20_000)])
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    many = d.ino("sales/main/many")
    backend.calls.clear()
    for i in range(200):
        with pytest.raises(ERRORS):
            fs.lookup(many, f".f{i:05d}.crc")
    assert backend.calls["get_entry"] == 200
    # each a prefix probe of one item; one page, once, found the directory too big to learn whole
    assert backend.calls["list_entries"] == 201


def test_lookups_in_a_small_directory_learn_it_whole_once(backend, tmp_path, make_driver):
    backend.put_entries("sales", "main", [(f"small/part-{i:04d}.csv", b"x") for i in range(1000)])
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"), branch_ttl=600.0)
    d = make_driver(fs)
    small = d.ino("sales/main/small")
    backend.calls.clear()
    for i in range(1000):  # what Hadoop's checksum filesystem does, names not listed before
        with pytest.raises(ERRORS):
            fs.lookup(small, f".part-{i:04d}.csv.crc")
        assert fs.lookup(small, f"part-{i:04d}.csv").size == 1
    assert backend.calls["get_entry"] == 1 and backend.calls["list_entries"] == 2  # a miss, then the page


def test_a_directory_listed_to_its_end_answers_missing_names_from_memory(backend, tmp_path, make_driver):
    backend.put_entries("sales", "main", [(f"many/f{i:04d}", b"x") for i in range(2500)])
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    names = d.listdir("sales/main/many")
    assert len(names) == 2500
    many = d.ino("sales/main/many")
    backend.calls.clear()
    for name in names[:300]:
        with pytest.raises(ERRORS):
            fs.lookup(many, f".{name}.crc")  # Hadoop's checksum probe
        assert fs.lookup(many, name).size == 1
    assert sum(backend.calls.values()) == 0
    # a file made here is known at once, and one deleted is gone
    d.write("sales/main/many/.f0000.crc", b"sum")
    assert fs.lookup(many, ".f0000.crc").size == 3
    d.unlink("sales/main/many/f0001")
    with pytest.raises(ERRORS):
        fs.lookup(many, "f0001")


def test_a_directory_made_here_answers_lookups_of_new_names_from_memory(backend, tmp_path, make_driver):
    backend.create_repository("r")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.mkdir("r/main/fresh")
    fresh = d.ino("r/main/fresh")
    backend.calls.clear()
    for i in range(50):
        with pytest.raises(ERRORS):
            fs.lookup(fresh, f"new{i}")
        d.write(f"r/main/fresh/new{i}", b"data")
    assert backend.calls["get_entry"] == backend.calls["list_entries"] == 0
    assert sorted(d.listdir("r/main/fresh")) == sorted(f"new{i}" for i in range(50))


def test_big_sequential_writes_stream_to_remote_storage_while_written(fs, drive, backend, monkeypatch):
    import lakefuse.fs.uploads as uploads

    monkeypatch.setattr(uploads, "TAIL_MIN_BYTES", 1000)
    backend.local_storage = False
    parent, _ = drive.parent("sales/main/stream.bin")
    result, attrs = fs.create(parent, "stream.bin", 0o100644, os.O_WRONLY | os.O_CREAT)
    payload = os.urandom(50_000)
    for offset in range(0, len(payload), 4096):
        fs.write(result.fh, offset, payload[offset:offset + 4096])
    fs.setattr(attrs.ino, mode=0o600)  # changed while streaming: restaged after
    fs.release(result.fh)
    assert backend.calls["upload_stream"] == 1 and backend.calls["store_file"] == 0
    entry = backend.get_entry("sales", backend.resolve_ref("sales", "main"), "stream.bin")
    assert backend.object_bytes(entry) == payload and entry.metadata[MODE_KEY] == "600"


def test_a_write_that_is_not_an_append_abandons_the_stream(fs, drive, backend, monkeypatch):
    import lakefuse.fs.uploads as uploads

    monkeypatch.setattr(uploads, "TAIL_MIN_BYTES", 1000)
    parent, _ = drive.parent("sales/main/patched.bin")
    result, _ = fs.create(parent, "patched.bin", 0o100644, os.O_RDWR | os.O_CREAT)
    payload = bytearray(os.urandom(20_000))
    for offset in range(0, len(payload), 4096):
        fs.write(result.fh, offset, bytes(payload[offset:offset + 4096]))
    fs.write(result.fh, 10, b"PATCH")
    payload[10:15] = b"PATCH"
    fs.release(result.fh)
    # stored once, with the checksum of the patched bytes (the memory backend checks a given
    # checksum against the bytes: the stream's hash of the unpatched ones would fail it)
    assert backend.calls["store_file"] == 1
    assert drive.read("sales/main/patched.bin") == bytes(payload)


def test_unlink_while_streaming_uploads_nothing(fs, drive, backend, monkeypatch):
    import lakefuse.fs.uploads as uploads

    monkeypatch.setattr(uploads, "TAIL_MIN_BYTES", 1000)
    parent, _ = drive.parent("sales/main/gone.bin")
    result, _ = fs.create(parent, "gone.bin", 0o100644, os.O_WRONLY | os.O_CREAT)
    fs.write(result.fh, 0, os.urandom(5000))
    fs.unlink(parent, "gone.bin")
    fs.release(result.fh)
    assert backend.get_entry("sales", backend.resolve_ref("sales", "main"), "gone.bin") is None


def test_big_sequential_writes_to_local_storage_are_hashed_while_written_then_moved(fs, drive, backend,
                                                                                   monkeypatch, tmp_path):
    import lakefuse.fs.uploads as uploads

    monkeypatch.setattr(uploads, "TAIL_MIN_BYTES", 1000)
    parent, _ = drive.parent("sales/main/hashed.bin")
    result, attrs = fs.create(parent, "hashed.bin", 0o100644, os.O_WRONLY | os.O_CREAT)
    payload = os.urandom(50_000)
    for offset in range(0, len(payload), 4096):
        fs.write(result.fh, offset, payload[offset:offset + 4096])
    fs.setattr(attrs.ino, mode=0o600)
    fs.release(result.fh)
    # the backend checks the given checksum against the bytes, and deletes the moved file
    assert backend.calls["store_file with checksum"] == 1 and backend.calls["upload_stream"] == 0
    entry = staged_entry(backend, "sales", "main", "hashed.bin")
    assert backend.object_bytes(entry) == payload and entry.metadata[MODE_KEY] == "600"
    assert spool_files_left(fs, tmp_path / "spool") == []


def test_appends_to_a_big_file_are_answered_without_waiting_and_stored_whole(fs, drive, backend, monkeypatch):
    import lakefuse.fs.uploads as uploads

    monkeypatch.setattr(uploads, "TAIL_MIN_BYTES", 1000)
    parent, _ = drive.parent("sales/main/behind.bin")
    result, attrs = fs.create(parent, "behind.bin", 0o100644, os.O_WRONLY | os.O_CREAT)
    payload = os.urandom(3_000_000)
    chunk = 65_536
    assert fs.write_nowait(result.fh, 0, payload[:chunk]) == chunk  # small so far: one pwrite, here
    answered_at_once = 0
    for offset in range(chunk, len(payload), chunk):
        try:
            assert fs.write_nowait(result.fh, offset, payload[offset:offset + chunk]) == len(
                payload[offset:offset + chunk])
            answered_at_once += 1
        except WouldBlock:  # the queue is full
            fs.write(result.fh, offset, payload[offset:offset + chunk])
    assert answered_at_once > 0
    assert fs.getattr(attrs.ino).size == len(payload)  # queued bytes count
    with pytest.raises(WouldBlock):
        fs.write_nowait(result.fh, 5, b"x")  # not an append
    reader = fs.open(attrs.ino, os.O_RDONLY)
    assert fs.read(reader.fh, 0, len(payload)) == payload  # reads see queued bytes
    fs.release(reader.fh)
    fs.release(result.fh)
    assert backend.calls["store_file with checksum"] == 1  # hashed while written
    entry = staged_entry(backend, "sales", "main", "behind.bin")
    assert backend.object_bytes(entry) == payload


def test_writes_after_the_spool_was_moved_into_storage_go_to_a_copy(fs, drive, backend, tmp_path):
    parent, _ = drive.parent("sales/main/log.txt")
    result, _ = fs.create(parent, "log.txt", 0o100644, os.O_RDWR | os.O_CREAT)
    fs.write(result.fh, 0, b"first line\n")
    fs.fsync(result.fh)  # stored: the spool file was handed over
    first = backend.get_entry("sales", backend.resolve_ref("sales", "main"), "log.txt")
    assert fs.read(result.fh, 0, 100) == b"first line\n"  # still served from the handed-over file
    fs.write(result.fh, 11, b"second line\n")
    fs.write(result.fh, 0, b"F")
    assert fs.read(result.fh, 0, 100) == b"First line\nsecond line\n"
    fs.release(result.fh)
    assert backend.object_bytes(first) == b"first line\n"  # the stored object never changed
    assert drive.read("sales/main/log.txt") == b"First line\nsecond line\n"
    assert spool_files_left(fs, tmp_path / "spool") == []


def test_an_upload_that_failed_after_taking_the_spool_file_is_retried_from_its_bytes(backend, tmp_path,
                                                                                     make_driver):
    from lakefuse.errors import StorageError

    class FailingOnce(type(backend)):
        failures = 1

        def store_file(self, repo, path, **options):
            if self.failures:
                self.failures -= 1
                if options.get("move"):
                    os.unlink(path)  # the file was moved, then storing failed
                raise StorageError("storage down")
            return super().store_file(repo, path, **options)

    failing = FailingOnce()
    failing.create_repository("sales")
    fs = LakeFilesystem(failing, spool_dir=str(tmp_path / "spool"))
    d = make_driver(fs)
    parent, _ = d.parent("sales/main/retried.bin")
    result, _ = fs.create(parent, "retried.bin", 0o100644, os.O_WRONLY | os.O_CREAT)
    fs.write(result.fh, 0, b"precious bytes")
    with pytest.raises(StorageError):
        fs.flush(result.fh)
    fs.flush(result.fh)
    fs.release(result.fh)
    assert d.read("sales/main/retried.bin") == b"precious bytes"
    assert spool_files_left(fs, tmp_path / "spool") == []


def test_files_created_or_truncated_write_only_get_direct_io_and_no_kept_cache_after(fs, drive, backend):
    parent = drive.ino("sales/main")
    created, _ = fs.create(parent, "new.bin", 0o100644, os.O_WRONLY | os.O_CREAT)
    assert created.direct_io  # cp, >: the kernel passes the bytes through, caching nothing
    fs.write(created.fh, 0, b"written around the page cache")
    fs.release(created.fh)
    ino = drive.ino("sales/main/new.bin")
    assert not fs.open(ino, os.O_RDONLY).keep_cache  # the kernel's cache never saw these bytes
    assert fs.open(ino, os.O_RDONLY).keep_cache

    read_write, _ = fs.create(parent, "rw.bin", 0o100644, os.O_RDWR | os.O_CREAT)
    assert not read_write.direct_io  # may read (and mmap) what it writes
    fs.write(read_write.fh, 0, b"cached")
    fs.release(read_write.fh)
    assert fs.open(drive.ino("sales/main/rw.bin"), os.O_RDONLY).keep_cache  # write-through: cached

    top = drive.ino("sales/main/top.csv")
    in_place = fs.open(top, os.O_WRONLY)
    assert not in_place.direct_io  # overwrites in place: other readers' pages
    fs.release(in_place.fh)
    truncating = fs.open(top, os.O_WRONLY | os.O_TRUNC)
    assert truncating.direct_io
    fs.release(truncating.fh)
    assert not fs.open(top, os.O_RDONLY).direct_io


def test_rmdir_removes_the_marker_even_when_a_listing_answered_the_lookup(fs, drive, backend):
    runs = drive.mkdir("sales/main/runs")
    fs.mkdir(runs.ino, "a", 0o755)
    fs.rmdir(runs.ino, "a")  # its stat came from a page of runs/ (the second miss there)
    assert backend.get_entry("sales", backend.resolve_ref("sales", "main"), "runs/a/") is None
    assert drive.listdir("sales/main/runs") == []


def test_a_closed_file_waiting_to_be_staged_is_never_lost_to_a_listing_made_meanwhile(backend, tmp_path, make_driver,
                                                                                     monkeypatch):
    import lakefuse.fs.stager as stager

    monkeypatch.setattr(stager, "BATCH_WINDOW", 30.0)  # staged only when flushed below
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"), branch_ttl=1.0)
    d = make_driver(fs)
    d.mkdir("sales/main/fresh")
    written = time.monotonic()
    d.write("sales/main/fresh/waiting.txt", b"closed, not staged yet")
    assert backend.get_entry("sales", backend.resolve_ref("sales", "main"), "fresh/waiting.txt") is None
    time.sleep(0.5)
    assert d.listdir("sales/main/fresh") == ["waiting.txt"]  # listed whole while it waits
    fs.state.stager.flush_all()
    time.sleep(max(0.0, written + 1.1 - time.monotonic()))  # its cached stat expired; the listing's has not
    fresh = d.ino("sales/main/fresh")
    assert fs.lookup(fresh, "waiting.txt").size == len(b"closed, not staged yet")
    assert d.read("sales/main/fresh/waiting.txt") == b"closed, not staged yet"


def test_a_new_directory_waits_for_the_stager_and_is_never_lost_meanwhile(backend, tmp_path, make_driver,
                                                                          monkeypatch):
    """mkdir stores its marker and stages it with the next batch (one transaction for a
    ``tar x``'s directories and files): until then lookups, listings, rmdir of its parent and a
    second mkdir see it; a commit or fsync(2) stages it first."""
    import lakefuse.fs.stager as stager

    monkeypatch.setattr(stager, "BATCH_WINDOW", 30.0)  # staged only when flushed below
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    ref = backend.resolve_ref("sales", "main")
    d.mkdir("sales/main/made", 0o750)
    d.mkdir("sales/main/made/inner")
    d.write("sales/main/made/inner/f.txt", b"x")
    assert backend.get_entry("sales", ref, "made/") is None  # not staged yet
    assert stat.S_ISDIR(d.stat("sales/main/made").mode) and stat.S_IMODE(d.stat("sales/main/made").mode) == 0o750
    assert "made" in d.listdir("sales/main") and d.listdir("sales/main/made") == ["inner"]
    with pytest.raises(FileExistsError):
        d.mkdir("sales/main/made")
    with pytest.raises(OSError) as raised:
        d.rmdir("sales/main/made")  # stages what waits, then finds it holds a directory
    assert raised.value.errno == errno.ENOTEMPTY
    assert backend.get_entry("sales", ref, "made/") is not None
    assert backend.get_entry("sales", ref, "made/inner/f.txt") is not None
    assert fs.state.unstaged.paths(fs.state.refs.branch_tree("sales", "main")) == []
    d.mkdir("sales/main/later")
    d.commit("sales/main", "with a new empty directory")  # stages the waiting marker first
    head = backend.resolve_ref("sales", "main")
    assert backend.get_entry("sales", head, "later/") is not None
    assert "later" in d.listdir("sales/main")


def test_small_new_files_are_created_written_closed_and_released_without_waiting(backend, tmp_path, make_driver):
    """What a shell tool creating small files sends is answered on the event loop: no backend
    call (the directory was made here, the entry waits for the stager), only local files."""
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.write("sales/main/warm.txt", b"the first upload learns that storage is local")
    d.mkdir("sales/main/fresh")
    fresh = d.ino("sales/main/fresh")
    for i in range(20):
        name = f"f{i}"
        with pytest.raises(FileNotFoundError):
            fs.lookup(fresh, name, blocking=False)  # a new name: absent, answered from memory
        result, _ = fs.create(fresh, name, 0o100644, os.O_WRONLY | os.O_CREAT, blocking=False)
        assert fs.write_nowait(result.fh, 0, b"small %d" % i) == len(b"small %d" % i)
        fs.flush_nowait(result.fh)
        fs.release_nowait(result.fh)
    assert sorted(d.listdir("sales/main/fresh")) == sorted(f"f{i}" for i in range(20))
    assert staged_entry(backend, "sales", "main", "fresh/f7") is not None
    assert d.read("sales/main/fresh/f7") == b"small 7"
    f11 = fs.lookup(fresh, "f11").ino
    with pytest.raises(WouldBlock):
        fs.open(f11, os.O_RDWR, blocking=False)  # a writer may need the object's bytes: a worker opens
    reader = fs.open(f11, os.O_RDONLY, blocking=False)  # grep: a reader of a file memory knows
    assert fs.read(reader.fh, 0, 100) == b"small 11"
    fs.release_nowait(reader.fh)
    for i in range(10):  # rm: known files in a directory with a marker
        fs.unlink(fresh, f"f{i}", blocking=False)
    assert sorted(d.listdir("sales/main/fresh")) == sorted(f"f{i}" for i in range(10, 20))
    assert staged_away(backend, "sales", "main", "fresh/f3")


def test_what_tar_and_git_do_to_names_and_times_is_answered_from_memory_and_staged_in_one_batch(
        backend, tmp_path, make_driver, monkeypatch):
    """mkdir, utime and chmod of files and directories, and a closed file renamed into place
    (``git``'s lock files, ``rsync``'s temporary names) are answered on the event loop
    (``blocking=False``) and wait for the stager's next batch: one transaction for all of
    them, and lookups and listings show each change meanwhile."""
    import lakefuse.fs.stager as stager

    monkeypatch.setattr(stager, "BATCH_WINDOW", 30.0)  # staged only when flushed below
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.write("sales/main/warm.txt", b"the first upload learns that storage is local")
    fs.state.stager.flush_all()
    d.listdir("sales/main")  # known whole: a new name is free, from memory
    root = d.ino("sales/main")
    transactions = backend.calls["stage_entries"]

    pkg = fs.mkdir(root, "pkg", 0o750, blocking=False).ino
    result, _ = fs.create(pkg, "config.lock", 0o100644, os.O_WRONLY | os.O_CREAT, blocking=False)
    fs.write_nowait(result.fh, 0, b"[core]\n")
    fs.flush_nowait(result.fh)
    fs.release_nowait(result.fh)
    lock_ino = fs.lookup(pkg, "config.lock", blocking=False).ino
    fs.rename(pkg, "config.lock", pkg, "config", 0, blocking=False)
    fs.setattr(lock_ino, mtime_ns=5 * 10**9, atime_ns=5 * 10**9, blocking=False)
    fs.setattr(pkg, mode=0o700, blocking=False)
    fs.setattr(pkg, mtime_ns=7 * 10**9, atime_ns=7 * 10**9, blocking=False)
    assert backend.calls["stage_entries"] == transactions  # nothing staged yet

    assert fs.lookup(pkg, "config", blocking=False).ino == lock_ino  # the inode follows its name
    with pytest.raises(FileNotFoundError):
        fs.lookup(pkg, "config.lock")
    assert d.listdir("sales/main/pkg") == ["config"]
    assert d.read("sales/main/pkg/config") == b"[core]\n"
    assert fs.getattr(lock_ino).mtime_ns == 5 * 10**9
    shown = fs.getattr(pkg)
    assert stat.S_IMODE(shown.mode) == 0o700 and shown.mtime_ns == 7 * 10**9
    ref = backend.resolve_ref("sales", "main")
    assert backend.get_entry("sales", ref, "pkg/") is None and backend.get_entry("sales", ref, "pkg/config") is None

    fs.state.stager.flush_all()
    assert backend.calls["stage_entries"] == transactions + 1  # one batch
    ref = backend.resolve_ref("sales", "main")
    marker = backend.get_entry("sales", ref, "pkg/")
    assert marker is not None and marker.metadata["lakefuse-mode"] == "700" and marker.mtime == 7
    assert backend.object_bytes(backend.get_entry("sales", ref, "pkg/config")) == b"[core]\n"
    assert backend.get_entry("sales", ref, "pkg/config").mtime == 5
    assert backend.get_entry("sales", ref, "pkg/config.lock") is None
    assert fs.state.unstaged.paths(fs.state.refs.branch_tree("sales", "main")) == []


def test_a_directory_made_here_stays_known_whole_when_its_mode_and_times_change(backend, tmp_path, make_driver):
    """rsync makes each directory, sets its mode, then fills it: every name it looks up there
    first is missing, and memory still answers for them after the directory's own change."""
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.write("sales/main/warm.txt", b"the first upload learns that storage is local")
    d.listdir("sales/main")
    made = fs.mkdir(d.ino("sales/main"), "made", 0o700, blocking=False).ino
    fs.setattr(made, mode=0o755, blocking=False)
    fs.setattr(made, mtime_ns=7 * 10**9, atime_ns=7 * 10**9, blocking=False)
    reads = backend.calls["get_entry"], backend.calls["list_entries"]
    for name in ("file.txt", ".file.txt.a1b2c3"):
        with pytest.raises(FileNotFoundError):
            fs.lookup(made, name, blocking=False)  # from memory: no WouldBlock, no backend read
    assert (backend.calls["get_entry"], backend.calls["list_entries"]) == reads
    fs.rmdir(d.ino("sales/main"), "made")
    with pytest.raises(FileNotFoundError):
        d.ino("sales/main/made")


def test_rm_r_of_a_tree_made_here_is_listed_and_removed_from_memory_in_one_batch(
        backend, tmp_path, make_driver, monkeypatch):
    """``grep -r`` and ``rm -r`` after ``tar x``: the directories this mount made and filled
    are listed from memory (no backend listing), and an emptied one is removed on the event
    loop (``blocking=False``), its marker's deletion staged with the unlinks' batch."""
    import lakefuse.fs.stager as stager

    monkeypatch.setattr(stager, "BATCH_WINDOW", 30.0)  # staged only when flushed below
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.write("sales/main/warm.txt", b"the first upload learns that storage is local")
    d.listdir("sales/main")
    root = d.ino("sales/main")
    top = fs.mkdir(root, "tree", 0o755, blocking=False).ino
    sub = fs.mkdir(top, "sub", 0o755, blocking=False).ino
    for parent, name in ((top, "b.txt"), (top, "a.txt"), (sub, "c.txt")):
        result, _ = fs.create(parent, name, 0o100644, os.O_WRONLY | os.O_CREAT, blocking=False)
        fs.write_nowait(result.fh, 0, name.encode())
        fs.flush_nowait(result.fh)
        fs.release_nowait(result.fh)
    fs.state.stager.flush_all()
    listings = backend.calls["list_entries"]
    assert d.listdir("sales/main/tree") == ["a.txt", "b.txt", "sub"]  # the backend's order: by key
    assert d.listdir("sales/main/tree/sub") == ["c.txt"]
    assert backend.calls["list_entries"] == listings

    with pytest.raises(WouldBlock):  # not empty: the backend says ENOTEMPTY
        fs.rmdir(top, "sub", blocking=False)
    with pytest.raises(OSError) as full:
        fs.rmdir(top, "sub")
    assert full.value.errno == errno.ENOTEMPTY
    transactions = backend.calls["stage_entries"]
    fs.unlink(sub, "c.txt", blocking=False)
    fs.rmdir(top, "sub", blocking=False)
    for name in ("a.txt", "b.txt"):
        fs.unlink(top, name, blocking=False)
    fs.rmdir(root, "tree", blocking=False)
    assert backend.calls["stage_entries"] == transactions  # nothing staged yet
    with pytest.raises(FileNotFoundError):
        fs.lookup(root, "tree")
    assert "tree" not in d.listdir("sales/main")
    assert backend.get_entry("sales", backend.resolve_ref("sales", "main"), "tree/sub/") is not None

    fs.state.stager.flush_all()
    assert backend.calls["stage_entries"] == transactions + 1  # one batch
    ref = backend.resolve_ref("sales", "main")
    assert [item.key for item in backend.list_entries("sales", ref, "tree/", after="", limit=10)] == []


def test_rmdir_from_memory_leaves_what_memory_cannot_decide_to_a_worker(backend, tmp_path, make_driver):
    backend.put_object("sales", "main", "implied/file.txt", b"a directory without a marker")
    backend.put_object("sales", "main", "implied/empty/", b"")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.write("sales/main/warm.txt", b"the first upload learns that storage is local")
    d.listdir("sales/main")
    root = d.ino("sales/main")
    fs.mkdir(root, "fresh", 0o755, blocking=False)
    with pytest.raises(WouldBlock):  # its marker still waits for the stager
        fs.rmdir(root, "fresh", blocking=False)
    with pytest.raises(WouldBlock):  # never looked up
        fs.rmdir(root, "elsewhere", blocking=False)
    with pytest.raises(OSError) as not_dir:
        fs.rmdir(root, "warm.txt", blocking=False)
    assert not_dir.value.errno == errno.ENOTDIR
    d.listdir("sales/main/implied")
    d.listdir("sales/main/implied/empty")
    with pytest.raises(WouldBlock):  # its parent has no marker: may need one
        fs.rmdir(d.ino("sales/main/implied"), "empty", blocking=False)
    fs.rmdir(root, "fresh")  # the blocking way still works
    assert "fresh" not in d.listdir("sales/main")


def test_rmdir_of_a_directory_memory_knows_without_its_marker_deletes_the_marker(backend, tmp_path, make_driver):
    """A directory listed while a key was under it (no marker in the row), emptied and given a
    marker by another writer: its rmdir stages the marker's deletion, never memory alone."""
    backend.put_object("sales", "main", "top/", b"")
    backend.put_object("sales", "main", "top/sub/part", b"a task's file")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.write("sales/main/warm.txt", b"the first upload learns that storage is local")
    assert d.listdir("sales/main/top") == ["sub"]  # a row without a marker
    backend.put_object("sales", "main", "top/sub/", b"")  # another writer: the marker, then
    backend.delete_object("sales", "main", "top/sub/part")  # its last key gone
    assert d.listdir("sales/main/top/sub") == []
    top = d.ino("sales/main/top")
    with pytest.raises(WouldBlock):  # memory does not know the marker
        fs.rmdir(top, "sub", blocking=False)
    fs.rmdir(top, "sub")
    ref = backend.resolve_ref("sales", "main")
    assert backend.get_entry("sales", ref, "top/sub/") is None
    assert d.listdir("sales/main/top") == []


def test_a_rename_memory_cannot_decide_waits_for_a_worker_and_changes_nothing(fs, drive, backend):
    top = drive.ino("sales/main")
    with pytest.raises(WouldBlock):  # neither name is known yet: the backend is asked
        fs.rename(top, "top.csv", top, "moved.csv", 0, blocking=False)
    with pytest.raises(WouldBlock):  # a directory: its keys are listed and moved
        fs.rename(top, "a", top, "b", 0, blocking=False)
    drive.listdir("sales/main")
    drive.listdir("sales/main/a")  # every name above is known now
    a = drive.ino("sales/main/a")
    with pytest.raises(WouldBlock):  # it leaves a directory with no marker: the backend says whether it stays
        fs.rename(a, "b.txt", top, "b.txt", 0, blocking=False)
    with pytest.raises(FileExistsError):
        fs.rename(top, "top.csv", a, "b.txt", RENAME_NOREPLACE, blocking=False)
    assert drive.read("sales/main/top.csv") == b"x,y\n1,2\n" and drive.listdir("sales/main/a") == ["b.txt"]
    assert backend.calls["stage_entries"] == 0
    fs.rename(top, "top.csv", top, "moved.csv", 0, blocking=False)
    assert "moved.csv" in drive.listdir("sales/main") and "top.csv" not in drive.listdir("sales/main")
    assert staged_away(backend, "sales", "main", "top.csv")
    assert backend.object_bytes(staged_entry(backend, "sales", "main", "moved.csv")) == b"x,y\n1,2\n"


def test_mkdir_waits_for_a_worker_until_storage_is_known_local(backend, tmp_path, make_driver):
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    drive = make_driver(fs)
    drive.listdir("sales/main")
    root = drive.ino("sales/main")
    with pytest.raises(WouldBlock):  # where its storage is: asked once, on a worker
        fs.mkdir(root, "d1", 0o755, blocking=False)
    assert "d1" not in drive.listdir("sales/main")
    fs.mkdir(root, "d1", 0o755)
    fs.mkdir(root, "d2", 0o755, blocking=False)
    with pytest.raises(FileExistsError):
        fs.mkdir(root, "d2", 0o755, blocking=False)
    remote = MemoryBackend(local_storage=False)
    remote.create_repository("s3repo")
    remote_fs = LakeFilesystem(remote, spool_dir=str(tmp_path / "r"))
    remote_drive = make_driver(remote_fs)
    remote_drive.listdir("s3repo/main")
    remote_root = remote_drive.ino("s3repo/main")
    remote_fs.mkdir(remote_root, "d1", 0o755)
    with pytest.raises(WouldBlock):  # a marker uploaded to remote storage: never on the event loop
        remote_fs.mkdir(remote_root, "d2", 0o755, blocking=False)


def test_what_would_wait_is_left_to_a_worker_thread(fs, drive, backend):
    ino = drive.ino("sales/main/top.csv")
    result = fs.open(ino, os.O_WRONLY)  # no spool yet: the first write copies the object's bytes
    with pytest.raises(WouldBlock):
        fs.write_nowait(result.fh, 0, b"X")
    fs.write(result.fh, 0, b"X")
    with pytest.raises(WouldBlock):
        fs.flush_nowait(result.fh)  # an existing file: staged now, in the database
    with pytest.raises(WouldBlock):
        fs.release_nowait(result.fh)  # still dirty: the release uploads
    fs.flush(result.fh)
    fs.release_nowait(result.fh)
    assert drive.read("sales/main/top.csv") == b"X,y\n1,2\n"
    parent = drive.ino("sales/main/a")
    with pytest.raises(WouldBlock):  # not known in memory: the backend must be asked
        fs.create(parent, "unknown-yet", 0o100644, os.O_WRONLY | os.O_CREAT, blocking=False)
    drive.ino("sales/main/a/b.txt")
    with pytest.raises(WouldBlock):  # "a" has no marker: its last file going may need one
        fs.unlink(parent, "b.txt", blocking=False)
    fs.unlink(parent, "b.txt")
    assert drive.listdir("sales/main/a") == []


def test_a_listing_never_shows_an_older_version_of_a_file_whose_newer_entry_waits(backend, tmp_path, make_driver):
    import threading

    class SlowToReturn(type(backend)):
        """Stages, then holds the stager's thread until released: the backend has the first
        version while the mount already wrote the second."""
        hold = threading.Event()
        held = threading.Event()

        def stage_entries(self, repo, branch, items, deleted_exist=False):
            super().stage_entries(repo, branch, items, deleted_exist)
            if any(path == "fresh/f" for path, _entry in items) and not self.held.is_set():
                self.held.set()
                self.hold.wait(10)

    slow = SlowToReturn()
    slow.create_repository("sales")
    fs = LakeFilesystem(slow, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.mkdir("sales/main/fresh")
    d.write("sales/main/fresh/f", b"v1")
    assert slow.held.wait(10)  # v1 is in the backend; the stager is still busy with it
    d.write("sales/main/fresh/f", b"version 2")  # waits for the next batch
    fresh = d.ino("sales/main/fresh")
    listed = {}
    fh = fs.opendir(fresh)
    fs.readdir(fh, 0, lambda name, attrs, offset: listed.setdefault(name.decode(), attrs.size) or True)
    fs.releasedir(fh)
    assert listed["f"] == len(b"version 2")
    assert d.read("sales/main/fresh/f") == b"version 2"
    slow.hold.set()
    entry = staged_entry(slow, "sales", "main", "fresh/f")
    deadline = time.monotonic() + 5
    while slow.object_bytes(entry) != b"version 2" and time.monotonic() < deadline:
        time.sleep(0.01)
        entry = staged_entry(slow, "sales", "main", "fresh/f")
    assert slow.object_bytes(entry) == b"version 2"
    assert d.read("sales/main/fresh/f") == b"version 2"


def test_deletions_wait_for_the_next_batch_and_answer_from_memory_meanwhile(backend, tmp_path, make_driver,
                                                                           monkeypatch):
    import lakefuse.fs.stager as stager

    monkeypatch.setattr(stager, "BATCH_WINDOW", 30.0)  # staged only when flushed below
    backend.put_entries("sales", "main", [(f"implied/f{i}", b"x") for i in range(30)])  # no marker
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    backend.calls.clear()
    for i in range(29):
        d.unlink(f"sales/main/implied/f{i}")
    assert backend.calls["stage_entries"] == 0  # all waiting
    assert d.listdir("sales/main/implied") == ["f29"]
    with pytest.raises(FileNotFoundError):
        d.ino("sales/main/implied/f3")
    d.write("sales/main/implied/tmp", b"made and removed within one batch")
    d.unlink("sales/main/implied/tmp")
    d.unlink("sales/main/implied/f29")  # the last file of a directory without a marker
    assert d.listdir("sales/main/implied") == []  # the directory stays, empty
    fs.state.stager.flush_all()
    ref = backend.resolve_ref("sales", "main")
    assert [item.key for item in backend.list_entries("sales", ref, "implied/", delimiter="")] == ["implied/"]
    assert backend.get_entry("sales", ref, "implied/tmp") is None
    assert d.listdir("sales/main/implied") == []


def test_a_change_to_a_directory_removed_meanwhile_does_not_bring_it_back(backend, tmp_path, make_driver):
    """``chmod`` racing ``rm -r`` (a cancelled Spark task's ``mkdirs`` sets each directory's
    mode): the kernel still holds the removed directory's inode; its change stages nothing."""
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "s"))
    d = make_driver(fs)
    d.write("sales/main/warm.txt", b"the first upload learns that storage is local")
    root = d.ino("sales/main")
    gone = fs.mkdir(root, "gone", 0o755).ino
    fs.state.stager.flush_all()
    fs.rmdir(root, "gone")
    fs.setattr(gone, mode=0o700)
    fs.state.stager.flush_all()
    ref = backend.resolve_ref("sales", "main")
    assert backend.get_entry("sales", ref, "gone/") is None
    assert "gone" not in d.listdir("sales/main")
