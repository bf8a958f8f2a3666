"""What the FUSE binding answers itself (``lakefuse.fs.native_answers``), without a kernel: new
inodes of commit and tag files whose objects are local files, and the names of their
directories once listed, are registered with a recording stand-in for the binding's
registries, branch files never, branch directories listed whole or made here with the names
they have and every name made or changed since, and a forgotten inode is taken back."""

from __future__ import annotations

import os
import stat
import time

import pytest

from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.negatives import NEGATIVE_ENTRIES_MOST
from test_passthrough import LocalFilesBackend, RecordingBackings


class RecordingBinding:
    """The binding's registry of inodes it opens itself, as the tests see it."""

    def __init__(self):
        self.registered: dict[int, tuple[bytes, int, int]] = {}
        self.names: dict[int, tuple[frozenset[bytes], float]] = {}
        self.names_added = 0

    def add(self, ino: int, path: bytes, size: int, read_ahead: int = 0) -> None:
        self.registered[ino] = (path, size, read_ahead)

    def remove(self, ino: int) -> None:
        self.registered.pop(ino, None)

    def add_names(self, ino: int, names: frozenset[bytes], timeout: float, expires: float = 0.0,
                  record: int = 0) -> None:
        self.names[ino] = (names, timeout)
        self.names_added += 1

    def remove_names(self, ino: int) -> None:
        self.names.pop(ino, None)


def filesystem(tmp_path, *, passthrough: bool = True, read_only: bool = False, backend=None):
    if backend is None:
        backend = LocalFilesBackend(tmp_path)
    backend.create_repository("sales")
    for i in range(3):
        backend.put_object("sales", "main", f"data/part-{i}.csv", f"id\n{i}\n".encode())
    backend.put_object("sales", "main", "top.csv", b"x,y\n1,2\n")
    backend.commit("sales", "main", "first")
    backend.create_tag("sales", "v1", "main")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), read_only=read_only)
    backings = RecordingBackings()
    if passthrough:
        fs.enable_passthrough(backings)
    binding = RecordingBinding()
    enabled = fs.enable_native_answers(binding)
    return fs, binding, backend, enabled


def test_listed_and_looked_up_commit_and_tag_files_are_registered_with_their_objects(tmp_path, make_driver):
    fs, binding, backend, enabled = filesystem(tmp_path)
    assert enabled
    drive = make_driver(fs)
    commit = backend.resolve_ref("sales", "main").commit_id
    assert drive.listdir(f"sales/{commit}/data") == ["part-0.csv", "part-1.csv", "part-2.csv"]
    top = drive.ino("sales/v1/top.csv")
    listed = {drive.ino(f"sales/{commit}/data/part-{i}.csv") for i in range(3)}
    assert set(binding.registered) == listed | {top}
    path, size, read_ahead = binding.registered[top]
    entry = backend.get_entry("sales", backend.resolve_ref("sales", "v1"), "top.csv")
    assert path.decode() == backend.local_file("sales", entry) and size == 8 and read_ahead == 8
    with open(path, "rb") as f:
        assert f.read() == b"x,y\n1,2\n"


def test_branch_files_are_never_registered(tmp_path, make_driver):
    for read_only in (False, True):  # a read-only mount's branch still moves (other writers)
        fs, binding, _, _ = filesystem(tmp_path / str(read_only), read_only=read_only)
        drive = make_driver(fs)
        drive.listdir("sales/main/data")
        drive.ino("sales/main/top.csv")
        assert binding.registered == {}


def test_a_forgotten_inode_is_taken_back(tmp_path, make_driver):
    fs, binding, backend, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    ino = drive.ino("sales/v1/top.csv")
    drive.ino("sales/v1/top.csv")  # a second lookup: the kernel holds it twice
    fs.forget([(ino, 1)])
    assert ino in binding.registered
    fs.forget([(ino, 1)])
    assert ino not in binding.registered
    again = drive.ino("sales/v1/top.csv")  # a new inode, registered afresh
    assert again != ino and again in binding.registered


