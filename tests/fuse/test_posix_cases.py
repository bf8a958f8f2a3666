"""The behaviours pjdfstest checks, as tests of our own, in a branch directory of a real mount:
symbolic links (lstat, readlink, following, O_NOFOLLOW, ELOOP, ENAMETOOLONG, EEXIST, rename,
unlink, lchown), owners (the requester's; chown/chgrp rules; set-ID bits cleared by chown and
write; set-group-ID directories), permissions (EACCES, the sticky bit), times (utimensat with
UTIME_NOW/UTIME_OMIT and who may set what; ctime on every change; reads leave the atime),
FIFOs, sockets and devices, mkdir with the umask, hard links refused.  Calls made as another
user run in a subprocess (``posix_helpers.as_user``)."""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from posix_helpers import NOBODY, OLD_NS, as_user, require_root, run

OTHER = NOBODY - 1  # a second unprivileged user


@pytest.fixture
def here(shared_branch) -> Path:
    """A directory of a fresh branch every user may write in (like /tmp: sticky, 1777)."""
    require_root()
    path = shared_branch / "t"
    path.mkdir()
    os.chmod(path, 0o1777)
    return path


def errno_of(call, *args, **kwargs) -> int:
    with pytest.raises(OSError) as exc:
        call(*args, **kwargs)
    return exc.value.errno


def nap() -> None:
    time.sleep(0.02)  # times have nanoseconds: a short pause is a visible difference


# ------------------------------------------------------------------ symbolic links

def test_symlinks_are_links_followed_by_the_kernel(here):
    (here / "file").write_bytes(b"content")
    os.symlink("file", here / "rel")
    os.symlink(str(here / "file"), here / "abs")
    for name, target in (("rel", "file"), ("abs", str(here / "file"))):
        st = os.lstat(here / name)
        assert stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o777 and st.st_size == len(target)
        assert os.readlink(here / name) == target
        assert (here / name).read_bytes() == b"content" and stat.S_ISREG(os.stat(here / name).st_mode)
    assert errno_of(os.open, here / "rel", os.O_RDONLY | os.O_NOFOLLOW) == errno.ELOOP
    assert errno_of(os.readlink, here / "file") == errno.EINVAL
    # O_CREAT through a dangling link creates its target; with O_EXCL it fails
    os.symlink("created", here / "dangling")
    assert not (here / "dangling").exists()
    assert errno_of(os.open, here / "dangling", os.O_CREAT | os.O_EXCL | os.O_WRONLY) == errno.EEXIST
    os.close(os.open(here / "dangling", os.O_CREAT | os.O_WRONLY, 0o600))
    assert stat.S_ISREG(os.lstat(here / "created").st_mode)
    # a link to a directory: followed by lookups, not by rmdir/unlink
    (here / "dir").mkdir()
    os.symlink("dir", here / "dirlink")
    (here / "dirlink" / "inside").write_bytes(b"i")
    assert (here / "dir" / "inside").read_bytes() == b"i"
    assert errno_of(os.rmdir, here / "dirlink") == errno.ENOTDIR
    os.unlink(here / "dirlink")
    os.unlink(here / "rel")
    assert (here / "file").read_bytes() == b"content"  # unlink of a link leaves its target
    names = {entry.name: entry for entry in os.scandir(here)}
    assert names["abs"].is_symlink() and names["dangling"].is_symlink() and not names["file"].is_symlink()


