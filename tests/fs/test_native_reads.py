"""Which handles the FUSE binding answers READs of itself (``lakefuse.fs.native_reads``), with a
recording registry that reads as the binding does: a read-only handle of an unmodified local
object is registered with its descriptor and the object's size; it is taken back before its
descriptor closes, and as soon as the file gets a spool, so a reader opened before a writer
reads the writer's bytes (through the mount) from then on."""

from __future__ import annotations

import os

from test_read_ahead import filesystem


class RecordingNativeReads:
    """``lakefuse.fs.native_reads.NativeReads`` reading as lakefuse's pyfuse3 does."""

    def __init__(self):
        self.registered: dict[int, tuple[int, int]] = {}
        self.removed_while_open: list[bool] = []

    def add(self, fh: int, fd: int, size: int) -> None:
        self.registered[fh] = (fd, size)

    def remove(self, fh: int) -> None:
        fd, _ = self.registered.pop(fh)
        try:
            os.fstat(fd)
            self.removed_while_open.append(True)
        except OSError:
            self.removed_while_open.append(False)

    def read(self, fh: int, offset: int, size: int) -> bytes:
        fd, total = self.registered[fh]
        return os.pread(fd, max(0, min(size, total - offset)), offset)


def native_filesystem(tmp_path, make_driver):
    fs, backend, drive = filesystem(tmp_path, make_driver)
    native = RecordingNativeReads()
    fs.enable_native_reads(native)
    return fs, drive, native


def open_read_only(fs, drive, path):
    return fs.open(drive.ino(path), os.O_RDONLY)


def test_a_reader_of_a_branch_file_is_answered_by_the_binding_until_released(tmp_path, make_driver):
    fs, drive, native = native_filesystem(tmp_path, make_driver)
    reader = open_read_only(fs, drive, "sales/main/top.csv")
    assert list(native.registered) == [reader.fh]
    assert native.registered[reader.fh][1] == 8  # the object's size
    assert native.read(reader.fh, 0, 4096) == b"x,y\n1,2\n"
    assert native.read(reader.fh, 4, 4096) == b"1,2\n"
    assert native.read(reader.fh, 8, 4096) == b""
    fs.release(reader.fh)
    assert native.registered == {}
    assert native.removed_while_open == [True]  # before its descriptor closed


def test_a_reader_whose_bytes_the_kernel_holds_is_registered_at_its_first_read(tmp_path, make_driver):
    fs, drive, native = native_filesystem(tmp_path, make_driver)
    fs.release(open_read_only(fs, drive, "sales/main/top.csv").fh)
    again = open_read_only(fs, drive, "sales/main/top.csv")
    assert again.keep_cache and native.registered == {}  # the kernel's pages answer: no READ, no reader
    buffer = bytearray(1 << 20)
    assert bytes(fs.read_nowait(again.fh, 4, 4096, buffer)) == b"1,2\n"  # a page the kernel dropped
    assert native.read(again.fh, 0, 4096) == b"x,y\n1,2\n"  # the next ones: in the binding
    fs.release(again.fh)
    assert native.registered == {}


def test_writable_handles_are_never_registered(tmp_path, make_driver):
    fs, drive, native = native_filesystem(tmp_path, make_driver)
    fs.release(open_read_only(fs, drive, "sales/main/top.csv").fh)  # the storage is known local from here
    for flags in (os.O_RDWR, os.O_WRONLY, os.O_WRONLY | os.O_APPEND):
        handle = fs.open(drive.ino("sales/main/top.csv"), flags)
        assert handle.fh not in native.registered
        fs.release(handle.fh)


def test_a_write_through_another_handle_takes_the_reader_back(tmp_path, make_driver):
    fs, drive, native = native_filesystem(tmp_path, make_driver)
    reader = open_read_only(fs, drive, "sales/main/top.csv")
    assert reader.fh in native.registered
    writer = fs.open(drive.ino("sales/main/top.csv"), os.O_WRONLY | os.O_APPEND)
    assert reader.fh in native.registered  # nothing written yet: the object is still the file
    assert fs.write(writer.fh, 8, b"3,4\n") == 4
    assert native.registered == {}  # the file got a spool: the mount answers from it
    assert fs.read(reader.fh, 0, 4096) == b"x,y\n1,2\n3,4\n"  # as tail -f needs
    later = fs.open(drive.ino("sales/main/top.csv"), os.O_RDONLY)  # opened while it is written
    assert later.fh not in native.registered
    for fh in (writer.fh, reader.fh, later.fh):
        fs.flush(fh)
        fs.release(fh)
    again = fs.open(drive.ino("sales/main/top.csv"), os.O_RDONLY)  # the new object, stored
    assert fs.read(again.fh, 0, 4096) == b"x,y\n1,2\n3,4\n"
    fs.release(again.fh)


def test_a_truncate_takes_the_reader_back(tmp_path, make_driver):
    fs, drive, native = native_filesystem(tmp_path, make_driver)
    reader = open_read_only(fs, drive, "sales/main/top.csv")
    fs.setattr(drive.ino("sales/main/top.csv"), size=3)
    assert native.registered == {}
    assert fs.read(reader.fh, 0, 4096) == b"x,y"
    fs.release(reader.fh)


def test_nothing_is_registered_without_a_registry(tmp_path, make_driver):
    fs, backend, drive = filesystem(tmp_path, make_driver)
    assert fs.native_reads is None
    reader = open_read_only(fs, drive, "sales/main/top.csv")
    assert fs.read(reader.fh, 0, 4096) == b"x,y\n1,2\n"
    fs.release(reader.fh)


def test_objects_of_a_mebibyte_and_more_are_left_to_their_memory_map(tmp_path, make_driver):
    fs, backend, drive = filesystem(tmp_path, make_driver, big=os.urandom(3 << 20))
    native = RecordingNativeReads()
    fs.enable_native_reads(native)
    reader = open_read_only(fs, drive, "sales/main/big.bin")
    assert native.registered == {}  # one copy fewer from the mapping than the binding's pread
    fs.release(reader.fh)
