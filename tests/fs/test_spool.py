"""Spool files: write-behind (queued appends written by a background thread, with O_DIRECT
blocks where the filesystem allows it) stays byte-for-byte coherent with ordinary writes,
fails for good on a write error, and feeds a SpoolTail from memory; a SpoolReserve hands out
spools whose files a thread of its own made ahead, in place: named as the objects they become."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import threading
import time

import pytest

import lakefuse.fs.spool as spool_module
from lakefuse.errors import StorageError
from lakefuse.fs.backend import InPlaceObjects
from lakefuse.fs.spool import Spool, SpoolReserve, SpoolTail


def file_bytes(spool: Spool) -> bytes:
    spool.drain()
    with open(spool.path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("first", [0, 1, 4095, 4096, 5000])
def test_queued_appends_of_odd_sizes_land_exactly(tmp_path, first):
    spool = Spool(str(tmp_path))
    expected = bytearray(os.urandom(first))
    spool.write(0, bytes(expected))
    sizes = [1, 4095, 4096, 4097, 1 << 20, 3, 123_457, 2 * 1024 * 1024 + 17]
    for size in sizes * 3:
        data = os.urandom(size)
        assert spool.write_behind(len(expected), data)
        expected += data
        assert spool.size() == len(expected)  # queued bytes count at once
    assert spool.read(0, len(expected)) == bytes(expected)  # a read drains first
    assert file_bytes(spool) == bytes(expected)
    spool.close()
    assert os.listdir(tmp_path) == []


def test_ordinary_writes_truncate_and_appends_interleave(tmp_path):
    spool = Spool(str(tmp_path))
    expected = bytearray()
    for round_ in range(5):
        data = os.urandom(3 * 1024 * 1024 + round_ * 1001)
        spool.write_behind(len(expected), data)
        expected += data
        patch = os.urandom(100)
        spool.write(777 * round_, patch)  # not an append: drains the queue, then writes
        expected[777 * round_:777 * round_ + 100] = patch
        assert spool.read(0, len(expected)) == bytes(expected)
    spool.truncate(5000)
    del expected[5000:]
    tail = os.urandom(9 * 1024 * 1024)
    spool.write_behind(5000, tail)
    expected += tail
    assert file_bytes(spool) == bytes(expected)
    spool.seal()
    assert os.path.getsize(spool.path) == len(expected)
    spool.close()


def test_a_full_queue_refuses_a_nonblocking_write_until_the_writer_catches_up(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_module, "WRITE_BEHIND_LIMIT", 64 * 1024)
    spool = Spool(str(tmp_path))
    release = threading.Event()
    spool.listener = lambda offset, data: release.wait(10)  # holds the writer thread
    chunk = os.urandom(32 * 1024)
    offset = 0
    while spool.write_behind(offset, chunk, block=False):
        offset += len(chunk)
        assert offset <= 4 * 64 * 1024
    release.set()
    assert spool.write_behind(offset, chunk, block=True)
    offset += len(chunk)
    assert os.path.getsize(spool.path) <= offset
    assert len(file_bytes(spool)) == offset
    spool.close()


def test_a_failed_background_write_fails_the_spool_for_good(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs: " + mounted.stderr.decode().strip())
    try:
        spool = Spool(str(small))
        offset = 0
        with pytest.raises(OSError) as exc:
            for _ in range(64):  # 4 MiB into a 1 MiB filesystem
                spool.write_behind(offset, b"x" * 65536)
                offset += 65536
            spool.drain()
        assert exc.value.errno == errno.ENOSPC
        for attempt in (lambda: spool.read(0, 10), spool.drain, lambda: spool.write_behind(offset, b"y"),
                        lambda: spool.write(0, b"z"), spool.seal):
            with pytest.raises(OSError) as exc:
                attempt()
            assert exc.value.errno == errno.ENOSPC
        spool.close()
        assert os.listdir(small) == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_a_tail_hashes_bytes_from_the_file_then_from_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_module, "TAIL_BUFFER_LIMIT", 256 * 1024)  # the writer waits often
    spool = Spool(str(tmp_path))
    head = os.urandom(100_000)
    spool.write(0, head)

    def consume(stream):
        digest = hashlib.sha256()
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
        return digest.hexdigest()

    tail = SpoolTail(spool, len(head), consume)
    spool.listener = tail.feed
    expected = hashlib.sha256(head)
    offset = len(head)
    for _ in range(40):
        data = os.urandom(65_536 + 7)
        spool.write_behind(offset, data)
        expected.update(data)
        offset += len(data)
    spool.drain()
    assert tail.finish() == expected.hexdigest()
    assert tail.consumed == offset
    spool.close()


def test_a_tail_fails_when_the_bytes_stop_being_appends(tmp_path):
    spool = Spool(str(tmp_path))
    spool.write(0, b"a" * 1000)
    tail = SpoolTail(spool, 1000, lambda stream: b"".join(iter(lambda: stream.read(100), b"")))
    spool.listener = tail.feed
    spool.write_behind(1000, b"b" * 1000)
    spool.write(10, b"patch")  # not an append
    with pytest.raises(Exception):
        tail.finish()
    spool.close()


@pytest.mark.parametrize("seed", range(6))
def test_random_mixes_of_queued_appends_writes_truncates_and_reads_match_a_model(tmp_path, seed):
    """Against a bytearray: queued appends of every size (crossing the 4 KiB direct-I/O blocks
    and the stage), ordinary writes anywhere, truncates, reads and drains in random order."""
    import random

    rng = random.Random(seed)
    spool = Spool(str(tmp_path))
    model = bytearray()
    for _ in range(120):
        action = rng.random()
        if action < 0.6:
            size = rng.choice([1, 511, 4095, 4096, 4097, 65536, 1 << 20, rng.randrange(1, 3 << 20)])
            data = rng.randbytes(size)
            spool.write_behind(len(model), data)
            model += data
        elif action < 0.75:
            offset = rng.randrange(0, len(model) + 10)
            data = rng.randbytes(rng.randrange(1, 10_000))
            spool.write(offset, data)
            if offset > len(model):
                model += bytes(offset - len(model))
            model[offset:offset + len(data)] = data
        elif action < 0.82:
            size = rng.randrange(0, len(model) + 1)
            spool.truncate(size)
            del model[size:]
        elif action < 0.95 and model:
            offset = rng.randrange(0, len(model))
            assert spool.read(offset, 70_000) == bytes(model[offset:offset + 70_000])
        else:
            spool.drain()
        assert spool.size() == len(model)
    assert file_bytes(spool) == bytes(model)
    spool.close()


def test_filling_from_a_sparse_file_keeps_its_holes(tmp_path):
    source_path = tmp_path / "sparse.bin"
    with open(source_path, "wb") as f:
        f.write(b"head")
        f.seek(64 * 1024 * 1024)
        f.write(b"tail")
    (tmp_path / "spools").mkdir()
    spool = Spool(str(tmp_path / "spools"))
    with open(source_path, "rb") as source:

        class Reader:
            fileno = source.fileno

        spool.fill_from(Reader(), os.path.getsize(source_path))
    assert spool.size() == 64 * 1024 * 1024 + 4
    assert spool.read(0, 4) == b"head" and spool.read(64 * 1024 * 1024, 4) == b"tail"
    assert spool.read(1024 * 1024, 8) == b"\0" * 8
    assert os.stat(spool.path).st_blocks * 512 < 1024 * 1024  # the hole was not written out
    spool.close()


def test_an_adopted_file_takes_appends_and_is_kept_at_close(tmp_path):
    path = tmp_path / "object"
    path.write_bytes(b"staged" + b"left over by an interrupted append")
    spool = Spool.adopt(str(path), 6)
    assert spool.adopted and spool.base_size == 6 and spool.size() == 6
    spool.write(6, b" more")
    assert spool.read(0, 100) == b"staged more"
    spool.close()
    assert path.read_bytes() == b"staged more"
    with pytest.raises(OSError):
        Spool.adopt(str(path), 100)  # shorter than its entry says


def test_small_appends_reach_the_writer_thread_in_big_pieces(tmp_path):
    spool = Spool(str(tmp_path))
    pieces = []
    spool.listener = lambda offset, data: pieces.append((offset, len(data)))
    expected = bytearray()
    for _ in range(1000):
        data = os.urandom(4096)
        assert spool.write_behind(len(expected), data, block=False)
        expected += data
    assert spool.size() == len(expected)
    assert spool.read(0, len(expected)) == bytes(expected)  # drains what is still gathered
    assert len(pieces) <= 5 and sum(length for _, length in pieces) == len(expected)
    spool.close()


def _wait_until(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_a_reserve_hands_out_spools_made_ahead_and_deletes_the_waiting_ones_at_close(tmp_path):
    reserve = SpoolReserve(str(tmp_path), size=4)
    first = reserve.new()  # none made yet: made here, and the reserve starts filling
    assert _wait_until(lambda: reserve.waiting() == 4)
    made_ahead = {str(path) for path in tmp_path.rglob("spool-*")} - {first.path}
    spools = [reserve.new() for _ in range(3)]
    assert {spool.path for spool in spools} <= made_ahead  # taken from the reserve
    assert len({spool.path for spool in spools + [first]}) == 4
    for number, spool in enumerate(spools + [first]):
        spool.write(0, b"bytes %d" % number)
        assert spool.read(0, 100) == b"bytes %d" % number and os.fstat(spool.fd).st_size == 7
    assert _wait_until(lambda: reserve.waiting() == 4)  # refilled
    reserve.close()
    kept = {spool.path for spool in spools + [first]}
    assert {str(path) for path in tmp_path.rglob("spool-*")} == kept  # the waiting ones are gone
    for spool in spools + [first]:
        spool.close()
    assert list(tmp_path.rglob("spool-*")) == []
    after = reserve.new()  # still works, made on the spot
    assert os.path.dirname(after.path) == str(tmp_path) and reserve.waiting() == 0
    after.close()


def test_a_reserve_emptied_by_a_burst_of_creates_grows_to_its_most(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_module, "RESERVE_SPOOLS", 2)
    monkeypatch.setattr(spool_module, "RESERVE_SPOOLS_MOST", 8)
    reserve = SpoolReserve(str(tmp_path))
    taken = [reserve.new()]  # none made yet (not a burst): made here, and the reserve starts filling
    assert reserve.size() == 2 and _wait_until(lambda: reserve.waiting() == 2)

    def burst() -> None:
        """Take spools faster than the thread makes them, until one is made on the spot."""
        for _ in range(10_000):
            taken.append(reserve.new())
            if taken[-1].made_mtime_ns is None:
                return
        raise AssertionError("the reserve was never empty")

    for expected in (4, 8, 8):
        burst()
        assert reserve.size() == expected
        assert _wait_until(lambda: reserve.waiting() == expected)
    reserve.close()
    for spool in taken:
        spool.close()
    assert list(tmp_path.rglob("spool-*")) == []


def test_a_reserve_waits_for_the_creates_to_pause_before_it_makes_files(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_module, "REFILL_QUIET_SECONDS", 0.5)
    reserve = SpoolReserve(str(tmp_path), size=4)
    taken = [reserve.new()]  # made here; the thread starts, and waits for a pause
    started = time.monotonic()
    while time.monotonic() - started < 0.6:  # a spool taken every 50 ms: never quiet for 0.5 s
        time.sleep(0.05)
        taken.append(reserve.new())
        assert taken[-1].made_mtime_ns is None  # made on the spot: nothing waited
    assert reserve.waiting() == 0
    assert _wait_until(lambda: reserve.waiting() == 4)  # the pause: filled
    reserve.close()
    for spool in taken:
        spool.close()
    assert list(tmp_path.rglob("spool-*")) == []


def in_place_site(directory) -> InPlaceObjects:
    names = iter(range(1_000_000))
    return InPlaceObjects(str(directory), "data/", lambda: f"obj{next(names):07d}")


def test_a_reserve_in_place_makes_files_named_as_the_objects_they_become(tmp_path):
    site = in_place_site(tmp_path / "data")  # made by the reserve: no subdirectories
    reserve = SpoolReserve(str(tmp_path / "spool"), size=3, in_place=site)
    first = reserve.new()  # made here
    assert first.path == str(tmp_path / "data" / "obj0000000")
    assert first.in_place_address(site) == "data/obj0000000"
    assert _wait_until(lambda: reserve.waiting() == 3)
    taken = reserve.new()  # made ahead, by the reserve's thread
    assert os.path.dirname(taken.path) == str(tmp_path / "data") and taken.made_mtime_ns is not None
    assert taken.in_place_address(site) == "data/" + os.path.basename(taken.path)
    assert taken.in_place_address(in_place_site(tmp_path / "data")) is None  # another repository's
    assert not (tmp_path / "spool").exists()
    taken.handed_over(0)
    assert taken.in_place_address(site) is None  # storage took it
    reserve.close()
    for spool in (first, taken):
        spool.close()
    assert sorted(os.listdir(tmp_path / "data")) == [os.path.basename(taken.path)]  # handed over: kept


def test_a_spool_in_place_stops_being_one_when_too_old_and_the_reserve_drops_old_files(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_module, "EXPIRED_BATCH", 1)  # deleted one at a time
    site = in_place_site(tmp_path)
    reserve = SpoolReserve(str(tmp_path), size=2, in_place=site)
    young = reserve.new()
    assert _wait_until(lambda: reserve.waiting() == 2)
    waiting = {os.path.join(tmp_path, name) for name in os.listdir(tmp_path)} - {young.path}
    now = time.time_ns()
    # an hour from now: the spool is older than IN_PLACE_SECONDS, the waiting files than half of it
    monkeypatch.setattr(spool_module.time, "time_ns", lambda: now + 3600 * 10**9)
    assert young.in_place_address(site) is None  # moved to a fresh address when stored
    fresh = reserve.new()  # the old waiting files are let go (the thread deletes them), one is made now
    assert fresh.path not in waiting and fresh.made_mtime_ns is None
    assert fresh.in_place_address(site) == "data/" + os.path.basename(fresh.path)
    assert _wait_until(lambda: not any(os.path.exists(path) for path in waiting))
    monkeypatch.undo()
    reserve.close()
    for spool in (young, fresh):
        spool.close()
    assert os.listdir(tmp_path) == []


def test_a_reserve_in_place_makes_its_directory_again_when_storage_removed_it(tmp_path):
    site = in_place_site(tmp_path / "data")  # storage removes data/ with its last object
    reserve = SpoolReserve(str(tmp_path), size=2, in_place=site)
    first = reserve.new()
    assert _wait_until(lambda: reserve.waiting() == 2)
    first.close()
    for name in os.listdir(tmp_path / "data"):  # its objects and the waiting files deleted (gc)
        os.unlink(tmp_path / "data" / name)
    os.rmdir(tmp_path / "data")
    again = reserve.new()  # the waiting files are gone: made on the spot, in a new data/
    assert os.path.dirname(again.path) == str(tmp_path / "data") and again.made_mtime_ns is None
    assert again.in_place_address(site) == "data/" + os.path.basename(again.path)
    reserve.close()
    again.close()


def test_a_reserve_that_cannot_create_files_reports_it_at_new(tmp_path):
    reserve = SpoolReserve(str(tmp_path / "gone"), size=2)  # its directory was removed
    with pytest.raises(StorageError, match="cannot create a spool file"):
        reserve.new()
    reserve.close()


def test_a_reserve_thread_stops_when_idle_and_the_next_spool_starts_another(tmp_path, monkeypatch):
    monkeypatch.setattr(spool_module, "RESERVE_IDLE_SECONDS", 0.05)
    reserve = SpoolReserve(str(tmp_path), size=2)
    reserve.new().close()
    assert _wait_until(lambda: reserve.waiting() == 2 and reserve._thread is None)
    taken = [reserve.new(), reserve.new()]  # both made ahead; the second asks for more
    assert _wait_until(lambda: reserve.waiting() == 2)
    for spool in taken:
        spool.close()
    reserve.close()
    assert list(tmp_path.rglob("spool-*")) == []


def test_a_spool_handed_over_to_storage_leaves_its_old_path_alone_at_close(tmp_path):
    spool = Spool(str(tmp_path))
    spool.write(0, b"an object now")
    spool.seal()
    os.rename(spool.path, tmp_path / "object")  # storage took the file
    (tmp_path / spool.path).write_bytes(b"somebody else's")  # a new file at the old name
    spool.handed_over(13)
    spool.close()
    assert (tmp_path / spool.path).read_bytes() == b"somebody else's"
    assert (tmp_path / "object").read_bytes() == b"an object now"


def test_a_spool_the_kernel_wrote_answers_its_stored_size_once_closed(tmp_path):
    """Its size was the file's (fstat) while open; closed, what storage took."""
    spool = Spool(str(tmp_path))
    spool.kernel_writes = True
    os.pwrite(spool.fd, b"written by the kernel", 0)  # as a passthrough write would
    assert spool.size() == 21
    spool.seal()
    spool.handed_over(21)
    spool.close()
    assert spool.size() == 21