def test_no_file_is_registered_without_passthrough_or_local_objects(tmp_path, make_driver):
    fs, binding, _, opens = filesystem(tmp_path / "off", passthrough=False)
    assert not opens
    drive = make_driver(fs)
    drive.ino("sales/v1/top.csv")
    assert binding.registered == {}
    drive.listdir("sales/v1")  # names need no passthrough
    assert binding.names[drive.ino("sales/v1")][0] == frozenset({b"data", b"top.csv"})

    class RemoteObjects(LocalFilesBackend):
        def local_file(self, repo, entry):
            return None

    fs, binding, _, _ = filesystem(tmp_path / "remote", backend=RemoteObjects(tmp_path))
    make_driver(fs).ino("sales/v1/top.csv")
    assert binding.registered == {}


def test_once_passthrough_turned_itself_off_nothing_more_is_registered(tmp_path, make_driver):
    fs, binding, _, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    fs.passthrough.enabled = False  # what a registration failing with EPERM does (lakefuse.fs.passthrough)
    drive.ino("sales/v1/top.csv")
    assert binding.registered == {}


def test_a_commit_directory_listed_to_its_end_is_registered_with_its_names(tmp_path, make_driver):
    fs, binding, backend, _ = filesystem(tmp_path)
    drive = make_driver(fs)
    commit = backend.resolve_ref("sales", "main").commit_id
    drive.listdir(f"sales/{commit}")
    drive.listdir(f"sales/{commit}/data")
    drive.listdir("sales/main/data")  # a branch's names change: not registered
    top, data = drive.ino(f"sales/{commit}"), drive.ino(f"sales/{commit}/data")
    assert binding.names == {
        top: (frozenset({b"data", b"top.csv"}), 86400.0),
        data: (frozenset({b"part-0.csv", b"part-1.csv", b"part-2.csv"}), 86400.0),
    }
    drive.listdir(f"sales/{commit}/data")  # listed again: the binding has its names already
    assert binding.names_added == 2
    # the handler answers the same names missing: a negative entry kept as long
    missing = fs.lookup(data, b".part-0.csv.crc")
    assert missing.ino == 0 and missing.entry_timeout == 86400.0
    fs.forget([(data, 100)])  # every lookup the kernel held (lookups, listings of the parent)
    assert data not in binding.names


def test_a_directory_of_more_names_than_the_limit_is_not_registered(tmp_path, make_driver, monkeypatch):
    from lakefuse.fs import native_answers

    monkeypatch.setattr(native_answers, "MAX_NAMES", 2)
    fs, binding, backend, _ = filesystem(tmp_path)
    commit = backend.resolve_ref("sales", "main").commit_id
    drive = make_driver(fs)
    drive.listdir(f"sales/{commit}/data")  # 3 names
    drive.listdir(f"sales/{commit}")  # 2
    assert set(binding.names) == {drive.ino(f"sales/{commit}")}


class InsertingBinding(RecordingBinding):
    """A binding that can add a name to a registered directory's, expire a registration and
    record the negative entries it gave (``answer``: what its LOOKUP does)."""

    def __init__(self):
        super().__init__()
        self.expires: dict[int, float] = {}
        self.recorded: dict[int, set[bytes]] = {}

    def add_names(self, ino: int, names: frozenset[bytes], timeout: float, expires: float = 0.0,
                  record: bool = False) -> None:
        super().add_names(ino, set(names), timeout)
        self.expires[ino] = expires
        self.recorded[ino] = set()
        assert record == (timeout > 0)

    def record_most(self, most: int) -> None:
        self.most = most

    def remove_names(self, ino: int) -> set[bytes]:
        super().remove_names(ino)
        return self.recorded.pop(ino, set())

    def insert_name(self, ino: int, name: bytes) -> bool:
        if ino not in self.names:
            return False
        self.names[ino][0].add(name)
        recorded = self.recorded[ino]
        if name in recorded:
            recorded.discard(name)
            return True
        return False

    def answer(self, ino: int, name: bytes) -> bool:
        """A LOOKUP of ``name`` in ``ino``: whether the binding answers it (missing)."""
        if ino not in self.names or name in self.names[ino][0]:
            return False
        if self.names[ino][1] > 0:
            self.recorded[ino].add(name)
        return True


