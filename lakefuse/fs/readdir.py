"""Directory listings: ``Readdir`` serves opendir and readdir.

Owns the listing state machine of a ``DirHandle``.  Offsets are positions in the handle's
listing: '.' and '..', then the tree's entries page by page (``Tree.list_dir``, resuming
after the last key listed, so a huge directory is never re-read from the start), then files
created here and not uploaded yet.  A position means the same entry on every handle of the
directory: the kernel may ask a handle to go on from where another one stood (``_skip_to``).
``blocking=False`` (the adapter's event loop) answers from the handle's buffer and the pages
the tree keeps in memory, else raises ``WouldBlock`` before reporting anything.  Listings of
repositories, refs and the control directory are small and made at once (``static``).  Every
reported entry's lookup count goes up by one, as the kernel expects of READDIRPLUS.

The kernel keeps the listings of a ref's directories (``open_dir``: FUSE's ``cache_readdir``),
so a second ``find`` or ``ls`` is answered without a request: a tag's or commit's for good
(``keep_cache`` at every opendir), a branch's while its tree vouches for the listing served
last (``Tree.kernel_keeps``: listed whole from its start, with no file that is not uploaded
yet, nothing changed in it since, and within the tree's ``ttl``); else the opendir tells the
kernel to drop what it kept, and the listing it is served instead is kept in its place.  The
kernel drops a listing itself when this mount changes the directory.  Repositories, refs and
the control directory are listed anew at each opendir.

A reply may give regular files by name alone (``add_name``: name, inode number, type; no
lookup count), which a walk that stats nothing takes several times faster; ``Walkers``
decides when (``lakefuse.fs.walkers``), and an opendir by a process that stats drops a kept
listing that has names alone.
"""

from __future__ import annotations

import errno
import time
from typing import Callable

from lakefuse.fs.attributes import NodeAttributes
from lakefuse.fs.handles import DirHandle, HandleOps
from lakefuse.fs.inodes import CONTROL_FILES, Inodes
from lakefuse.fs.nodes import Node, NodeKind
from lakefuse.fs.replies import Attributes, OpenResult, WouldBlock
from lakefuse.fs.state import MountState
from lakefuse.fs.tree import Tree, dir_prefix
from lakefuse.fs.walkers import Walkers

Add = Callable[[bytes, Attributes, int], bool]
#: ``add_name(name, inode number, mode, next offset)``: an entry without attributes
AddName = Callable[[bytes, int, int, int], bool]
#: the mode an entry by name alone reports (its file type is all that counts)
_NAMED_FILE_MODE = 0o100000


