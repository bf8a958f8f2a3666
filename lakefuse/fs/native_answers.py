"""Native answers: OPENs of commit and tag files, and LOOKUPs of names their directories (and
directories this mount just made on a branch) do not have, that the FUSE binding answers itself.

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
- a directory ``mkdir`` made on a branch (``made_dir``), with no names: it is empty, and every
  name this mount makes in it is added (``may_exist``, called before the name is made: a name
  in the set only sends its LOOKUP to the handler, so adding early, or for a make that then
  fails, is always safe).  The binding answers with no negative entry for the kernel to keep
  (timeout 0: nothing to invalidate later).  Names other writers make are not seen here, so
  the registration ends when the branch's tree would stop trusting that the directory is
  empty (its ``expires``: ``branch_ttl``, or ``watched_branch_ttl`` under a change feed; the
  binding drops it then) and when a change-feed poll, or a merge or reset through
  ``.lakefuse/``, says the branch changed (``tree_changed``); and ``MADE_DIR_SECONDS`` after
  the ``mkdir`` at the latest.  Creating a file in a new directory (``tar x``, ``cp -r``,
  ``git clone``, ``rsync``) costs a LOOKUP of its name first, and those creates come right
  after the ``mkdir``; later, the handler's answers are the better ones: under a change feed
  they are negative entries the kernel keeps (an hour), so a name probed again and again
  (a build's search path) costs one request, where the binding's answer costs one each time;
- all taken back when the inode table lets the number go (``InodeTable.on_forgotten``): the
  kernel forgot it (it keeps an inode while a handle of it is open), or it was listed by name
  alone and dropped.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Callable, Collection, Protocol

from lakefuse.errors import LakefuseError
from lakefuse.fs.readers import read_ahead_bytes

if TYPE_CHECKING:
    from lakefuse.fs.passthrough import Passthrough
    from lakefuse.fs.tree import Tree
    from lakefuse.graveler.model import Entry

#: names of the biggest directory whose missing names the binding answers
MAX_NAMES = 100_000
#: the longest the binding answers the missing names of a directory this mount made
MADE_DIR_SECONDS = 5.0


class BindingAnswers(Protocol):
    """The binding's registries (``lakefuse.fuse.native_answers``)."""

    def add(self, ino: int, path: bytes, size: int, read_ahead: int = 0) -> None: ...

    def remove(self, ino: int) -> None: ...

    def add_names(self, ino: int, names: frozenset[bytes], timeout: float, expires: float = 0.0) -> None: ...

    def remove_names(self, ino: int) -> None: ...

    #: None: the binding cannot add a name to a registered directory (nor expire one)
    insert_name: Callable[[int, bytes], None] | None


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
        self._branch_dirs: dict[int, object] = {}  # those of them on branches: their tree's key
        self._insert_name = getattr(binding, "insert_name", None)

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

    def made_dir(self, ino: int, tree: Tree, expires: float) -> None:
        """This mount made directory ``ino`` of branch ``tree``, empty, and the tree trusts
        that until ``expires`` (a ``time.monotonic()`` time; inf: until told otherwise)."""
        if self._insert_name is None or immutable(tree) or ino in self._named:
            return
        self._binding.add_names(ino, frozenset(), 0.0, min(expires, time.monotonic() + MADE_DIR_SECONDS))
        self._named.add(ino)
        self._branch_dirs[ino] = tree.key

    def may_exist(self, parent_ino: int, name: bytes | str) -> None:
        """``name`` may be made in directory ``parent_ino`` now: its LOOKUPs go to the handler."""
        if parent_ino in self._branch_dirs:
            if isinstance(name, str):
                name = name.encode("utf-8", "surrogateescape")
            self._insert_name(parent_ino, name)

    def tree_changed(self, tree: Tree) -> None:
        """Branch ``tree`` changed in ways this mount did not make name by name: none of its
        directories' names stay with the binding."""
        for ino, key in list(self._branch_dirs.items()):  # a copy: made_dir may run on another thread
            if key != tree.key:
                continue
            self._drop_names(ino)

    def forget(self, ino: int) -> None:
        """``ino`` stands for nothing any more."""
        self._binding.remove(ino)
        if ino in self._named:
            self._drop_names(ino)

    def _drop_names(self, ino: int) -> None:
        self._named.discard(ino)
        self._branch_dirs.pop(ino, None)
        self._binding.remove_names(ino)
