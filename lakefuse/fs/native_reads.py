"""Native reads: READs of a handle that the FUSE binding answers itself from a local file.

lakefuse's build of pyfuse3 (``scripts/build_pyfuse3.py``) can answer a READ without calling
the read handler. For a handle registered with a descriptor and a size, it reads the bytes asked
for from that descriptor, in C, if they are all in the page cache (``preadv2`` with
``RWF_NOWAIT``), and replies. Anything else (bytes not cached, an error) goes to the handler as
before. Reading a small file costs three requests (OPEN, READ, RELEASE), and the READ's trip
through trio and Python cost several times its ``pread``.

This module owns which handles are registered (``start``) and when they are taken back
(``stop``, ``stop_all``):

- registered: a read-only handle that reads an unmodified object whose bytes are a local file
  (its ``reader`` has a ``fileno``; its file has no spool) smaller than 1 MiB. These are the
  handles whose reads ``Files.read_nowait`` answers by copying from ``reader``; a bigger
  object is answered from a memory map of its file, a copy fewer than the binding's
  ``pread`` (``LocalFileReader.MAP_MIN_BYTES``). The size is the object's.
- taken back as soon as a read could answer something else: when the file gets a spool
  (``OpenFile.spool`` set: a write, a truncate, an append into the object's own file; a
  reader opened before a writer then reads the writer's bytes through the handler, as
  ``tail -f`` needs), and before the reader's descriptor is closed (release).

The binding reads with the GIL held from its lookup to its reply, and ``stop`` removes a
handle under the GIL before its descriptor is closed, so the binding never reads a descriptor
number that was closed and reused. A spool is set before any byte is written into it or into
the object's own file, and the handles are taken back right then (``OpenFile.spool``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from lakefuse.fs.readers import LocalFileReader

if TYPE_CHECKING:
    from lakefuse.fs.handles import FileHandle, OpenFile


class NativeReads(Protocol):
    """The binding's registry of handles it answers READs of (``lakefuse.fuse.native_reads``)."""

    def add(self, fh: int, fd: int, size: int) -> None: ...

    def remove(self, fh: int) -> None: ...


def start(native: NativeReads, h: FileHandle) -> None:
    """Have the binding answer ``h``'s reads, if it may (see the module docstring).  Call once
    ``h.reader`` is open."""
    fileno = getattr(h.reader, "fileno", None)
    of = h.open_file
    if (fileno is None or h.writable or h.entry is None or h.entry.size >= LocalFileReader.MAP_MIN_BYTES
            or h.fh is None or of.spool is not None):
        return
    of.native_reads[h.fh] = native  # from here on, a spool set takes it back
    native.add(h.fh, fileno(), h.entry.size)
    if of.spool is not None:  # set meanwhile, maybe before the line above: take it back here
        of.native_reads.pop(h.fh, None)
        native.remove(h.fh)


def stop(h: FileHandle) -> None:
    """Send ``h``'s reads to the handler again (before its reader is closed)."""
    native = h.open_file.native_reads.pop(h.fh, None)
    if native is not None:
        native.remove(h.fh)


def stop_all(of: OpenFile) -> None:
    """Send the reads of every handle of ``of`` to the handler again (its bytes change)."""
    while of.native_reads:
        try:
            fh, native = of.native_reads.popitem()
        except KeyError:  # emptied by another thread meanwhile
            return
        native.remove(fh)
