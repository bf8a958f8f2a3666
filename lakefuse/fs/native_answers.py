"""Native answers: OPENs of commit and tag files, and LOOKUPs of names their directories do not
have, that the FUSE binding answers itself.

lakefuse's build of pyfuse3 (``scripts/build_pyfuse3.py``) can answer these without calling a
handler:

- an OPEN of an inode registered with the path of a local file and its size: it opens the
  file, checks the size, asks the kernel to read its first bytes in, registers it as the
  open's backing file (FUSE passthrough: the kernel reads it itself) and replies; the
  handle's FLUSH, FSYNC and RELEASE are answered there too.  Handles of one inode open at
  once share one backing file, as the kernel requires (``lakefuse.fs.passthrough``).
  Anything else (a write, the file missing or of another size, the kernel refusing) goes to
  the handler, which from then on decides every open of that inode: the binding takes the
  registration back first;
- a LOOKUP in a directory registered with all of its names, of an ASCII name not among them
  (the handler checks the others' encoding): a negative entry the kernel keeps as long as the
  handler's negative entries of immutable trees (``MountState.immutable_ttl``).  Names the
  directory has go to the handler.

Reading a small commit file costs an OPEN and a RELEASE (and, for Hadoop's checksum
filesystem, a LOOKUP of a missing ``.<name>.crc``), and their trips through trio and Python
cost several times the system calls they make: a Spark job reading 100,000 one-row files
makes each of them 100,000 times.

This module owns what is registered (``NativeAnswers.offer``, ``listed_whole``) and when it is
taken back (``forget``):

- a regular file of a commit or tag tree (immutable: the object a path names never changes,
  unlike on a branch, also a read-only one, which another writer may move) whose object is a
  file of a local storage namespace, while passthrough is on, offered when its inode number
  is new (a listed file, also one listed by name alone, or a node a lookup made): no handle of
  it can be open yet, so every handle the kernel opens is the binding's (or, after a failure,
  the handler's);
- a directory of a commit or tag tree once a listing of it first ended, with the names it
  reported (passthrough or not; a directory of more than ``MAX_NAMES`` names is not
  registered: the names would cost the memory the inode table saves on them);
- both taken back when the inode table lets the number go (``InodeTable.on_forgotten``): the
  kernel forgot it (it keeps an inode while a handle of it is open), or it was listed by name
  alone and dropped.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable, Collection, Protocol

from lakefuse.errors import LakefuseError
from lakefuse.fs.readers import read_ahead_bytes

if TYPE_CHECKING:
    from lakefuse.fs.passthrough import Passthrough
    from lakefuse.fs.tree import Tree
    from lakefuse.graveler.model import Entry

#: names of the biggest directory whose missing names the binding answers
MAX_NAMES = 100_000


class BindingAnswers(Protocol):
    """The binding's registries (``lakefuse.fuse.native_answers``)."""

    def add(self, ino: int, path: bytes, size: int, read_ahead: int = 0) -> None: ...

    def remove(self, ino: int) -> None: ...

    def add_names(self, ino: int, names: frozenset[bytes], timeout: float) -> None: ...

    def remove_names(self, ino: int) -> None: ...


def immutable(tree: Tree) -> bool:
    """Whether what ``tree`` names never changes (a commit or a tag)."""
    return not tree.is_branch and not tree.writable


class NativeAnswers:
    """Registers files and directories of commit and tag trees with the binding (see the
    module docstring)."""

    def __init__(self, binding: BindingAnswers, local_file: Callable[[str, Entry], str | None] | None,
                 passthrough: Passthrough | None, negative_ttl: float):
        """``local_file`` and ``passthrough`` None: no opens are registered, only names."""
        self._binding = binding
        self._local_file = local_file
        self._passthrough = passthrough
        self._negative_ttl = negative_ttl
        self._named: set[int] = set()  # directories whose names the binding has

    def offer(self, ino: int, tree: Tree, entry: Entry) -> None:
        """A new inode number ``ino`` for a regular file of ``tree`` whose object is ``entry``."""
        if self._local_file is None or not self._passthrough.enabled or not immutable(tree):
            return
        try:
            path = self._local_file(tree.repo, entry)
        except (LakefuseError, OSError):  # not registered: the handler opens it, and says why if it cannot
            return
        if path is not None:
            self._binding.add(ino, os.fsencode(path), entry.size, read_ahead_bytes(entry.size))

    def listed_whole(self, ino: int, tree: Tree, names: Collection[str]) -> None:
        """A listing of directory ``ino`` of ``tree`` ended, having reported ``names``."""
        if ino not in self._named and immutable(tree) and len(names) <= MAX_NAMES:
            self._binding.add_names(ino, frozenset(name.encode("utf-8") for name in names), self._negative_ttl)
            self._named.add(ino)

    def forget(self, ino: int) -> None:
        """``ino`` stands for nothing any more."""
        self._binding.remove(ino)
        if ino in self._named:
            self._named.discard(ino)
            self._binding.remove_names(ino)
