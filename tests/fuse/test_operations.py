"""The FUSE adapter's error boundary and conversions, without a kernel."""

from __future__ import annotations

import errno
import logging
import subprocess
import sys

import pytest

pyfuse3 = pytest.importorskip("pyfuse3")
trio = pytest.importorskip("trio")

from lakefuse.errors import NoChanges, ReadOnly  # noqa: E402
from lakefuse.fs.filesystem import Attributes, LakeFilesystem  # noqa: E402
from lakefuse.fs.memory import MemoryBackend  # noqa: E402
from lakefuse.fuse.operations import LakeOperations, entry_attributes, fuse_errors  # noqa: E402
from lakefuse.fuse.passthrough import has_cap_sys_admin  # noqa: E402


class Handlers:
    @fuse_errors
    async def lakefuse_error(self):
        raise ReadOnly("tag")

    @fuse_errors
    async def os_error(self):
        raise OSError(errno.ENOTEMPTY, "full")

    @fuse_errors
    async def bug(self):
        raise KeyError("oops")

    @fuse_errors
    async def fine(self):
        return 42


def errno_of(coro_fn) -> int:
    with pytest.raises(pyfuse3.FUSEError) as exc:
        trio.run(coro_fn)
    return exc.value.errno


def test_every_failure_becomes_an_errno_and_bugs_are_logged(caplog):
    h = Handlers()
    assert errno_of(h.lakefuse_error) == errno.EROFS
    assert errno_of(h.os_error) == errno.ENOTEMPTY
    with caplog.at_level(logging.ERROR, logger="lakefuse.fuse.operations"):
        assert errno_of(h.bug) == errno.EIO
    assert "unexpected error in bug" in caplog.text and "KeyError" in caplog.text
    assert trio.run(h.fine) == 42
    assert NoChanges().errno == errno.ENODATA


def test_entry_attributes_carry_timeouts_and_blocks():
    attrs = Attributes(ino=7, mode=0o100644, size=1025, mtime_ns=5_000_000_001, uid=1, gid=2,
                       entry_timeout=1.0, attr_timeout=86400.0)
    e = entry_attributes(attrs)
    assert (e.st_ino, e.st_size, e.st_blocks, e.st_mtime_ns) == (7, 1025, 3, 5_000_000_001)
    assert (e.entry_timeout, e.attr_timeout, e.st_blksize) == (1.0, 86400.0, 1024 * 1024)


def test_passthrough_is_asked_for_only_by_a_process_that_may_use_it(tmp_path):
    """The kernel registers backing files only for CAP_SYS_ADMIN: without it the mount does
    not ask for passthrough in FUSE_INIT at all (an unprivileged mount through fusermount3)."""
    probe = "from lakefuse.fuse.passthrough import has_cap_sys_admin as h; print(h())"
    if not has_cap_sys_admin():
        pytest.skip("needs CAP_SYS_ADMIN to compare with and without it")
    dropped = subprocess.run(["setpriv", "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", sys.executable,
                              "-c", probe], capture_output=True, text=True, timeout=60)
    assert dropped.stdout.strip() == "False", dropped.stderr
    fs = LakeFilesystem(MemoryBackend(), spool_dir=str(tmp_path / "spool"))
    assert LakeOperations(fs).enable_passthrough
    assert not LakeOperations(fs, passthrough=False).enable_passthrough
