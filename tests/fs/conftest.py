"""Fixtures of the filesystem-semantics tests: a ``LakeFilesystem`` over the in-memory backend,
driven without a kernel, and small helpers that walk paths the way the kernel would; the real
core (``core``, ``namespace``) for the tests of what the filesystem does over it."""

from __future__ import annotations

import errno
import os

import pytest

from lakefuse.app import App
from lakefuse.config import load_config
from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.fs.memory import MemoryBackend


@pytest.fixture
def backend():
    b = MemoryBackend()
    b.create_repository("sales")
    b.put_object("sales", "main", "a/b.txt", b"hello")
    b.put_object("sales", "main", "top.csv", b"x,y\n1,2\n")
    b.commit("sales", "main", "first")
    b.create_tag("sales", "v1", "main")
    b.create_repository("other")
    return b


@pytest.fixture
def core(tmp_path):
    """The real core (SQLite, a local storage namespace) in a fresh home, with an empty
    repository ``sales``."""
    app = App(load_config(environ={"LAKEFUSE_HOME": str(tmp_path / "home")}))
    app.catalog.create_repository("sales", app.default_namespace("sales"))
    yield app
    app.close()


@pytest.fixture
def namespace(core) -> str:
    """The local directory of the storage namespace of ``core``'s repository ``sales``."""
    return core.default_namespace("sales")[len("local://"):]


@pytest.fixture
def fs(backend, tmp_path):
    return LakeFilesystem(backend, spool_dir=str(tmp_path / "spool"))


class Driver:
    """Path-level calls over a LakeFilesystem, like a kernel would issue them."""

    def __init__(self, fs: LakeFilesystem):
        self.fs = fs

    def ino(self, path: str) -> int:
        ino = 1
        for part in [p for p in path.split("/") if p]:
            attrs = self.fs.lookup(ino, part)
            if attrs.ino == 0:  # a negative entry the kernel may keep
                raise FileNotFoundError(errno.ENOENT, path)
            ino = attrs.ino
        return ino

    def parent(self, path: str) -> tuple[int, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        return self.ino(head), name

    def stat(self, path: str):
        return self.fs.getattr(self.ino(path))

    def listdir(self, path: str) -> list[str]:
        fh = self.fs.opendir(self.ino(path))
        names = []
        self.fs.readdir(fh, 0, lambda name, attrs, offset: names.append(name.decode()) or True)
        self.fs.releasedir(fh)
        return [n for n in names if n not in (".", "..")]

    def read(self, path: str) -> bytes:
        result = self.fs.open(self.ino(path), os.O_RDONLY)
        try:
            out = b""
            while True:
                chunk = self.fs.read(result.fh, len(out), 1 << 20)
                if not chunk:
                    return out
                out += chunk
        finally:
            self.fs.release(result.fh)

    def write(self, path: str, data: bytes, *, create: bool = True) -> None:
        parent, name = self.parent(path)
        try:
            ino = self.fs.lookup(parent, name).ino
        except FileNotFoundError:
            ino = 0
        if ino:
            result = self.fs.open(ino, os.O_WRONLY | os.O_TRUNC)
        else:
            result, _ = self.fs.create(parent, name, 0o100644, os.O_WRONLY | os.O_CREAT)
        self.fs.write(result.fh, 0, data)
        self.fs.flush(result.fh)
        self.fs.release(result.fh)

    def mkdir(self, path: str, mode: int = 0o755):
        parent, name = self.parent(path)
        return self.fs.mkdir(parent, name, mode)

    def unlink(self, path: str) -> None:
        parent, name = self.parent(path)
        self.fs.unlink(parent, name)

    def rmdir(self, path: str) -> None:
        parent, name = self.parent(path)
        self.fs.rmdir(parent, name)

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        old_parent, old_name = self.parent(old)
        new_parent, new_name = self.parent(new)
        self.fs.rename(old_parent, old_name, new_parent, new_name, flags)

    def commit(self, branch_path: str, message: str) -> None:
        ino = self.ino(branch_path + "/.lakefuse/commit")
        result = self.fs.open(ino, os.O_WRONLY | os.O_TRUNC)
        try:
            self.fs.write(result.fh, 0, message.encode())
            self.fs.flush(result.fh)
        finally:
            self.fs.release(result.fh)


@pytest.fixture
def drive(fs):
    return Driver(fs)


@pytest.fixture
def make_driver():
    """``make_driver(fs)``: a Driver over another LakeFilesystem."""
    return Driver
