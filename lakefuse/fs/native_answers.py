"""Native answers: OPENs of commit, tag and unmodified branch files, and LOOKUPs of names their
directories (and branch directories listed whole or made here) do not have, that the FUSE
binding answers itself.

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
- an OPEN of a branch file's inode registered with the path of a local file, its size and an
  expiry: read-only, answered without passthrough (the kernel does not read the file itself):
  the binding opens the file once for every handle of the inode, which share one handle
  number (``BindingAnswers.branch_fh_bit | ino``), and answers their READs (when the bytes are
  cached: ``lakefuse.fs.native_reads``'s rule) and RELEASEs from it.  Until the binding hands
  them over (``take_branch_file``), the mount does not know these handles; from then on every
  request about that handle number reaches the handlers, and the mount serves it as a handle
  it opened (``lakefuse.fs.files.Files``);
- a LOOKUP in a directory registered with all of its names, of an ASCII name not among them
  (the handler checks the others' encoding): a negative entry the kernel keeps as long as the
  handler's of that tree would be (immutable trees: ``MountState.immutable_ttl``; branches:
  see below).  Names the directory has go to the handler.

Reading a small commit file costs an OPEN and a RELEASE (and, for Hadoop's checksum
filesystem, a LOOKUP of a missing ``.<name>.crc``), and their trips through trio and Python
cost several times the system calls they make: a Spark job reading 100,000 one-row files
makes each of them 100,000 times.

This module owns what is registered (``NativeAnswers.offer``, ``listed_whole``, ``made_dir``)
and when it is taken back (``forget``, ``tree_changed``):

- a regular file of a commit or tag tree (immutable: the object a path names never changes,
  unlike on a branch, also a read-only one, which another writer may move) whose object is a
  file of a local storage namespace, while passthrough is on, offered when its inode number
  is new (a listed file, also one listed by name alone, or a node a lookup made): no handle of
  it can be open yet, so every handle the kernel opens is the binding's (or, after a failure,
  the handler's);
- a regular file of a branch tree whose object is a file of a local storage namespace smaller
  than ``BRANCH_FILE_MOST`` (the binding's reads of bigger ones would cost more than the
  mount's reads from a memory map), when the mount's binding reads them (``native_reads``;
  also with ``--passthrough-branches``, whose kernel reads pay for big files, not for small
  ones, whose opens through the handlers cost more), until the tree's memory of the entry
  expires; at most ``BRANCH_FILES_MOST`` at once.  Offered when a lookup makes its inode
  number, or a listing numbers it among the first ``LISTED_AT_ONCE`` entries of its directory;
  the directory's other listed files when a file of it is first opened through the handlers
  (``first_open_in``: read-only, a file the binding did not open), and from then on as
  listings number them.  A walk that opens nothing (``ls -lR``) does not pay for them (about
  3 µs of listing time each); a Spark job or ``xargs cat`` opens one file of a directory
  through the handlers, the others in the binding.  A branch file changes, so the
  registration ends, and the handles the binding opened become the mount's, before the mount
  could serve other bytes for it:

  - at the first open, create or truncate of the inode that reaches the handlers (``take``,
    from ``Files``: a write, or an open the binding declined): the handles the binding opened
    are counted into the file's ``OpenFile`` as one handle standing for them all (so the
    kernel writing a spool itself, which needs the file's only handle, is not granted), and
    a writer's spool takes their reads back as any reader's (``tail -f``).  The mount keeps
    no entry per registered file (a walk of a million files would keep a million): the
    binding hands over the descriptor its handles read, and the handle reads on from it;
  - when another writer changed the path (a change-feed poll), the tree's head moved
    (``tree_changed``), or the entry the node holds changed (``file_changed``): no more opens
    by the binding; the handles it opened read the bytes they opened, as the mount's own
    would;
- a directory of a commit or tag tree once a listing of it first ended, with the names it
  reported (passthrough or not; a directory of more than ``MAX_NAMES`` names is not
  registered: the names would cost the memory the inode table saves on them);
- a directory of a branch, with the names the branch's tree knows it has (``Tree.known_whole``),
  this mount's files and directories in it not staged yet and, at the root, the control
  directory (``.lakefuse``, which listings hide), once a listing of it ended
  with the tree knowing it whole (Spark lists a dataset's directories, then looks up a
  missing ``.<name>.crc`` beside each file it reads), and a directory ``mkdir`` made on a
  branch (``made_dir``), with no names (``tar x``, ``cp -r``, ``git clone`` and ``rsync``
  look up each name before they create it).  The binding's answers there are the handler's:
  under a change feed a negative entry the kernel keeps as long as the handler's of the
  branch (``Tree.ttl``), else none (timeout 0).  The registration lasts as long as the tree
  trusts those names (its ``expires``: the binding drops it then, and the kernel keeps no
  answer past it), and it follows every change:

  - a name this mount makes in it is added before it is made and again after
    (``may_exist``, from ``LakeFilesystem``'s create, mknod, mkdir, symlink and a rename's
    target: a name in the set only sends its LOOKUPs to the handler, so adding one early, or
    for a make that then fails, is always safe; the second call covers a registration made
    meanwhile from names read before the make);
  - a name another writer changed, reported by the change-feed poll, is added
    (``names_may_exist``) and the negative entry the binding gave the kernel for it is named
    for invalidation (the binding records up to ``RECORDED_MOST`` such names in all, then
    answers with timeout 0);
  - when a poll cannot say what changed (the head moved), or a merge or reset through
    ``.lakefuse/`` moved it (``tree_changed``), the branch's registrations end and the
    recorded negative entries are named for invalidation, as the handler's are
    (``lakefuse.fs.negatives``);
- all taken back when the inode table lets the number go (``InodeTable.on_forgotten``): the
  kernel forgot it (it keeps an inode while a handle of it is open; the negative entries
  in a directory go with it), or it was listed by name alone and dropped.
"""

