"""Filesystem semantics of a lakefuse mount, without any FUSE library.

``filesystem.LakeFilesystem`` defines what repositories, refs and objects look like as files
and directories; ``tree`` maps one ref's keys to paths; ``nodes`` is the inode table;
``spool`` holds files being written; ``backend`` is the narrow interface to the core (with an
in-memory twin in ``memory`` and the real one in ``app_backend``); ``readers`` serve object
bytes (local files directly, remote objects through a block cache with read-ahead);
``passthrough`` decides which opens the kernel serves from a local file itself.
The kernel-facing adapter is ``lakefuse.fuse``.
"""
