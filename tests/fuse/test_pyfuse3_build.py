"""What scripts/build_pyfuse3.py adds to pyfuse3, checked on a tiny filesystem of its own
(echo_xattr_fs.py) through a real kernel mount: GETXATTR of a name the operations object
refuses (``refused_xattr_prefixes``) is answered ENOTSUP by the binding, without calling the
handler; every other name still reaches the handler.  The session loop polls for the next
request for the window the operations object asks (``spin_wait_ns``), and still runs handlers
that wait for a worker thread meanwhile.  READ of a handle registered with a local file is
answered by the binding from that file's cached bytes; uncached bytes, and handles taken back,
reach the read handler."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from lakemount import is_mounted, require_fuse
from posix_helpers import drop_cached_pages

pyfuse3 = pytest.importorskip("pyfuse3")

needs_refused_prefixes = pytest.mark.skipif(
    not hasattr(pyfuse3, "xattr_prefixes_refused"),
    reason="a stock pyfuse3 (scripts/install's fallback) asks the handler for every name")

MOUNT_TIMEOUT = 30.0


needs_spinning_loop = pytest.mark.skipif(
    not hasattr(pyfuse3, "request_spin_ns"), reason="a stock pyfuse3 (scripts/install's fallback) never polls")


needs_native_reads = pytest.mark.skipif(
    not hasattr(pyfuse3, "native_read_add"), reason="a stock pyfuse3 (scripts/install's fallback) sends every READ "
                                                    "to the handler")

NATIVE_BYTES = b"bytes of the local file\n"


@pytest.fixture
def echo_mount(tmp_path):
    yield from _echo_mount(tmp_path, spin_ns=0)


@pytest.fixture
def native_echo_mount(tmp_path):
    native = tmp_path / "native"
    native.write_bytes(NATIVE_BYTES)
    yield from _echo_mount(tmp_path, spin_ns=0, native_file=native)


@pytest.fixture
def spinning_echo_mount(tmp_path, request):
    yield from _echo_mount(tmp_path, spin_ns=request.param)


def _echo_mount(tmp_path, spin_ns: int, native_file: Path | None = None):
    require_fuse()
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("echo_xattr_fs.py")), str(mountpoint)],
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ, ECHO_SPIN_NS=str(spin_ns),
                                       ECHO_NATIVE_FILE=str(native_file or "")))
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not is_mounted(str(mountpoint)):
            assert server.poll() is None, f"the test filesystem exited: {server.stderr.read()}"
            assert time.monotonic() < deadline, "the test filesystem did not mount"
            time.sleep(0.05)
        yield mountpoint
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mountpoint)], capture_output=True, check=False)
        try:
            server.wait(MOUNT_TIMEOUT)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(MOUNT_TIMEOUT)


@needs_refused_prefixes
def test_getxattr_of_a_refused_prefix_is_answered_by_the_binding_without_the_handler(echo_mount):
    path = echo_mount / "f"
    assert os.getxattr(path, "user.colour") == b"python:user.colour"
    assert os.getxattr(path, "trusted.x") == b"python:trusted.x"  # not refused by this filesystem
    for name in ("security.capability", "security.selinux"):
        with pytest.raises(OSError) as exc:
            os.getxattr(path, name)
        assert exc.value.errno == errno.ENOTSUP, name
    assert os.getxattr(path, "user.after") == b"python:user.after"  # the handler still answers


@needs_spinning_loop
@pytest.mark.parametrize("spinning_echo_mount, expected", [(0, 0), (50_000, 50_000), (10**12, 10_000_000)],
                         indirect=["spinning_echo_mount"])
def test_the_loop_polls_for_the_window_the_operations_object_asks_at_most_10_ms(spinning_echo_mount, expected):
    assert os.getxattr(spinning_echo_mount / "f", "user.spin") == str(expected).encode()


@needs_spinning_loop
@pytest.mark.parametrize("spinning_echo_mount", [1_000_000], indirect=True)
def test_a_polling_loop_still_runs_handlers_waiting_for_worker_threads(spinning_echo_mount):
    """Handlers that hop to a worker thread complete while another process keeps the loop busy
    with a run of requests, each arriving while it polls (a 1 ms window)."""
    path = spinning_echo_mount / "f"
    answers, stop = [], threading.Event()

    def slow_reader():
        for _ in range(40):
            answers.append(os.getxattr(path, "user.slow"))

    def stat_loop():
        while not stop.is_set():
            os.getxattr(path, "user.x")

    reader, busy = threading.Thread(target=slow_reader), threading.Thread(target=stat_loop)
    started = time.monotonic()
    busy.start()
    reader.start()
    reader.join(MOUNT_TIMEOUT)
    stop.set()
    busy.join(MOUNT_TIMEOUT)
    assert answers == [b"slow"] * 40
    assert time.monotonic() - started < 10  # 40 x 5 ms of sleeping, not 40 windows of starving


def native_answers(mountpoint: Path) -> int:
    return int(os.getxattr(mountpoint / "f", "user.native"))


@needs_native_reads
def test_reads_of_a_registered_handle_are_answered_from_the_cached_file_by_the_binding(native_echo_mount, tmp_path):
    (tmp_path / "native").read_bytes()  # in the page cache
    fd = os.open(native_echo_mount / "f", os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == NATIVE_BYTES
        assert os.pread(fd, 5, 6) == NATIVE_BYTES[6:11]
        assert os.pread(fd, 4096, len(NATIVE_BYTES)) == b""  # at the end: nothing
        assert native_answers(native_echo_mount) == 3
        drop_cached_pages(tmp_path / "native")
        assert os.pread(fd, 4096, 0) == b"handler"  # not cached: the handler's answer
        assert native_answers(native_echo_mount) == 3
        (tmp_path / "native").read_bytes()
        assert os.pread(fd, 4096, 0) == NATIVE_BYTES
        os.setxattr(native_echo_mount / "f", "user.native-off", b"")
        assert os.pread(fd, 4096, 0) == b"handler"  # taken back: the handler again
        assert native_answers(native_echo_mount) == 4
    finally:
        os.close(fd)


@needs_native_reads
def test_without_registered_handles_every_read_reaches_the_handler(echo_mount):
    fd = os.open(echo_mount / "f", os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == b"handler"
        assert native_answers(echo_mount) == 0
    finally:
        os.close(fd)