from __future__ import annotations

import os
import threading
import time
from typing import TYPE_CHECKING, Callable, Collection, Protocol

from lakefuse.errors import LakefuseError
from lakefuse.fs.negatives import NEGATIVE_ENTRIES_MOST
from lakefuse.fs.readers import LocalFileReader, read_ahead_bytes
from lakefuse.fs.tree import CONTROL_DIR_NAME

if TYPE_CHECKING:
    from lakefuse.fs.passthrough import Passthrough
    from lakefuse.fs.tree import Tree
    from lakefuse.graveler.model import Entry

#: names of the biggest directory whose missing names the binding answers
MAX_NAMES = 100_000
#: branch files the binding opens are smaller than this (see the module docstring)
BRANCH_FILE_MOST = LocalFileReader.MAP_MIN_BYTES
#: branch files registered at once, at most (about 0.4 KB each, in the binding and here: a
#: walk of a million files costs no more than this many; later ones the handlers open)
BRANCH_FILES_MOST = 200_000
#: a listing of a branch directory offers the regular files it numbers among its first this
#: many entries; the others once a file of the directory is opened through the handlers (see
#: the module docstring: a walk that opens nothing does not pay for them)
LISTED_AT_ONCE = 64
#: branch directories remembered as having had a file opened through the handlers, at most
#: (then all are forgotten, and each is learnt again at its next such open)
OPENED_DIRS_MOST = 100_000
#: how often registrations past their time are looked for (``NativeAnswers._end_expired``)
EXPIRED_EVERY = 60.0
#: ``listing_offers``: every file a listing numbers
_ALL = float("inf")
#: negative entries the binding records in branch directories, in all (then it answers with
#: timeout 0); as many as ``lakefuse.fs.negatives`` keeps of the handler's
RECORDED_MOST = NEGATIVE_ENTRIES_MOST


class BindingAnswers(Protocol):
    """The binding's registries (``lakefuse.fuse.native_answers``)."""

    def add(self, ino: int, path: bytes, size: int, read_ahead: int = 0) -> None: ...

    def remove(self, ino: int) -> None: ...

    def add_names(self, ino: int, names: frozenset[bytes], timeout: float, expires: float = 0.0,
                  record: bool = False) -> None: ...

    def remove_names(self, ino: int) -> Collection[bytes] | None: ...

    #: None: the binding cannot add a name to a registered directory (nor expire one)
    insert_name: Callable[[int, bytes], bool | None] | None
    #: sets how many negative entries it records in all; None: it records none (then
    #: branches get timeout 0)
    record_most: Callable[[int], None] | None


