"""The Catalog: object data in the storage namespace, entries staged and committed."""

from __future__ import annotations

import hashlib
import io
import os

import blake3
import pytest

from lakefuse.block.namespace import open_namespace
from lakefuse.catalog import Catalog
from lakefuse.errors import CorruptedData, InvalidArgument, ObjectNotFound, RefNotFound
from lakefuse.graveler.changes import ChangeType
from lakefuse.graveler.model import Entry


def blake3_checksum(data: bytes) -> str:
    """The checksum lakefuse stores for ``data`` (BLAKE3-256, prefixed), computed here
    independently of lakefuse.checksums."""
    return "blake3:" + blake3.blake3(data).hexdigest()


class OneWayStream(io.RawIOBase):
    """A non-seekable stream yielding ``data`` in small chunks."""

    def __init__(self, data: bytes, chunk: int = 7):
        self._data = data
        self._chunk = chunk

    def readable(self):
        return True

    def read(self, size=-1):
        size = self._chunk if size is None or size < 0 else min(size, self._chunk)
        out, self._data = self._data[:size], self._data[size:]
        return out


@pytest.fixture
def catalog(graveler):
    return Catalog(graveler, open_namespace, clock=lambda: 1_700_000_000.5)


@pytest.fixture
def crepo(catalog, tmp_path):
    catalog.create_repository("cat-repo", str(tmp_path / "ns"))  # a plain path is normalized
    return "cat-repo"


def _storage_path(tmp_path, entry: Entry):
    return tmp_path / "ns" / entry.physical_address


def test_upload_bytes_stores_data_and_stages_the_entry(catalog, crepo, tmp_path):
    assert catalog.get_repository(crepo).storage_namespace == f"local://{tmp_path}/ns"
    data = b"hello lakefuse\n" * 100
    entry = catalog.upload_bytes(crepo, "main", "dir/hello.txt", data, content_type="text/plain", metadata={"a": "1"})
    assert entry.size == len(data)
    assert entry.checksum == blake3_checksum(data)
    assert entry.content_type == "text/plain" and dict(entry.metadata) == {"a": "1"}
    assert entry.mtime == 1_700_000_000 and not entry.address_is_full
    assert entry.physical_address.startswith("data/")
    assert _storage_path(tmp_path, entry).read_bytes() == data
    assert catalog.stat(crepo, "main", "dir/hello.txt") == entry
    assert catalog.read_object(crepo, "main", "dir/hello.txt") == data
    assert catalog.read_range(crepo, "main", "dir/hello.txt", 6, 8) == b"lakefuse"
    assert catalog.read_range(crepo, "main", "dir/hello.txt", len(data) - 2, 100) == b"e\n"
    target = tmp_path / "out.txt"
    assert catalog.download(crepo, "main", "dir/hello.txt", target) == entry
    assert target.read_bytes() == data
    reader = catalog.open_entry(crepo, entry)
    assert reader.read(0, 5) == b"hello" and reader.read(len(data), 5) == b""


def test_upload_file_and_stream(catalog, crepo, tmp_path):
    source = tmp_path / "local.bin"
    source.write_bytes(os.urandom(3000))
    from_file = catalog.upload_file(crepo, "main", "f.bin", source)
    from_stream = catalog.upload_stream(crepo, "main", "s.bin", OneWayStream(source.read_bytes()), mtime=5)
    assert from_file.checksum == from_stream.checksum == blake3_checksum(source.read_bytes())
    assert from_file.physical_address != from_stream.physical_address
    assert from_stream.mtime == 5 and from_file.content_type == "application/octet-stream"
    assert catalog.read_object(crepo, "main", "s.bin") == source.read_bytes()
    empty = catalog.upload_bytes(crepo, "main", "empty", b"")
    assert empty.size == 0 and catalog.read_object(crepo, "main", "empty") == b""


def test_upload_file_moving_the_file_with_or_without_a_precomputed_checksum(catalog, crepo, tmp_path):
    data = os.urandom(5000)
    spool = tmp_path / "spool"
    spool.write_bytes(data)
    inode = os.stat(spool).st_ino
    digest = blake3_checksum(data)
    entry = catalog.upload_file(crepo, "main", "moved.bin", spool, checksum=digest, move=True, mtime=7,
                                metadata={"k": "v"}, content_type="x/y")
    assert (entry.size, entry.checksum, entry.mtime, entry.content_type) == (5000, digest, 7, "x/y")
    assert dict(entry.metadata) == {"k": "v"}
    assert not spool.exists() and os.stat(_storage_path(tmp_path, entry)).st_ino == inode  # renamed, not copied
    assert catalog.read_object(crepo, "main", "moved.bin") == data  # and the checksum verifies

    spool.write_bytes(b"hashed here")
    entry = catalog.upload_file(crepo, "main", "hashed.bin", spool, move=True)
    assert entry.checksum == blake3_checksum(b"hashed here") and not spool.exists()
    spool.write_bytes(b"copied")
    entry = catalog.upload_file(crepo, "main", "copied.bin", spool, checksum=blake3_checksum(b"copied"))
    assert spool.read_bytes() == b"copied" and catalog.read_object(crepo, "main", "copied.bin") == b"copied"