def test_symlink_errors(here):
    (here / "file").write_bytes(b"x")
    (here / "dir").mkdir()
    os.mkfifo(here / "fifo")
    os.symlink("file", here / "link")
    for existing in ("file", "dir", "fifo", "link"):
        assert errno_of(os.symlink, "target", here / existing) == errno.EEXIST, existing
    assert errno_of(os.symlink, "x" * 4096, here / "long") == errno.ENAMETOOLONG
    os.symlink("y" * 4095, here / "longest")
    assert os.readlink(here / "longest") == "y" * 4095
    assert errno_of(os.symlink, "t", here / ("n" * 256)) == errno.ENAMETOOLONG
    os.symlink("t", here / ("n" * 255))
    assert errno_of(os.symlink, "t", here / "missing" / "l") == errno.ENOENT
    assert errno_of(os.symlink, "t", here / "file" / "l") == errno.ENOTDIR
    # loops
    os.symlink("loop2", here / "loop1")
    os.symlink("loop1", here / "loop2")
    assert errno_of(os.stat, here / "loop1") == errno.ELOOP
    assert errno_of(os.open, here / "loop1" / "x", os.O_RDONLY) == errno.ELOOP
    for i in range(41):  # Linux follows at most 40 links in one lookup
        os.symlink("file" if i == 0 else f"chain{i - 1}", here / f"chain{i}")
    assert (here / "chain39").read_bytes() == b"x"
    assert errno_of(os.stat, here / "chain40") == errno.ELOOP
    # an unprivileged user needs write permission on the directory
    private = here / "private"
    private.mkdir(mode=0o755)
    assert as_user(f"os.symlink('t', {str(private / 'l')!r})") == "EACCES"
    assert as_user(f"os.symlink('t', {str(here / 'mine')!r})") == "ok"
    assert os.lstat(here / "mine").st_uid == NOBODY


def test_rename_and_lchown_of_links_act_on_the_link(here):
    (here / "file").write_bytes(b"x")
    os.symlink("file", here / "link")
    os.lchown(here / "link", 1000, 1000)
    assert (os.lstat(here / "link").st_uid, os.stat(here / "file").st_uid) == (1000, 0)
    os.chown(here / "link", 2000, 2000)  # chown follows
    assert (os.lstat(here / "link").st_uid, os.stat(here / "file").st_uid) == (1000, 2000)
    before = os.lstat(here / "link")
    nap()
    (here / "sub").mkdir()
    os.rename(here / "link", here / "sub" / "moved")
    moved = os.lstat(here / "sub" / "moved")
    assert stat.S_ISLNK(moved.st_mode) and os.readlink(here / "sub" / "moved") == "file"
    assert moved.st_uid == 1000 and moved.st_mtime_ns == before.st_mtime_ns and moved.st_ctime_ns > before.st_ctime_ns
    assert errno_of(os.stat, here / "sub" / "moved") == errno.ENOENT  # "file" is relative to sub/ now
    os.symlink("other", here / "second")
    os.rename(here / "second", here / "file")  # a link replaces a file
    assert os.readlink(here / "file") == "other"
    (here / "dir").mkdir()
    assert errno_of(os.rename, here / "file", here / "dir") == errno.EISDIR
    assert errno_of(os.rename, here / "dir", here / "file") == errno.ENOTDIR


def test_hard_links_are_refused(here):
    (here / "file").write_bytes(b"x")
    assert errno_of(os.link, here / "file", here / "hard") == errno.EPERM
    assert os.stat(here / "file").st_nlink == 1


# ------------------------------------------------------------------ owners

def test_new_entries_belong_to_the_requester(here):
    assert as_user(f"open({str(here / 'f')!r}, 'w').close()", uid=NOBODY, gid=NOBODY) == "ok"
    assert as_user(f"os.mkdir({str(here / 'd')!r}, 0o777)", uid=NOBODY, gid=100, umask=0o027) == "ok"
    assert as_user(f"os.mkfifo({str(here / 'p')!r}, 0o666)", uid=OTHER, gid=100) == "ok"
    for name, owner, mode in (("f", (NOBODY, NOBODY), 0o644), ("d", (NOBODY, 100), 0o750), ("p", (OTHER, 100), 0o644)):
        st = os.lstat(here / name)
        assert (st.st_uid, st.st_gid) == owner and stat.S_IMODE(st.st_mode) == mode, name