class Readdir(HandleOps):
    def __init__(self, state: MountState, inodes: Inodes, attributes: NodeAttributes, walkers: Walkers):
        self._state = state
        self._walkers = walkers
        self._table = state.table
        self._inodes = inodes
        self._attrs = attributes.get

    def opendir(self, node: Node) -> int:
        if not node.kind.is_dir:
            raise OSError(errno.ENOTDIR, "not a directory")
        return self._state.handles.add(DirHandle(self, node))

    def open_dir(self, node: Node, caller: int = 0) -> OpenResult:
        """``opendir`` by the process ``caller``, and what the kernel may do with the listing
        (see the module docstring)."""
        fh = self.opendir(node)
        if node.kind is not NodeKind.DIR:
            return OpenResult(fh)
        tree = node.tree
        keep = tree.kernel_keeps(node.path) and not self._walkers.drop_kept_names(tree.key, node.path, caller)
        return OpenResult(fh, keep_cache=keep, cache_readdir=True)

    def readdir(self, h: DirHandle, offset: int, add: Add, blocking: bool, add_name: AddName | None = None,
                caller: int = 0) -> None:
        if not blocking:
            if not h.lock.acquire(blocking=False):
                raise WouldBlock
            h.lock.release()
        with h.lock:
            if h.node.kind is NodeKind.DIR:
                if add_name is not None and not self._walkers.names_only(caller):
                    add_name = None
                self._readdir_tree(h, offset, add, blocking, add_name)
            else:
                if not blocking and (h.static is None or offset == 0):
                    raise WouldBlock
                self._readdir_static(h, offset, add)

    # ------------------------------------------------------------------ repositories, refs, control files

    def _readdir_static(self, h: DirHandle, offset: int, add: Add) -> None:
        if h.static is None or offset == 0:
            h.static = self._static_listing(h.node)
        own = self._attrs(h.node)
        for position in range(offset, len(h.static) + 2):
            if position < 2:  # '.' and '..': reported without a lookup count
                if not add(b"." * (position + 1), own, position + 1):
                    return
                continue
            name, child = h.static[position - 2]
            if not add(name.encode("utf-8"), self._attrs(child), position + 1):
                self._table.drop_if_unused(child)
                return
            self._table.add_lookup(child)

    def _static_listing(self, node: Node) -> list[tuple[str, Node]]:
        inodes = self._inodes
        if node.kind is NodeKind.REPOSITORIES:
            repos = sorted(self._state.backend.list_repositories())
            self._state.refs.listed_repositories(repos)
            return [(repo, inodes.repository_node(repo)) for repo in repos]
        if node.kind is NodeKind.REPOSITORY:
            out = []
            now = time.monotonic()
            for ref in self._state.backend.list_refs(node.repo):
                self._state.refs.remember(node.repo, ref, now)
                out.append((ref.name, inodes.ref_node(node.repo, ref)))
            return out
        if node.kind is NodeKind.CONTROL_DIR:
            return [(name, inodes.control_file_node(node.tree, name)) for name in CONTROL_FILES]
        return []

    # ------------------------------------------------------------------ a tree's directories

    def _readdir_tree(self, h: DirHandle, offset: int, add: Add, blocking: bool = True,
                      add_name: AddName | None = None) -> None:
        node = h.node
        tree = node.tree
        if not blocking:  # from memory only: the buffered entries and the tree's kept pages
            if offset != len(h.emitted):
                raise WouldBlock
            if not h.buffer and not h.exhausted and not self._buffer_kept_page(h):
                raise WouldBlock  # before anything is reported: the caller retries it all
        if offset != len(h.emitted):
            self._seek(h, offset)
        if offset == 0 and tree.ttl is not None:  # a branch's listing, which the kernel keeps
            h.kernel_token = tree.listing_for_kernel(node.path)
        while len(h.emitted) < 2:  # '.' and '..': reported without a lookup count
            position = len(h.emitted)
            if not add(b"." * (position + 1), self._attrs(node), position + 1):
                return
            h.emitted.append((None, ""))
        while True:
            if not h.buffer:
                filled = self._fill_buffer(h, blocking)
                if filled is None:
                    return  # what was in memory is out; the kernel asks again for the rest
                if not filled:
                    if h.kernel_token is not None:  # served whole: the kernel may keep it
                        tree.kernel_listed(node.path, h.kernel_token)
                        h.kernel_token = None
                    native = self._inodes.native_answers
                    if native is not None:
                        native.listed_whole(node.ino, tree, node.path, h.names)
                    return
                continue
            if not self._emit_buffered(h, add, tree, add_name):
                return

    def _fill_buffer(self, h: DirHandle, blocking: bool) -> bool | None:
        """Put the next entries of ``h``'s listing in its empty buffer: the tree's next page,
        then the files not uploaded yet.  False once the listing is done; None if not
        ``blocking`` and the next page is not in memory."""
        node = h.node
        tree = node.tree
        if not h.exhausted:
            if blocking:
                page, h.after, h.exhausted = tree.list_dir(node.path, h.after, self._state.readdir_page)
                h.buffer.extend(page)
                return True
            return True if self._buffer_kept_page(h) else None
        if h.extras_done:
            return False
        h.extras_done = True
        extras = self._state.unstaged.listed_in(tree, node.path, h.names, h.opened)
        if extras and tree.ttl is not None:  # files not uploaded yet: they may go (a failed
            tree.kernel_may_not_keep(node.path)  # write) without a change of the tree
            h.kernel_token = None
        h.buffer.extend(extras)
        return True

    def _buffer_kept_page(self, h: DirHandle) -> bool:
        """Buffer the next page of ``h``'s listing if the tree keeps it in memory."""
        kept = h.node.tree.kept_page(h.node.path, h.after, self._state.readdir_page)
        if kept is None:
            return False
        page, h.after, h.exhausted = kept
        h.buffer.extend(page)
        return True

    def _emit_buffered(self, h: DirHandle, add: Add, tree: Tree, add_name: AddName | None = None) -> bool:
        """Report the listed entries in ``h.buffer``; False once ``add`` says the kernel's
        buffer is full.  The per-entry loop of every listing (``ls``, ``find``, a Spark
        listing): the inode table's lock is held for the batch, and a name the table
        knows already (a second listing) costs a dictionary lookup and its cached attributes
        if it has any (a listing keeps none: ``NodeAttributes.listed``), and a regular file
        new to the table gets an inode number but no node (``Inodes.listed_entry``), and is
        offered to the binding if among the listing's first (``Inodes.listing_offers``).
        With ``add_name``, regular files are reported by name alone (``Inodes.named_entry``)."""
        buffer, names, emitted = h.buffer, h.names, h.emitted
        prefix = dir_prefix(h.node.path)
        expires = tree._expiry()
        listed_entry, named_entry, table = self._inodes.listed_entry, self._inodes.named_entry, self._table
        offers = self._inodes.listing_offers(tree, h.node.path)  # files offered to the binding
        served_names = False
        room = True
        with table.lock:
            while buffer:
                name, key, stat = buffer[0]
                if name in names:  # a file and a directory of the same name: the file wins
                    buffer.popleft()
                    continue
                # a file's key is its path (one string shared by the node, the page and the
                # tree's cache); a directory's ends with '/'
                path = key if key is not None and key[-1] != "/" else prefix + name
                offer = len(emitted) < offers
                ino = named_entry(tree, path, stat, offer) if add_name is not None else None
                if ino is not None:  # by name alone
                    if not add_name(name.encode("utf-8"), ino, _NAMED_FILE_MODE, len(emitted) + 1):
                        room = False
                        break
                    served_names = True
                else:
                    attrs = listed_entry(tree, path, stat, expires, offer)
                    if not add(name.encode("utf-8"), attrs, len(emitted) + 1):
                        table.forget(attrs.ino, 1)  # not reported after all (dropped if nothing else uses it)
                        room = False
                        break
                buffer.popleft()
                emitted.append((key, name))
                names.add(name)
        if served_names:
            self._walkers.served_names(tree.key, h.node.path)
        return room

    def _seek(self, h: DirHandle, offset: int) -> None:
        """Restart a listing at a position reported earlier (rewinddir, seekdir), by this
        handle or by another one of the directory (``_skip_to``)."""
        wanted = offset
        offset = max(0, min(offset, len(h.emitted)))
        del h.emitted[offset:]
        h.buffer.clear()
        h.exhausted = h.extras_done = False
        h.after = ""
        for key, _name in reversed(h.emitted):
            if key is not None:
                h.after = key
                break
        h.names = {name for key, name in h.emitted if name}
        # files being written were listed after the backend's entries: list them again
        extras = [name for key, name in h.emitted if key is None and name]
        if extras:
            h.names.difference_update(extras)
            h.emitted = [(key, name) for key, name in h.emitted if key is not None or not name]
        if wanted > len(h.emitted):
            self._skip_to(h, wanted)

    def _skip_to(self, h: DirHandle, offset: int) -> None:
        """Advance ``h`` to position ``offset`` of the listing without reporting the entries
        before it (no lookup counts: this handle never reported them).

        A position means the same entry on every handle of a directory (the same listing,
        counted the same way), and the kernel relies on it: reading a listing it keeps, it
        asks the mount for the rest from where it stands when the kept listing goes missing
        half-way (a page of it reclaimed or invalidated), on a handle that reported nothing.
        Started over from the top there, the reader got the names it had already read a
        second time (``os.listdir`` of a directory of 1,000 files returned 1,916 names after
        a Spark job read 100,000 files through the mount)."""
        h.kernel_token = None  # not served whole by this handle: not one the kernel may keep
        while len(h.emitted) < min(offset, 2):  # '.' and '..'
            h.emitted.append((None, ""))
        while len(h.emitted) < offset:
            if not h.buffer:
                if not self._fill_buffer(h, blocking=True):
                    return  # past the end: the kernel gets no more entries
                continue
            name, key, _stat = h.buffer.popleft()
            if name in h.names:  # as ``_emit_buffered``: a file and a directory of the same name
                continue
            h.emitted.append((key, name))
            h.names.add(name)