def test_upload_file_refuses_a_malformed_checksum_and_a_missing_branch_before_moving(catalog, crepo, tmp_path):
    spool = tmp_path / "spool"
    spool.write_bytes(b"data")
    with pytest.raises(InvalidArgument, match="blake3"):
        catalog.upload_file(crepo, "main", "x", spool, checksum=hashlib.sha256(b"data").hexdigest(), move=True)
    with pytest.raises(RefNotFound):
        catalog.upload_file(crepo, "nope", "x", spool, checksum=blake3_checksum(b"data"), move=True)
    with pytest.raises(InvalidArgument, match="missing"):
        catalog.upload_file(crepo, "main", "x", tmp_path / "missing", move=True)
    assert spool.read_bytes() == b"data" and not (tmp_path / "ns" / "data").exists()


def test_a_file_made_in_place_becomes_an_object_without_a_move(catalog, crepo, tmp_path):
    directory, prefix = catalog.in_place_site(crepo)
    assert (directory, prefix) == (str(tmp_path / "ns" / "data"), "data/")
    address = catalog.new_address()
    assert address.startswith("data/") and catalog.new_address() != address
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, address[len(prefix):])
    data = os.urandom(3000)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        os.write(fd, data)
        with pytest.raises(InvalidArgument, match="blake3"):
            catalog.store_in_place(crepo, address, fd, checksum=hashlib.sha256(data).hexdigest())
        with pytest.raises(InvalidArgument, match="in place"):
            catalog.store_in_place(crepo, "_lakefs/elsewhere", fd, checksum=blake3_checksum(data))
        entry = catalog.store_in_place(crepo, address, fd, checksum=blake3_checksum(data), mtime=9,
                                       metadata={"k": "v"}, durable=False)
    finally:
        os.close(fd)
    assert (entry.physical_address, entry.size, entry.mtime, dict(entry.metadata)) == (address, 3000, 9, {"k": "v"})
    assert catalog.list_objects(crepo, "main").items == []  # nothing staged
    catalog.stage_entries(crepo, "main", [("in-place.bin", entry)])
    assert catalog.read_object(crepo, "main", "in-place.bin") == data  # and the checksum verifies
    fd = os.open(path, os.O_RDONLY)
    try:
        os.unlink(path)
        with pytest.raises(ObjectNotFound):
            catalog.store_in_place(crepo, address, fd, checksum=blake3_checksum(data))
    finally:
        os.close(fd)


def test_upload_to_missing_branch_writes_nothing(catalog, crepo, tmp_path):
    with pytest.raises(RefNotFound):
        catalog.upload_bytes(crepo, "nope", "x", b"data")
    assert not (tmp_path / "ns" / "data").exists()


def test_reuploading_identical_bytes_is_not_a_change(catalog, crepo):
    catalog.upload_bytes(crepo, "main", "a", b"same")
    catalog.commit(crepo, "main", "c1", "tester")
    again = catalog.upload_bytes(crepo, "main", "a", b"same")
    assert list(catalog.diff_uncommitted(crepo, "main")) == []
    assert catalog.stat(crepo, "main", "a") == again
    catalog.upload_bytes(crepo, "main", "a", b"same", metadata={"k": "v"})
    assert [d.type for d in catalog.diff_uncommitted(crepo, "main")] == [ChangeType.CHANGED]


def test_corrupted_data_is_detected(catalog, crepo, tmp_path):
    entry = catalog.upload_bytes(crepo, "main", "a", b"original")
    _storage_path(tmp_path, entry).write_bytes(b"tampered")
    with pytest.raises(CorruptedData):
        catalog.read_object(crepo, "main", "a")
    with pytest.raises(CorruptedData):
        catalog.download(crepo, "main", "a", tmp_path / "out")
    assert catalog.read_object(crepo, "main", "a", verify=False) == b"tampered"
    _storage_path(tmp_path, entry).write_bytes(b"short")
    with pytest.raises(CorruptedData):
        catalog.read_object(crepo, "main", "a")