def branch_filesystem(tmp_path, *, change_feed: bool = False):
    backend = LocalFilesBackend(tmp_path)
    backend.create_repository("sales")
    backend.put_object("sales", "main", "top.csv", b"x,y\n1,2\n")
    backend.put_object("sales", "main", "data/part-0.csv", b"0\n")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), change_feed=change_feed)
    binding = InsertingBinding()
    fs.enable_native_answers(binding)
    return fs, binding, backend


def test_a_directory_made_on_a_branch_is_registered_empty_until_its_listing_would_expire(tmp_path, make_driver):
    fs, binding, _ = branch_filesystem(tmp_path)
    drive = make_driver(fs)
    before = time.monotonic()
    made = drive.mkdir("sales/main/new").ino
    assert binding.names[made] == (set(), 0.0)  # no change feed: no negative entry for the kernel to keep
    assert before + 0.9 < binding.expires[made] <= time.monotonic() + 1.0  # the branch's 1 s


def test_a_branch_directory_listed_whole_is_registered_with_the_trees_names_and_unstaged_files(
        tmp_path, make_driver):
    fs, binding, _ = branch_filesystem(tmp_path)
    drive = make_driver(fs)
    data = drive.ino("sales/main/data")
    being_written, _ = fs.create(data, b"open.csv", 0o644, os.O_WRONLY)  # not staged, not closed
    assert sorted(drive.listdir("sales/main/data")) == ["open.csv", "part-0.csv"]
    assert binding.names[data] == ({b"open.csv", b"part-0.csv"}, 0.0)
    assert time.monotonic() < binding.expires[data] <= time.monotonic() + 1.0
    # the handler answers the same: a name not among them is missing, from memory
    assert binding.answer(data, b".part-0.csv.crc")
    with pytest.raises(OSError):
        fs.lookup(data, b".part-0.csv.crc")
    fs.release(being_written.fh)
    binding.names_added = 0
    drive.listdir("sales/main/data")  # still registered: nothing to do
    assert binding.names_added == 0
    # the branch's root: the control directory is there, though listings hide it
    assert ".lakefuse" not in drive.listdir("sales/main")
    assert binding.names[drive.ino("sales/main")][0] == {b"data", b"top.csv", b".lakefuse"}


def test_a_registration_made_while_a_name_is_made_gets_that_name(tmp_path, make_driver):
    """A listing that ends between the check before a create and the create itself registers
    names read before the create: the check after it adds the name."""
    fs, binding, _ = branch_filesystem(tmp_path)
    drive = make_driver(fs)
    data = drive.ino("sales/main/data")
    create = fs._files.create

    def listed_meanwhile(*args):
        drive.listdir("sales/main/data")  # registered now, without the new name
        assert b"new.csv" not in binding.names[data][0]
        return create(*args)

    fs._files.create = listed_meanwhile
    result, _ = fs.create(data, b"new.csv", 0o644, os.O_WRONLY)
    fs.release(result.fh)
    assert b"new.csv" in binding.names[data][0] and not binding.answer(data, b"new.csv")


def test_every_name_made_in_it_goes_to_the_handler_first(tmp_path, make_driver):
    fs, binding, _ = branch_filesystem(tmp_path)
    drive = make_driver(fs)
    made = drive.mkdir("sales/main/new").ino
    drive.write("sales/main/new/file.csv", b"1\n")
    drive.mkdir("sales/main/new/sub")
    fs.symlink(made, b"link", b"file.csv")
    fs.mknod(made, b"fifo", stat.S_IFIFO | 0o644)
    drive.rename("sales/main/top.csv", "sales/main/new/moved.csv")
    with pytest.raises(OSError):  # a make that fails: its name was added all the same (harmless)
        fs.mkdir(made, b"file.csv", 0o755)
    names = binding.names[made][0]
    assert names == {b"file.csv", b"sub", b"link", b"fifo", b"moved.csv"}
    assert drive.ino("sales/main/new/sub") in binding.names  # made here too: registered, empty
    assert sorted(drive.listdir("sales/main/new")) == sorted(name.decode() for name in names)


