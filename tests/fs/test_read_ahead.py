"""Opening a file lakefuse serves from a local object starts reading its first bytes in
(``Files._start_reading``), so that the first READ, a round trip later, finds them in the page
cache and is answered on the event loop; and a read-only handle asks the kernel for no FLUSH."""

from __future__ import annotations

import os

from test_passthrough import LocalFilesBackend, RecordingBackings

from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.readers import LocalFileReader


class RecordingReader(LocalFileReader):
    def __init__(self, path: str):
        super().__init__(path)
        self.advised: list[tuple[int, int]] = []

    def will_need(self, offset: int, size: int) -> None:
        self.advised.append((offset, size))
        super().will_need(offset, size)


class LocalReadersBackend(LocalFilesBackend):
    """Objects are local files, read through (recording) local file readers."""

    def __init__(self, root):
        super().__init__(root)
        self.local_storage = True
        self.readers: list[RecordingReader] = []

    def open_reader(self, repo, entry):
        if not (self.root / entry.physical_address.replace("/", "_")).exists():
            return super().open_reader(repo, entry)  # local_file() itself copies the bytes out
        reader = RecordingReader(self.local_file(repo, entry))
        self.readers.append(reader)
        return reader


def filesystem(tmp_path, make_driver, big: bytes = b""):
    backend = LocalReadersBackend(tmp_path)
    backend.create_repository("sales")
    backend.put_object("sales", "main", "top.csv", b"x,y\n1,2\n")
    if big:
        backend.put_object("sales", "main", "big.bin", big)
    backend.commit("sales", "main", "first")
    fs = LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"))
    return fs, backend, make_driver(fs)


def open_read_only(fs, drive, path):
    fs.release(fs.open(drive.ino(path), os.O_RDONLY).fh)  # the first open asks where the storage is
    return fs.open(drive.ino(path), os.O_RDONLY)


def test_a_branch_file_is_opened_and_read_in_at_open(tmp_path, make_driver):
    fs, backend, drive = filesystem(tmp_path, make_driver)
    result = open_read_only(fs, drive, "sales/main/top.csv")
    assert result.noflush
    assert backend.readers and backend.readers[-1].advised == [(0, 8)]
    buffer = bytearray(1 << 20)
    assert bytes(fs.read_nowait(result.fh, 0, 4096, buffer)) == b"x,y\n1,2\n"  # no thread hop
    fs.release(result.fh)


def test_a_commit_file_served_by_the_mount_is_read_in_at_its_first_open_only(tmp_path, make_driver):
    fs, backend, drive = filesystem(tmp_path, make_driver)  # no passthrough: the mount serves it
    backend.create_tag("sales", "v1", "main")
    first = fs.open(drive.ino("sales/v1/top.csv"), os.O_RDONLY)
    assert first.keep_cache and not first.backing_id  # a tag's bytes never change
    advised = [reader for reader in backend.readers if reader.advised]
    assert [reader.advised for reader in advised] == [[(0, 8)]]
    buffer = bytearray(1 << 20)
    assert bytes(fs.read_nowait(first.fh, 0, 4096, buffer)) == b"x,y\n1,2\n"  # no thread hop
    fs.release(first.fh)
    again = fs.open(drive.ino("sales/v1/top.csv"), os.O_RDONLY)  # the kernel holds the pages: no READ
    assert again.keep_cache
    assert [reader for reader in backend.readers if reader.advised] == advised
    fs.release(again.fh)


def test_only_the_first_bytes_of_a_big_file_are_read_in(tmp_path, make_driver):
    fs, backend, drive = filesystem(tmp_path, make_driver, big=os.urandom(3 << 20))
    result = open_read_only(fs, drive, "sales/main/big.bin")
    assert backend.readers[-1].advised == [(0, 128 * 1024)]
    fs.release(result.fh)


def test_a_file_of_up_to_a_mib_is_read_in_whole(tmp_path, make_driver):
    """The kernel's first READs of a file over 128 KiB ask for more than its first 128 KiB."""
    fs, backend, drive = filesystem(tmp_path, make_driver, big=os.urandom(200 * 1024))
    result = open_read_only(fs, drive, "sales/main/big.bin")
    assert backend.readers[-1].advised == [(0, 200 * 1024)]
    fs.release(result.fh)


def test_no_read_ahead_when_the_kernel_reads_or_the_handle_writes(tmp_path, make_driver):
    fs, backend, drive = filesystem(tmp_path, make_driver)
    fs.enable_passthrough(RecordingBackings())
    backend.create_tag("sales", "v1", "main")
    by_kernel = open_read_only(fs, drive, "sales/v1/top.csv")
    assert by_kernel.backing_id and by_kernel.noflush
    assert not any(reader.advised for reader in backend.readers)
    writer = fs.open(drive.ino("sales/main/top.csv"), os.O_RDWR)
    assert not writer.noflush  # its close uploads, and reports errors
    assert not any(reader.advised for reader in backend.readers)
    for fh in (by_kernel.fh, writer.fh):
        fs.release(fh)