def immutable(tree: Tree) -> bool:
    """Whether what ``tree`` names never changes (a commit or a tag)."""
    return not tree.is_branch and not tree.writable


def _encoded(name: bytes | str) -> bytes:
    return name if isinstance(name, bytes) else name.encode("utf-8", "surrogateescape")


class NativeAnswers:
    """Registers files and directories with the binding (see the module docstring)."""

    def __init__(self, binding: BindingAnswers, local_file: Callable[[str, Entry], str | None] | None,
                 passthrough: Passthrough | None, negative_ttl: float,
                 unstaged_names: Callable[[Tree, str], Collection[str]] = lambda tree, path: (),
                 branch_local_file: Callable[[str, Entry], str | None] | None = None):
        """``local_file`` and ``passthrough`` None: no opens of commit and tag files are
        registered; ``branch_local_file`` None: none of branch files.
        ``unstaged_names(tree, path)``: this mount's names in a branch directory that the tree
        does not know yet."""
        self._binding = binding
        self._local_file = local_file
        if getattr(binding, "take_branch_file", None) is None:
            branch_local_file = None  # a build of the binding without them
        self._branch_local_file = branch_local_file
        self._branch_fh_bit = getattr(binding, "branch_fh_bit", 0) if branch_local_file is not None else 0
        #: branch files registered (until the binding's handles are taken): their tree's key
        #: (no entry: a walk of a million files would keep a million; the binding hands over
        #: the descriptor its handles read instead, see ``take``)
        self._branch_files: dict[int, object] = {}
        #: repository -> the directory its objects' addresses are relative to, as bytes, once a
        #: file of it was registered (a listing registers thousands: ``_branch_file_path``)
        self._branch_roots: dict[str, bytes] = {}
        #: (tree key, path) of branch directories a file of which was opened through the
        #: handlers (``first_open_in``): listings offer every file they number there
        self._opened_dirs: set[tuple[object, str]] = set()
        self._passthrough = passthrough
        self._negative_ttl = negative_ttl
        self._unstaged_names = unstaged_names
        self._named: set[int] = set()  # directories whose names the binding has
        #: those of them on branches: their tree's key and the registration's end
        self._branch_dirs: dict[int, tuple[object, float]] = {}
        self._insert_name = getattr(binding, "insert_name", None)
        record_most = getattr(binding, "record_most", None)
        self._records = record_most is not None
        if self._records:
            record_most(RECORDED_MOST)
        #: a registration's names and a name's insertion do not interleave (``may_exist``)
        self._lock = threading.Lock()
        self._next_sweep = 0.0  # ``_end_expired``

    @property
    def opens_branch_files(self) -> bool:
        """Whether the binding answers opens of branch files (see the module docstring)."""
        return self._branch_local_file is not None

    def listing_offers(self, tree: Tree, path: str) -> float:
        """How many of the regular files that a listing of directory ``path`` of ``tree``
        numbers it offers (``offer``), counted in entries from the listing's start: all of
        them in a commit or tag, and in a branch directory a file of which was opened through
        the handlers (``first_open_in``); else those among the first ``LISTED_AT_ONCE``."""
        if immutable(tree) or (tree.key, path) in self._opened_dirs:
            return _ALL
        return LISTED_AT_ONCE if self._branch_local_file is not None else 0

    def first_open_in(self, tree: Tree, path: str, mark: bool) -> bool:
        """Whether a read-only open of a file of branch directory ``path`` of ``tree`` that
        reaches the handlers is the first there: then the caller offers the files of it that
        listings numbered and did not offer (``Inodes.read_through_handlers``), its others
        likely being read next (a Spark job, ``xargs cat``).  ``mark``: and from now on it
        is not (and listings there offer every file)."""
        if self._branch_local_file is None or not tree.is_branch:
            return False
        key = (tree.key, path)
        if key in self._opened_dirs:
            return False
        if mark:
            if len(self._opened_dirs) >= OPENED_DIRS_MOST:
                self._opened_dirs.clear()
            self._opened_dirs.add(key)
        return True

    def offer(self, ino: int, tree: Tree, entry: Entry, expires: float = 0.0) -> None:
        """A new inode number ``ino`` for a regular file of ``tree`` whose object is ``entry``;
        on a branch the tree trusts that until ``expires`` (a ``time.monotonic()`` time; 0:
        its time-to-live from now)."""
        if not immutable(tree):
            if self._branch_local_file is not None and tree.is_branch:
                self._offer_branch_file(ino, tree, entry, expires)
            return
        if self._local_file is None or not self._passthrough.enabled:
            return
        try:
            path = self._local_file(tree.repo, entry)
        except (LakefuseError, OSError):  # not registered: the handler opens it, and says why if it cannot
            return
        if path is not None:
            self._binding.add(ino, os.fsencode(path), entry.size, read_ahead_bytes(entry.size))

    def _offer_branch_file(self, ino: int, tree: Tree, entry: Entry, expires: float) -> None:
        if entry.size >= BRANCH_FILE_MOST or len(self._branch_files) >= BRANCH_FILES_MOST:
            return
        path = self._branch_file_path(tree.repo, entry)
        if path is None:
            return
        if not expires:
            expires = time.monotonic() + tree.ttl
        if expires == float("inf"):
            expires = 0.0
        self._branch_files[ino] = tree.key  # before the binding can open it
        self._binding.add_branch_file(ino, path, entry.size, read_ahead_bytes(entry.size), expires)

    def _branch_file_path(self, repo: str, entry: Entry) -> bytes | None:
        """The local file of ``entry``'s object, or None.  The backend's answer for the first
        file of a repository, then its directory joined to each relative address: a few
        microseconds less per listed file."""
        if entry.address_is_full:
            return None
        address = entry.physical_address
        root = self._branch_roots.get(repo)
        if root is not None and not address.startswith("/"):
            return root + address.encode("utf-8", "surrogateescape")
        try:
            path = self._branch_local_file(repo, entry)
        except (LakefuseError, OSError):  # not registered: the handler opens it, and says why if it cannot
            return None
        if path is None:
            return None
        if path.endswith("/" + address):
            self._branch_roots[repo] = os.fsencode(path[:-len(address)])
        return os.fsencode(path)

    def take(self, ino: int) -> tuple[int, int, int, int] | None:
        """The binding no longer opens branch file ``ino``, and the handles of it that it holds
        are the handlers' from now on: ``(handle number, how many kernel handles it stands
        for, the descriptor of the object file they read, now the caller's to close, that
        object's size)``, or None if it holds none."""
        if self._branch_files.pop(ino, None) is None:
            return None
        taken = self._binding.take_branch_file(ino)
        if taken is None:
            return None
        count, fd, size = taken
        return self._branch_fh_bit | ino, count, fd, size

    def may_hold(self, ino: int) -> bool:
        """Whether the binding may hold handles of branch file ``ino`` (``take`` them first)."""
        return ino in self._branch_files

    def ino_of_handle(self, fh: int) -> int | None:
        """The inode of a handle number the binding gave its handles of a branch file, else None."""
        if self._branch_fh_bit and fh & self._branch_fh_bit:
            return fh & ~self._branch_fh_bit
        return None

    def file_changed(self, ino: int) -> None:
        """Branch file ``ino`` may now be other bytes than the binding's handles read: it opens
        no more (those it holds read on what they opened)."""
        if ino in self._branch_files:
            self._binding.remove_branch_file(ino)

    def listed_whole(self, ino: int, tree: Tree, path: str, names: Collection[str]) -> None:
        """A listing of directory ``ino`` (``path``) of ``tree`` ended, having reported ``names``."""
        if immutable(tree):
            if ino not in self._named and len(names) <= MAX_NAMES:
                self._binding.add_names(ino, frozenset(name.encode("utf-8") for name in names), self._negative_ttl)
                self._named.add(ino)
            return
        if self._insert_name is None:
            return
        with self._lock:
            if self._registered(ino):
                return
            known = tree.known_whole(path, MAX_NAMES)
            if known is None:  # changed while it was listed, or too big
                return
            names, expires = known
            names.update(self._unstaged_names(tree, path))
            if path == "":  # a branch's root has the control directory, which listings hide
                names.add(CONTROL_DIR_NAME)
            self._register(ino, tree, names, expires)

    def made_dir(self, ino: int, tree: Tree, expires: float) -> None:
        """This mount made directory ``ino`` of branch ``tree``, empty, and the tree trusts
        that until ``expires`` (a ``time.monotonic()`` time; inf: until told otherwise)."""
        if self._insert_name is None or immutable(tree):
            return
        with self._lock:
            if not self._registered(ino):
                self._register(ino, tree, (), expires)

    def _registered(self, ino: int) -> bool:
        """Whether directory ``ino`` is registered (a branch's: and its registration not over)."""
        if ino not in self._named:
            return False
        branch_dir = self._branch_dirs.get(ino)
        return branch_dir is None or branch_dir[1] > time.monotonic()

    def _register(self, ino: int, tree: Tree, names: Collection[str], expires: float) -> None:
        """Under ``_lock``: the binding answers missing names of branch directory ``ino`` until
        ``expires``."""
        timeout = tree.ttl if tree.change_feed is not None and self._records else 0.0
        self._end_expired()
        self._binding.add_names(ino, frozenset(_encoded(name) for name in names), timeout,
                                0.0 if expires == float("inf") else expires, timeout > 0)
        self._named.add(ino)
        self._branch_dirs[ino] = (tree.key, expires)

    def _end_expired(self) -> None:
        """Under ``_lock``: end the branch registrations past their time, at most every
        ``EXPIRED_EVERY`` seconds (the binding drops one at its next LOOKUP; one no LOOKUP
        comes to would keep its record)."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + EXPIRED_EVERY
        for ino, (_key, expires) in list(self._branch_dirs.items()):
            if expires <= now:
                self._drop_names(ino)

    def may_exist(self, parent_ino: int, name: bytes | str) -> None:
        """``name`` may be made in directory ``parent_ino`` now: its LOOKUPs go to the handler.
        (Called before the make and again after it: see the module docstring.)"""
        if parent_ino in self._branch_dirs or self._lock.locked():
            with self._lock:
                if parent_ino in self._branch_dirs:
                    self._insert_name(parent_ino, _encoded(name))

    def names_may_exist(self, names: Collection[tuple[int, str]], out: list[tuple[int, bytes]]) -> None:
        """Another writer may have made each ``(directory inode, name)``: their LOOKUPs go to
        the handler, and the negative entries the binding gave the kernel for them are added
        to ``out`` (entries to invalidate)."""
        with self._lock:
            for parent_ino, name in names:
                if parent_ino in self._branch_dirs:
                    encoded = _encoded(name)
                    if self._insert_name(parent_ino, encoded):
                        out.append((parent_ino, encoded))

    def tree_changed(self, tree: Tree, out: list[tuple[int, bytes]]) -> None:
        """Branch ``tree`` changed in ways this mount cannot name: none of its directories'
        names stay with the binding, and the negative entries it gave the kernel there are
        added to ``out`` (entries to invalidate)."""
        with self._lock:
            for ino, (key, _expires) in list(self._branch_dirs.items()):
                if key == tree.key:
                    for name in self._drop_names(ino) or ():
                        out.append((ino, name))
        for ino, key in list(self._branch_files.items()):
            if key == tree.key:
                self._binding.remove_branch_file(ino)

    def forget(self, ino: int) -> None:
        """``ino`` stands for nothing any more.  Called under the inode table's lock, so not
        under ``_lock`` (a registration holds that while it reads unstaged names): nothing
        registers a directory the kernel no longer holds."""
        self._binding.remove(ino)
        if self._branch_files.pop(ino, None) is not None:
            taken = self._binding.take_branch_file(ino)
            if taken is not None:  # the kernel forgets no inode it holds open: never so
                os.close(taken[1])
        if ino in self._named:
            self._drop_names(ino)

    def _drop_names(self, ino: int) -> Collection[bytes] | None:
        self._named.discard(ino)
        self._branch_dirs.pop(ino, None)
        return self._binding.remove_names(ino)