def test_chown_rules(here):
    path = str(here / "f")
    assert as_user(f"open({path!r}, 'w').close()") == "ok"
    assert as_user(f"os.chown({path!r}, 0, -1)") == "EPERM"  # only root gives files away
    assert as_user(f"os.chown({path!r}, -1, 100)") == "EPERM"  # not a member of 100
    assert as_user(f"os.chown({path!r}, -1, 100)", groups=(100,)) == "ok"  # a member of 100
    assert os.stat(path).st_gid == 100
    assert as_user(f"os.chown({path!r}, -1, {NOBODY})", uid=OTHER, groups=(NOBODY,)) == "EPERM"  # not the owner
    os.chown(path, 1000, 1000)  # root may
    assert (os.stat(path).st_uid, os.stat(path).st_gid) == (1000, 1000)


@pytest.mark.parametrize("mode, after", [(0o4755, 0o755), (0o2755, 0o755), (0o6755, 0o755), (0o2745, 0o2745)])
def test_chown_clears_set_id_bits_of_files(here, mode, after):
    path = here / "f"
    path.write_bytes(b"#!/bin/sh\n")
    os.chmod(path, mode)
    os.chown(path, 1000, 1000)  # also when root chowns
    assert stat.S_IMODE(os.stat(path).st_mode) == after  # set-GID without group x: locking, kept
    (here / "d").mkdir()
    os.chmod(here / "d", 0o2755)
    os.chown(here / "d", 1000, 1000)
    assert stat.S_IMODE(os.stat(here / "d").st_mode) == 0o2755  # directories keep theirs


def test_a_write_by_another_user_clears_set_id_bits(here):
    path = here / "f"
    path.write_bytes(b"v1")
    os.chmod(path, 0o4777)
    assert as_user(f"open({str(path)!r}, 'ab').write(b'v2')") == "ok"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o777 and path.read_bytes() == b"v1v2"
    os.chmod(path, 0o6777)
    assert as_user(f"os.truncate({str(path)!r}, 1)") == "ok"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o777


def test_chmod_rules(here):
    path = str(here / "f")
    assert as_user(f"open({path!r}, 'w').close()") == "ok"
    assert as_user(f"os.chmod({path!r}, 0o600)") == "ok"
    assert as_user(f"os.chmod({path!r}, 0o777)", uid=OTHER) == "EPERM"
    assert as_user(f"os.chmod({path!r}, 0o2755)") == "ok"  # group nobody: a member, kept
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o2755
    os.chown(path, NOBODY, 100)
    assert as_user(f"os.chmod({path!r}, 0o2755)") == "ok"  # not a member of 100: the bit is dropped
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o755


def test_set_group_id_directories_give_their_group(here):
    shared = here / "shared"
    shared.mkdir()
    os.chown(shared, 0, 100)
    os.chmod(shared, 0o2777)
    assert as_user(f"open({str(shared / 'f')!r}, 'w').close()") == "ok"
    assert as_user(f"os.mkdir({str(shared / 'sub')!r})") == "ok"
    assert as_user(f"os.symlink('f', {str(shared / 'l')!r})") == "ok"
    assert os.stat(shared / "f").st_gid == 100 and os.lstat(shared / "l").st_gid == 100
    sub = os.stat(shared / "sub")
    assert sub.st_gid == 100 and sub.st_mode & stat.S_ISGID and sub.st_uid == NOBODY


# ------------------------------------------------------------------ permissions

def test_permissions_are_checked(here):
    private = here / "private"
    private.mkdir(mode=0o700)
    (private / "f").write_bytes(b"x")
    closed = here / "closed"
    closed.write_bytes(b"x")
    os.chmod(closed, 0o600)
    assert as_user(f"os.listdir({str(private)!r})") == "EACCES"
    assert as_user(f"os.stat({str(private / 'f')!r})") == "EACCES"
    assert as_user(f"open({str(private / 'g')!r}, 'w')") == "EACCES"
    assert as_user(f"open({str(closed)!r})") == "EACCES"
    assert as_user(f"open({str(closed)!r}, 'a')") == "EACCES"
    assert as_user(f"os.rename({str(private / 'f')!r}, {str(here / 'f')!r})") == "EACCES"
    assert (private / "f").read_bytes() == b"x" and closed.read_bytes() == b"x"