def test_a_spool_made_ahead_has_no_write_time_until_something_writes_it(tmp_path):
    reserve = SpoolReserve(str(tmp_path), size=2)
    reserve.new().close()  # starts the filling
    assert _wait_until(lambda: reserve.waiting() == 2)
    spool = reserve.new()
    # its mtime is when the reserve made it, maybe a minute before this file was created
    assert spool.write_time_ns() is None
    os.utime(spool.fd, ns=(1_000, 2_000_000_000))  # what a write by the kernel does to it
    assert spool.write_time_ns() == 2_000_000_000
    assert spool.write_time_ns(3_000_000_000) == 3_000_000_000  # an mtime the caller just read
    made_here = Spool(str(tmp_path))  # made on the spot: its mtime is its create's
    assert made_here.write_time_ns() == os.fstat(made_here.fd).st_mtime_ns
    for each in (spool, made_here):
        each.close()
    reserve.close()


def test_a_spool_the_kernel_wrote_keeps_answering_its_size_after_close(tmp_path):
    """The event loop asks a file's size without the file's lock while a worker thread stores
    and closes its spool: after close the size is the one the file had, never an fstat of a
    closed (or reused) descriptor, which answered EBADF to rsync's stat of its temporary file."""
    spool = Spool(str(tmp_path))
    spool.kernel_writes = True
    os.pwrite(spool.fd, b"k" * 300_000, 0)  # the kernel's passthrough writes
    assert spool.size() == 300_000
    mtime = spool.write_time_ns()
    assert mtime is not None
    spool.close()
    assert spool.size() == 300_000
    assert spool.write_time_ns() is None  # the stored file's own mtime answers then


