"""Which listings report regular files by name alone: ``Walkers``.

A READDIRPLUS reply may give each entry its attributes, and the kernel then makes an inode of
it (and takes a lookup count), or give an entry its name, inode number and type only, and the
kernel makes nothing.  Making 200,000 inodes costs the kernel about a second on this class of
machine, most of a fresh ``find`` of the kernel's share, and ``find`` needs names and types
only.  A walk that stats what it lists (``ls -l``, ``du``, ``rsync``, Spark's file listing)
needs the inodes: without them it sends one LOOKUP per file, which costs several times more
than the inodes.  Nothing in a READDIRPLUS request says which walk it serves, and the kernel
asks for a whole directory of thousands of entries at once (glibc's buffer), before the walk
stats any of them, so this decides per process (the thread ID the kernel sends with each
request):

- processes running one of ``programs`` (the mount's ``--names-only-for``, e.g. ``find``,
  ``fd``, ``tree``: programs that walk by names and types; none by default) get regular files
  by name alone;
- unless the process was seen looking up a regular file in the last ``ttl`` seconds (a lookup
  the kernel sends because it has no inode for the name: ``find -size``, ``find -ls``): then it
  gets attributes, and each listing that uses this refreshes it;
- every other process gets attributes, as before; directories, symbolic links and special
  files always do (a walk descends into directories, which would otherwise cost a LOOKUP each).

The kernel keeps a directory's listing (``cache_readdir``) with whatever the reply said, and
serves it again without asking: after a ``find``, a ``du`` reads names alone and looks up each
file.  ``Walkers`` remembers the directories listed with names alone (``served_names``), and
an ``opendir`` of one of them by a process that stats (any process not running one of
``programs``, or one seen looking up files) tells the kernel to drop the listing it keeps
(``drop_kept_names``), so that process is served attributes: it then costs what the walk
with names alone saved (the kernel's inodes, and the listing once more), which is why no
program gets names alone unless the mount names it.  Thread-safe; bounded (the oldest
processes and directories are forgotten).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable, Hashable

#: how long a process counts as one that stats what it lists, after its last lookup of a file
#: or listing with attributes
STATTING_SECONDS = 10.0
#: how long the program a thread ID runs is trusted (thread IDs are reused)
PROGRAM_SECONDS = 5.0
#: processes remembered (thread IDs; the oldest are forgotten)
CALLERS_KEPT = 4096
#: directories remembered as kept by the kernel with names alone
DIRECTORIES_KEPT = 65536


def program_of(caller: int) -> str:
    """The program the thread ``caller`` runs (its ``comm``), or '' if it cannot be read."""
    try:
        with open(f"/proc/{caller}/comm", "rb") as f:
            return f.read().rstrip(b"\n").decode("utf-8", "replace")
    except OSError:
        return ""


class Walkers:
    def __init__(self, ttl: float = STATTING_SECONDS, clock: Callable[[], float] = time.monotonic,
                 programs: frozenset[str] = frozenset(), program_of: Callable[[int], str] = program_of):
        self.ttl = ttl
        self.programs = programs
        self._clock = clock
        self._program_of = program_of
        self._lock = threading.Lock()
        #: thread ID -> (whether it runs one of ``programs``, until when that is trusted)
        self._name_only_callers: OrderedDict[int, tuple[bool, float]] = OrderedDict()
        #: thread ID -> until when it counts as statting what it lists
        self._statting: OrderedDict[int, float] = OrderedDict()
        #: (tree key, directory path) listed with names alone since the kernel last dropped it
        self._names_served: OrderedDict[tuple[Hashable, str], None] = OrderedDict()

    def looked_up_file(self, caller: int) -> None:
        """``caller`` looked up a regular file (the kernel had no inode for it)."""
        self._remember(self._statting, caller, self._clock() + self.ttl, CALLERS_KEPT)

    def stats(self, caller: int) -> bool:
        """Whether ``caller`` counts as a process that stats what it lists; if it does, for
        another ``ttl`` from now."""
        statting = self._statting
        if not statting:
            return False
        until = statting.get(caller)
        if until is None:
            return False
        now = self._clock()
        if until <= now:
            return False
        with self._lock:
            if caller in statting:
                statting[caller] = now + self.ttl
        return True

    def names_only(self, caller: int) -> bool:
        """Whether a listing for ``caller`` gives regular files by name alone (see the module
        docstring)."""
        return self._runs_name_only_program(caller) and not self.stats(caller)

    def _runs_name_only_program(self, caller: int) -> bool:
        if not caller or not self.programs:
            return False
        now = self._clock()
        known = self._name_only_callers.get(caller)
        if known is not None and known[1] > now:
            return known[0]
        verdict = self._program_of(caller) in self.programs
        self._remember(self._name_only_callers, caller, (verdict, now + PROGRAM_SECONDS), CALLERS_KEPT)
        return verdict

    def served_names(self, tree_key: Hashable, path: str) -> None:
        """The listing of directory ``path`` gave some files by name alone."""
        self._remember(self._names_served, (tree_key, path), None, DIRECTORIES_KEPT)

    def _remember(self, kept: OrderedDict, key, value, limit: int) -> None:
        """``kept[key] = value`` as its newest entry, and the oldest forgotten past ``limit``."""
        with self._lock:
            kept[key] = value
            kept.move_to_end(key)
            if len(kept) > limit:
                kept.popitem(last=False)

    def drop_kept_names(self, tree_key: Hashable, path: str, caller: int) -> bool:
        """At an ``opendir`` by ``caller``: whether the kernel should drop the listing it keeps
        of directory ``path`` because it has names alone and ``caller`` would be served
        attributes."""
        kept = self._names_served
        key = (tree_key, path)
        if key not in kept or self.names_only(caller):
            return False
        with self._lock:
            kept.pop(key, None)
        return True