def test_the_sticky_bit_protects_other_users_entries(here):
    assert as_user(f"open({str(here / 'theirs')!r}, 'w').close()") == "ok"
    assert as_user(f"os.unlink({str(here / 'theirs')!r})", uid=OTHER, gid=OTHER) == "EPERM"
    assert as_user(f"os.rename({str(here / 'theirs')!r}, {str(here / 'x')!r})", uid=OTHER, gid=OTHER) == "EPERM"
    assert as_user(f"os.unlink({str(here / 'theirs')!r})") == "ok"  # its owner may
    plain = here / "plain"
    plain.mkdir(mode=0o777)
    os.chmod(plain, 0o777)
    assert as_user(f"open({str(plain / 'theirs')!r}, 'w').close()") == "ok"
    assert as_user(f"os.unlink({str(plain / 'theirs')!r})", uid=OTHER, gid=OTHER) == "ok"


# ------------------------------------------------------------------ times

def test_utimensat_sets_each_time(here):
    path = here / "f"
    path.write_bytes(b"x")
    os.utime(path, ns=(OLD_NS, OLD_NS + 5))
    st = os.stat(path)
    assert (st.st_atime_ns, st.st_mtime_ns) == (OLD_NS, OLD_NS + 5)
    run("touch", "-a", "-d", "@1500000000.25", path)  # mtime: UTIME_OMIT
    st = os.stat(path)
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_500_000_000_250_000_000, OLD_NS + 5)
    run("touch", "-m", "-d", "@1400000000.5", path)  # atime: UTIME_OMIT
    st = os.stat(path)
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_500_000_000_250_000_000, 1_400_000_000_500_000_000)
    started = time.time_ns()
    run("touch", path)  # UTIME_NOW, both
    st = os.stat(path)
    assert st.st_atime_ns >= started - 10_000_000 and st.st_mtime_ns == st.st_atime_ns
    # a symbolic link's own times
    os.symlink("f", here / "l")
    os.utime(here / "l", ns=(OLD_NS, OLD_NS), follow_symlinks=False)
    assert os.lstat(here / "l").st_mtime_ns == OLD_NS and os.stat(here / "l").st_mtime_ns == st.st_mtime_ns


def test_who_may_set_times(here):
    path = str(here / "f")
    (here / "f").write_bytes(b"x")
    os.chmod(path, 0o666)
    assert as_user(f"os.utime({path!r})") == "ok"  # now: anyone who may write
    assert as_user(f"os.utime({path!r}, ns=(1, 1))") == "EPERM"  # a given time: the owner only
    os.chmod(path, 0o644)
    assert as_user(f"os.utime({path!r})") == "EACCES"
    os.chown(path, NOBODY, NOBODY)
    assert as_user(f"os.utime({path!r}, ns=(1, 2))") == "ok"
    assert os.stat(path).st_mtime_ns == 2


def test_ctime_moves_on_every_change_and_reads_leave_the_atime(here):
    path = here / "f"
    path.write_bytes(b"x")
    os.utime(path, ns=(OLD_NS, OLD_NS))
    for change in (lambda: os.chmod(path, 0o600), lambda: os.chown(path, 1000, -1),
                   lambda: os.utime(path, ns=(OLD_NS, OLD_NS)), lambda: os.setxattr(path, "user.k", b"v"),
                   lambda: os.rename(path, here / "g") or os.rename(here / "g", path)):
        before = os.stat(path).st_ctime_ns
        nap()
        change()
        assert os.stat(path).st_ctime_ns > before
    assert os.stat(path).st_mtime_ns == OLD_NS  # none of these wrote
    nap()
    with open(path, "ab") as handle:
        handle.write(b"more")
    st = os.stat(path)
    assert st.st_mtime_ns > OLD_NS and st.st_ctime_ns == st.st_mtime_ns and st.st_atime_ns == OLD_NS
    path.read_bytes()
    assert os.stat(path).st_atime_ns == OLD_NS  # like noatime: reads don't move it


