"""What the FUSE binding answers itself (``lakefuse.fs.native_answers``), without a kernel: new
inodes of commit and tag files whose objects are local files, and the names of their
directories once listed, are registered with a recording stand-in for the binding's
registries, branch files and directories never, and a forgotten inode is taken back."""

from __future__ import annotations

import stat
import time

import pytest

from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.native_answers import MADE_DIR_SECONDS
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

    def add_names(self, ino: int, names: frozenset[bytes], timeout: float) -> None:
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
    """A binding that can add a name to a registered directory's and expire a registration."""

    def __init__(self):
        super().__init__()
        self.expires: dict[int, float] = {}

    def add_names(self, ino: int, names: frozenset[bytes], timeout: float, expires: float = 0.0) -> None:
        super().add_names(ino, set(names), timeout)
        self.expires[ino] = expires

    def insert_name(self, ino: int, name: bytes) -> None:
        if ino in self.names:
            self.names[ino][0].add(name)


def branch_filesystem(tmp_path, *, change_feed: bool = False):
    backend = LocalFilesBackend(tmp_path)
    backend.create_repository("sales")
    backend.put_object("sales", "main", "top.csv", b"x,y\n1,2\n")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"), change_feed=change_feed)
    binding = InsertingBinding()
    fs.enable_native_answers(binding)
    return fs, binding, backend


def test_a_directory_made_on_a_branch_is_registered_empty_until_its_listing_would_expire(tmp_path, make_driver):
    fs, binding, _ = branch_filesystem(tmp_path)
    drive = make_driver(fs)
    before = time.monotonic()
    made = drive.mkdir("sales/main/new").ino
    assert binding.names[made] == (set(), 0.0)  # no negative entry for the kernel to keep
    assert before + 0.9 < binding.expires[made] <= time.monotonic() + 1.0  # the branch's 1 s
    assert drive.ino("sales/main") not in binding.names  # only directories made here, empty


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


def test_a_change_of_the_branch_or_a_forgotten_inode_takes_the_names_back(tmp_path, make_driver):
    fs, binding, backend = branch_filesystem(tmp_path, change_feed=True)
    drive = make_driver(fs)
    first, second = drive.mkdir("sales/main/a").ino, drive.mkdir("sales/main/b").ino
    # a watched branch's tree trusts it an hour; the binding answers only the first seconds
    # after the mkdir (then the handler's negative entries, which the kernel keeps, are better)
    assert time.monotonic() + 4 < binding.expires[first] <= time.monotonic() + MADE_DIR_SECONDS
    assert not fs.poll_changes() and set(binding.names) == {first, second}  # nothing changed
    backend.put_object("sales", "main", "elsewhere.csv", b"another writer\n")
    fs.poll_changes()
    assert binding.names == {}  # names others made are not in the sets
    third = drive.mkdir("sales/main/c").ino
    fs.forget([(third, 1)])
    assert third not in binding.names


def test_a_binding_that_cannot_add_names_gets_no_branch_directory(tmp_path, make_driver):
    fs, binding, _, _ = filesystem(tmp_path)  # RecordingBinding: no insert_name
    drive = make_driver(fs)
    drive.mkdir("sales/main/new")
    drive.write("sales/main/new/file.csv", b"1\n")
    assert binding.names == {}