def test_under_a_change_feed_names_others_change_go_to_the_handler_and_their_negative_entries_are_dropped(
        tmp_path, make_driver):
    fs, binding, backend = branch_filesystem(tmp_path, change_feed=True)
    drive = make_driver(fs)
    made = drive.mkdir("sales/main/new").ino
    data = drive.ino("sales/main/data")
    drive.listdir("sales/main/data")
    # a watched branch's tree trusts its names an hour: the binding's negative entries as long
    assert binding.names[made] == (set(), 3600.0) and binding.names[data][1] == 3600.0
    assert binding.most == NEGATIVE_ENTRIES_MOST  # records as many as the handler's
    assert time.monotonic() + 3590 < binding.expires[data] <= time.monotonic() + 3600
    assert binding.answer(made, b"x.csv") and binding.answer(made, b"y.csv") and binding.answer(data, b"z.csv")
    assert not fs.poll_changes() and set(binding.names) == {made, data}  # nothing changed
    backend.put_object("sales", "main", "new/x.csv", b"another writer\n")
    backend.put_object("sales", "main", "data/w.csv", b"another writer\n")  # never answered
    out = fs.poll_changes()
    assert (made, b"x.csv") in out.entries and (data, b"w.csv") not in out.entries
    assert b"x.csv" in binding.names[made][0] and b"w.csv" in binding.names[data][0]
    assert drive.read("sales/main/new/x.csv") == b"another writer\n"
    # a change the feed cannot name (the head moved): every registration of the branch ends,
    # and every negative entry still recorded is dropped
    backend.commit("sales", "main", "by another writer")
    out = fs.poll_changes()
    assert binding.names == {}
    assert {(made, b"y.csv"), (data, b"z.csv")} <= set(out.entries)
    third = drive.mkdir("sales/main/c").ino
    fs.forget([(third, 1)])
    assert third not in binding.names


def test_a_merge_through_the_control_directory_ends_the_branchs_registrations(tmp_path, make_driver):
    fs, binding, _ = branch_filesystem(tmp_path, change_feed=True)
    drive = make_driver(fs)
    invalidated = []
    fs.set_kernel_invalidator(invalidated.append)
    drive.commit("sales/main", "first")
    drive.mkdir("sales/dev")
    drive.write("sales/dev/dev.txt", b"from dev")
    drive.commit("sales/dev", "add dev.txt")
    main = drive.ino("sales/main")
    drive.listdir("sales/main")
    assert binding.answer(main, b"dev.txt")
    merge = fs.open(drive.ino("sales/main/.lakefuse/merge"), os.O_WRONLY | os.O_TRUNC)
    fs.write(merge.fh, 0, b"dev\n")
    fs.release(merge.fh)
    assert main not in binding.names
    assert any((main, b"dev.txt") in stale.entries for stale in invalidated)
    assert drive.read("sales/main/dev.txt") == b"from dev"


def test_registrations_past_their_time_end_with_their_records(tmp_path, make_driver, monkeypatch):
    """The binding drops a registration past its time at its next LOOKUP; one no LOOKUP comes
    to ends at the next registration after ``EXPIRED_EVERY``."""
    from lakefuse.fs import native_answers

    monkeypatch.setattr(native_answers, "EXPIRED_EVERY", 0.0)
    fs, binding, _ = branch_filesystem(tmp_path)  # no change feed: names trusted 1 s
    drive = make_driver(fs)
    first = drive.mkdir("sales/main/a").ino
    time.sleep(1.05)
    second = drive.mkdir("sales/main/b").ino
    assert set(binding.names) == {second}
    drive.listdir("sales/main/a")  # listed again: registered afresh
    assert set(binding.names) == {first, second}


def test_a_binding_that_cannot_add_names_gets_no_branch_directory(tmp_path, make_driver):
    fs, binding, _, _ = filesystem(tmp_path)  # RecordingBinding: no insert_name
    drive = make_driver(fs)
    drive.mkdir("sales/main/new")
    drive.write("sales/main/new/file.csv", b"1\n")
    drive.listdir("sales/main/data")
    assert binding.names == {}