def test_a_directory_changes_when_its_entries_do(here):
    directory = here / "d"
    directory.mkdir()
    for change in (lambda: (directory / "f").write_bytes(b"x"), lambda: os.symlink("f", directory / "l"),
                   lambda: os.mkfifo(directory / "p"), lambda: os.mkdir(directory / "s"),
                   lambda: os.rename(directory / "f", directory / "g"), lambda: os.unlink(directory / "l"),
                   lambda: os.rmdir(directory / "s")):
        before = os.stat(directory)
        nap()
        change()
        after = os.stat(directory)
        assert after.st_mtime_ns > before.st_mtime_ns and after.st_ctime_ns > before.st_ctime_ns
    os.utime(directory, ns=(OLD_NS, OLD_NS))
    os.chmod(directory, 0o700)
    st = os.stat(directory)
    assert st.st_mtime_ns == OLD_NS and stat.S_IMODE(st.st_mode) == 0o700


# ------------------------------------------------------------------ special files

def test_fifos_sockets_and_devices(here):
    os.mkfifo(here / "fifo", 0o640)
    os.mknod(here / "char", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # /dev/null's numbers
    os.mknod(here / "block", stat.S_IFBLK | 0o640, os.makedev(7, 0))
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(here / "sock"))
        assert stat.S_ISSOCK(os.lstat(here / "sock").st_mode)
    finally:
        server.close()
    for name, fmt, mode, device in (("fifo", stat.S_IFIFO, 0o640, 0), ("char", stat.S_IFCHR, 0o600, os.makedev(1, 3)),
                                    ("block", stat.S_IFBLK, 0o640, os.makedev(7, 0))):
        st = os.lstat(here / name)
        assert stat.S_IFMT(st.st_mode) == fmt and stat.S_IMODE(st.st_mode) == mode and st.st_rdev == device, name
    kinds = {entry.name: entry for entry in os.scandir(here)}
    assert not kinds["fifo"].is_file() and not kinds["fifo"].is_dir()
    # a FIFO on the mount is a pipe, served by the kernel
    received = []
    reader = threading.Thread(target=lambda: received.append(open(here / "fifo", "rb").read()))
    reader.start()
    with open(here / "fifo", "wb") as writer:
        writer.write(b"through the pipe")
    reader.join(10)
    assert received == [b"through the pipe"]
    assert errno_of(open, here / "char", "wb") == errno.EACCES  # FUSE mounts are nodev: entries, not devices
    assert errno_of(os.mkfifo, here / "fifo") == errno.EEXIST
    assert as_user(f"os.mknod({str(here / 'dev')!r}, 0o20600, os.makedev(1, 3))") == "EPERM"  # CAP_MKNOD
    assert as_user(f"os.mkfifo({str(here / 'userfifo')!r})") == "ok"
    os.unlink(here / "fifo")
    assert not (here / "fifo").exists()


def test_mkdir_applies_the_umask_and_keeps_its_mode(here):
    assert as_user(f"os.mkdir({str(here / 'd')!r}, 0o777)", umask=0o022) == "ok"
    assert as_user(f"os.mkdir({str(here / 'e')!r}, 0o1777)", umask=0o077) == "ok"
    assert stat.S_IMODE(os.stat(here / "d").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(here / "e").st_mode) == 0o1700
    assert os.stat(here / "d").st_nlink >= 1


def test_entries_written_before_show_what_they_showed(shared_branch):
    """The seeded objects store no POSIX keys: regular files 0644 and directories 0755 owned by
    the mounting user, with one time for all three."""
    for path, fmt, mode in (("readme.md", stat.S_IFREG, 0o644), ("data", stat.S_IFDIR, 0o755),
                            ("data/sub/b.txt", stat.S_IFREG, 0o644)):
        st = os.lstat(shared_branch / path)
        assert stat.S_IFMT(st.st_mode) == fmt and stat.S_IMODE(st.st_mode) == mode, path
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), path
    st = os.lstat(shared_branch / "readme.md")
    assert st.st_atime_ns == st.st_mtime_ns == st.st_ctime_ns