def test_whole_reads_verify_blake3_sha256_and_md5_checksums_and_size_only_for_opaque_ones(catalog, crepo, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "obj").write_bytes(b"content")

    def staged(path, checksum, size=7):
        entry = Entry(physical_address=f"local://{outside}/obj", size=size, mtime=1, checksum=checksum,
                      address_is_full=True)
        catalog.stage_entries(crepo, "main", [(path, entry)])
        return path

    for good in (blake3_checksum(b"content"), hashlib.sha256(b"content").hexdigest(),
                 hashlib.md5(b"content").hexdigest(), "etag-3", "", "blake3:not-hex"):
        assert catalog.read_object(crepo, "main", staged("good", good)) == b"content"
    for bad in (blake3_checksum(b"other"), hashlib.sha256(b"other").hexdigest(), hashlib.md5(b"other").hexdigest()):
        with pytest.raises(CorruptedData, match="differs from entry checksum"):
            catalog.read_object(crepo, "main", staged("bad", bad))
    with pytest.raises(CorruptedData, match="7 bytes stored, entry says 8"):
        catalog.read_object(crepo, "main", staged("short", "etag-3", size=8))


def test_listing_diff_delete(catalog, crepo):
    for path in ["logs/1", "logs/2", "readme", "src/a/b.py"]:
        catalog.upload_bytes(crepo, "main", path, path.encode())
    first = catalog.commit(crepo, "main", "c1", "tester")
    listing = catalog.list_objects(crepo, "main", delimiter="/")
    assert [(i.path, i.is_prefix) for i in listing.items] == [("logs/", True), ("readme", False), ("src/", True)]
    assert listing.items[1].entry == catalog.stat(crepo, "main", "readme")
    assert [i.path for i in catalog.iter_objects(crepo, "main", prefix="logs/")] == ["logs/1", "logs/2"]
    page = catalog.list_objects(crepo, "main", limit=1)
    assert page.has_more and page.next_after == "logs/1"
    assert catalog.delete_object(crepo, "main", "logs/1") is True
    assert catalog.delete_object(crepo, "main", "logs/1") is False
    with pytest.raises(ObjectNotFound):
        catalog.stat(crepo, "main", "logs/1")
    catalog.upload_bytes(crepo, "main", "readme", b"new readme")
    second = catalog.commit(crepo, "main", "c2", "tester")
    diff = list(catalog.diff(crepo, first.id, second.id))
    assert [(d.path, d.type) for d in diff] == [("logs/1", ChangeType.REMOVED), ("readme", ChangeType.CHANGED)]
    assert diff[0].left.size == 6 and diff[0].right is None
    assert diff[1].right.size == len(b"new readme")
    assert catalog.read_object(crepo, first.id, "readme") == b"readme"
    assert catalog.read_object(crepo, "main", "readme") == b"new readme"


def test_stage_entries_rename_and_full_addresses(catalog, crepo, tmp_path):
    entry = catalog.upload_bytes(crepo, "main", "old/name", b"payload")
    catalog.stage_entries(crepo, "main", [("new/name", entry), ("old/name", None)])
    assert catalog.read_object(crepo, "main", "new/name") == b"payload"
    with pytest.raises(ObjectNotFound):
        catalog.stat(crepo, "main", "old/name")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "imported.csv").write_bytes(b"a,b\n")
    imported = Entry(
        physical_address=f"local://{outside}/imported.csv", size=4, mtime=1,
        checksum=hashlib.sha256(b"a,b\n").hexdigest(), address_is_full=True,
    )
    catalog.stage_entries(crepo, "main", [("imported.csv", imported)])
    assert catalog.read_object(crepo, "main", "imported.csv") == b"a,b\n"
    address, size, checksum = catalog.write_data(crepo, io.BytesIO(b"raw"))
    assert size == 3 and checksum == blake3_checksum(b"raw") and address.startswith("data/")


def test_action_files_reach_hooks(catalog, crepo):
    seen = {}

    class Hooks:
        def pre_commit(self, event):
            seen["files"] = list(event.read_action_files())

    catalog.graveler.hooks = Hooks()
    catalog.upload_bytes(crepo, "main", "_lakefs_actions/check.yaml", b"name: check\n")
    catalog.upload_bytes(crepo, "main", "_lakefs_actions/notes.txt", b"ignored")
    catalog.upload_bytes(crepo, "main", "data.csv", b"1,2")
    catalog.commit(crepo, "main", "with actions", "tester")
    assert seen["files"] == [("_lakefs_actions/check.yaml", b"name: check\n")]
