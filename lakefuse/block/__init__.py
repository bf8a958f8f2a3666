"""Object storage: the ``BlockAdapter`` interface (``base``), its ``local`` and ``s3`` adapters,
and storage namespace URIs (``namespace``: ``open_namespace`` picks the adapter).

Importing this package never imports boto3; ``lakefuse.block.s3`` does, on first use.
"""

from lakefuse.block.base import BlockAdapter, ObjectStat, TransferSettings, check_key, check_prefix
from lakefuse.block.namespace import normalize_namespace, open_namespace, parse_namespace

__all__ = [
    "BlockAdapter",
    "ObjectStat",
    "TransferSettings",
    "check_key",
    "check_prefix",
    "normalize_namespace",
    "open_namespace",
    "parse_namespace",
]