def test_sizes_asked_while_the_spool_is_closed_never_see_a_closed_descriptor(tmp_path):
    errors = []
    for _ in range(200):
        spool = Spool(str(tmp_path))
        spool.kernel_writes = True
        os.pwrite(spool.fd, b"k" * 4096, 0)
        stop = threading.Event()

        def ask(spool=spool, stop=stop):
            while not stop.is_set():
                try:
                    assert spool.size() == 4096
                except (OSError, AssertionError) as exc:
                    errors.append(exc)
                    return

        asker = threading.Thread(target=ask)
        asker.start()
        spool.close()
        stop.set()
        asker.join(10)
    assert errors == []


def test_held_elsewhere_tells_whether_another_descriptor_is_open(tmp_path):
    spool = Spool(str(tmp_path))
    spool.write(0, b"x")
    try:
        assert not spool.held_elsewhere()
        other = os.open(spool.path, os.O_RDONLY)
        try:
            assert spool.held_elsewhere(patience=0.01)  # no write lease while it is open
        finally:
            os.close(other)
        assert not spool.held_elsewhere()
    finally:
        spool.close()


def test_a_lease_broken_by_an_open_signals_what_ends_no_process(tmp_path, monkeypatch):
    """``held_elsewhere`` holds a write lease for an instant; an open of the file in that
    instant breaks it with a signal to this process.  The kernel's default signal, SIGIO,
    ends a process that did not ask for it (a program using lakefuse as a library): the
    spool's lease is broken with SIGURG instead, whose default action is to ignore it.
    Here another thread opens the file while ``held_elsewhere`` holds its lease."""
    import fcntl
    import signal
    import types

    spool = Spool(str(tmp_path))
    spool.write(0, b"x")
    received, opened = [], []
    opener = threading.Thread(target=lambda: opened.append(os.open(spool.path, os.O_RDONLY)))

    def fcntl_opening_meanwhile(fd, cmd, arg=0):
        result = fcntl.fcntl(fd, cmd, arg)
        if cmd == fcntl.F_SETLEASE and arg == fcntl.F_WRLCK and not opener.is_alive():
            opener.start()  # blocks in open(2) until the lease is given back
            deadline = time.monotonic() + 10
            while not received and time.monotonic() < deadline:
                time.sleep(0.01)  # signal handlers run on this thread meanwhile
        return result

    monkeypatch.setattr(spool_module, "fcntl", types.SimpleNamespace(
        **{name: getattr(fcntl, name) for name in dir(fcntl) if name.startswith("F_")}, fcntl=fcntl_opening_meanwhile))
    previous = (signal.signal(signal.SIGURG, lambda *_: received.append("SIGURG")),
                signal.signal(signal.SIGIO, lambda *_: received.append("SIGIO")))
    try:
        assert not spool.held_elsewhere()  # the lease was granted, then given back
        opener.join(10)
        assert opened, "the open was never let through"
        assert received == ["SIGURG"]
    finally:
        signal.signal(signal.SIGURG, previous[0])
        signal.signal(signal.SIGIO, previous[1])
        for fd in opened:
            os.close(fd)
        spool.close()
