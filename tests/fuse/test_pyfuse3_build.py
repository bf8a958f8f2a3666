"""What scripts/build_pyfuse3.py adds to pyfuse3, checked on a tiny filesystem of its own
(echo_xattr_fs.py) through a real kernel mount: GETXATTR of a name the operations object
refuses (``refused_xattr_prefixes``) is answered ENOTSUP by the binding, without calling the
handler; every other name still reaches the handler."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lakemount import is_mounted, require_fuse

pyfuse3 = pytest.importorskip("pyfuse3")

needs_refused_prefixes = pytest.mark.skipif(
    not hasattr(pyfuse3, "xattr_prefixes_refused"),
    reason="a stock pyfuse3 (scripts/install's fallback) asks the handler for every name")

MOUNT_TIMEOUT = 30.0


@pytest.fixture
def echo_mount(tmp_path):
    require_fuse()
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("echo_xattr_fs.py")), str(mountpoint)],
                              stderr=subprocess.PIPE, text=True)
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
