"""Committed content: immutable ranges and metaranges ("Graveler files") in ``_lakefs/``.

- ``encoding``: record values, lakeFS protobufs, identities and content addresses
- ``files``: storage keys, skip-if-present uploads, fetching through the disk cache
- ``writer``: range writers and content-defined range splitting
- ``loaded``: decoded ranges / metaranges held by the RAM cache
- ``manager``: ``CommittedManager``, the ``CommittedStore`` (get, iterate, list_dir, diff, apply)
"""

from lakefuse.graveler.committed.encoding import (
    entry_identity,
    entry_to_record,
    file_id,
    record_to_entry,
    value_record_id,
)
from lakefuse.graveler.committed.manager import CommittedManager, prefix_successor

__all__ = [
    "CommittedManager",
    "entry_identity",
    "entry_to_record",
    "file_id",
    "prefix_successor",
    "record_to_entry",
    "value_record_id",
]
