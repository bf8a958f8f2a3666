"""Helpers of the POSIX tests on a real mount: a source tree with everything tar and rsync
carry (links, owners, set-ID bits, modes, times, special files), what ``lstat`` says of every
path of a tree, system calls made as another user, and dropping a file's cached pages."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

NOBODY = 65534
#: a Python every user may run (the test's own may live in a directory only its owner reads)
SYSTEM_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
#: a time with nanoseconds, in the past
OLD_NS = 1_600_000_000_123_456_789


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (owners, devices, other users)")


def make_source_tree(root: Path, *, devices: bool = True) -> None:
    """Files, directories, relative/absolute/dangling links (to files and directories), owners,
    set-ID bits, modes and times with nanoseconds; a FIFO and a character device."""
    (root / "docs" / "deep").mkdir(parents=True)
    (root / "bin").mkdir()
    (root / "private").mkdir(mode=0o700)
    (root / "shared").mkdir()
    (root / "docs" / "a.txt").write_bytes(b"alpha\n")
    (root / "docs" / "deep" / "b.bin").write_bytes(bytes(range(256)) * 40)
    (root / "bin" / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    (root / "private" / "key").write_bytes(b"secret")
    (root / "empty").write_bytes(b"")
    os.symlink("../docs/a.txt", root / "bin" / "relative")
    os.symlink("/etc/hostname", root / "absolute")
    os.symlink("nowhere/at/all", root / "docs" / "dangling")
    os.symlink("docs/deep", root / "dirlink")
    os.symlink("x" * 1000, root / "long-target")
    os.mkfifo(root / "shared" / "pipe")
    if devices:
        os.mknod(root / "shared" / "tty", stat.S_IFCHR | 0o620, os.makedev(4, 64))
    os.chmod(root / "bin" / "tool", 0o4755)
    os.chmod(root / "shared", 0o2775)
    os.chmod(root / "shared" / "pipe", 0o640)
    os.chmod(root / "private" / "key", 0o400)
    os.chown(root / "private", 1000, 100)
    os.chown(root / "private" / "key", 1000, 100)
    os.chown(root / "shared", 0, 100)
    os.lchown(root / "absolute", 1000, 1000)
    os.chown(root / "docs" / "a.txt", 2000, 2000)
    times = OLD_NS
    for top, dirs, files in os.walk(root, topdown=False):
        for name in files + dirs:
            times += 1_000_000_007
            os.utime(os.path.join(top, name), ns=(times - 86_400_000_000_000, times), follow_symlinks=False)
    os.utime(root, ns=(OLD_NS, OLD_NS))


def tree_stat(root: Path, *, atime: bool = False) -> dict[str, tuple]:
    """What ``lstat`` says of every path under ``root``: type and mode, owner, size (regular
    files and links), mtime in ns, link target, device; the atime too if asked."""
    out = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            kind = stat.S_IFMT(st.st_mode)
            out[os.path.relpath(path, root)] = (
                stat.filemode(st.st_mode), st.st_uid, st.st_gid,
                st.st_size if kind in (stat.S_IFREG, stat.S_IFLNK) else None, st.st_mtime_ns,
                os.readlink(path) if kind == stat.S_IFLNK else None, st.st_rdev,
                *((st.st_atime_ns,) if atime else ()))
    return out


AS_USER = r"""
import errno, json, os, sys
call = sys.argv[1]
try:
    result = eval(call, {"os": os})
    print(json.dumps(["ok", result if isinstance(result, (int, str, type(None))) else repr(result)]))
except OSError as exc:
    print(json.dumps([errno.errorcode.get(exc.errno, str(exc.errno)), None]))
"""


def as_user(call: str, uid: int = NOBODY, gid: int = NOBODY, groups: tuple[int, ...] = (), umask: int = 0o022):
    """Evaluate ``call`` (a Python expression using ``os``) as ``uid``/``gid`` with the
    supplementary ``groups``: ``"ok"`` or the errno's name (``"EPERM"``)."""
    done = subprocess.run([SYSTEM_PYTHON, "-c", AS_USER, call], user=uid, group=gid, extra_groups=list(groups),
                          umask=umask, capture_output=True, text=True, timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[0]


def run(*argv, check: bool = True, **options) -> subprocess.CompletedProcess:
    done = subprocess.run([str(arg) for arg in argv], capture_output=True, text=True, timeout=300, **options)
    if check:
        assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done


def drop_cached_pages(path) -> None:
    """Write out and drop the page cache's pages of ``path``: its next read goes to the disk
    (or, through a mount, is a READ)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
