"""Filesystem semantics of a lakefuse mount, without any FUSE library.

``filesystem.LakeFilesystem`` is the one entry point (the adapter in ``lakefuse.fuse`` only
translates): a thin coordinator handing each operation to the part that owns it, all parts
sharing one ``state.MountState`` (options, inode table, handle table, trees, lock):

- ``inodes``: lookup, forget, getattr (names to nodes); ``attributes``: stat(2) of a node;
  ``refs``: the tree of each ref and the name caches; ``nodes``: the inode table and node keys.
- ``files``: open, create, read, write, flush, release; ``uploads``: spools and uploads;
  ``handles``: the typed state behind each ``fh`` and the part serving it.
- ``readdir``: listings; ``namespace``: mkdir, rmdir, unlink, rename; ``refdirs``: mkdir and
  rmdir of branch directories; ``metadata``: setattr; ``xattrs``: extended attributes;
  ``control``: ``<branch>/.lakefuse/``, with ``refops`` (merge, tag, branch, reset);
  ``changes``: other writers' changes (and this mount's merges and resets) as kernel
  invalidations; ``replies``: what the operations return.

Below them: ``tree`` maps one ref's keys to paths (and caches its metadata); ``spool`` holds
files being written; ``backend`` is the narrow interface to the core (with an in-memory twin
in ``memory`` and the real one in ``app_backend``); ``readers`` serve object bytes (local files
directly, remote objects through a block cache with read-ahead); ``passthrough`` decides which
opens the kernel serves from a local file itself.
"""
