"""Executor-side resources, rebuilt in each Spark Python worker from picklable settings.

Owns the per-process caches of block adapters (one per storage namespace / source location)
and of disk caches, and the reads executors make of Graveler files: the range list of a
metarange and the entries of a range.  Everything here is safe to call on the driver too.

Nothing in this module is ever pickled: tasks carry URIs and ``JobSettings`` and call these
functions, which open (and keep, for the life of the worker process) what they need.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Iterator

from lakefuse.block.base import BlockAdapter
from lakefuse.config import S3Config
from lakefuse.errors import CorruptedData, LakefuseError
from lakefuse.graveler.committed.encoding import decode_entry, decode_value, value_to_range_info
from lakefuse.graveler.committed.files import GravelerFiles
from lakefuse.graveler.model import Entry, RangeInfo
from lakefuse.spark.settings import JobSettings

log = logging.getLogger(__name__)

#: adapters kept per worker process (imports/exports of full addresses open one per directory)
MAX_CACHED_ADAPTERS = 512

_lock = threading.Lock()
_adapters: "OrderedDict[tuple[str, S3Config | None], BlockAdapter]" = OrderedDict()
_disk_caches: dict[tuple[str, int], object] = {}


def adapter_for(uri: str, s3: S3Config | None = None) -> BlockAdapter:
    """The block adapter rooted at ``uri`` (a storage namespace or any directory/prefix URI),
    opened once per worker process.  Least recently used adapters beyond
    ``MAX_CACHED_ADAPTERS`` are dropped (not closed: another thread may still use them)."""
    cache_key = (uri, s3 if uri.startswith("s3://") else None)
    with _lock:
        adapter = _adapters.get(cache_key)
        if adapter is not None:
            _adapters.move_to_end(cache_key)
            return adapter
    from lakefuse.block.namespace import open_namespace

    adapter = open_namespace(uri, s3)
    with _lock:
        existing = _adapters.get(cache_key)
        if existing is not None:
            return existing
        _adapters[cache_key] = adapter
        while len(_adapters) > MAX_CACHED_ADAPTERS:
            _adapters.popitem(last=False)
    return adapter


def disk_cache_for(settings: JobSettings):
    """The worker's disk cache of Graveler files, or None (no cache dir, or it can't be used:
    then files are read straight from storage)."""
    if not settings.cache_dir:
        return None
    cache_key = (settings.cache_dir, settings.cache_bytes)
    with _lock:
        if cache_key in _disk_caches:
            return _disk_caches[cache_key]
        try:
            from lakefuse.cache import DiskCache

            cache = DiskCache(settings.cache_dir, settings.cache_bytes, name="graveler")
        except (LakefuseError, OSError) as exc:
            log.warning("not caching Graveler files in %s: %s", settings.cache_dir, exc)
            cache = None
        _disk_caches[cache_key] = cache
        return cache


def graveler_files(namespace: str, settings: JobSettings) -> GravelerFiles:
    """Graveler files (``<namespace>/_lakefs/<id>``) of a storage namespace."""
    return GravelerFiles(adapter_for(namespace, settings.s3), disk_cache_for(settings))


def read_range_infos(namespace: str, settings: JobSettings, metarange_id: str) -> list[RangeInfo]:
    """The ranges a metarange lists, in key order."""
    items, _size = graveler_files(namespace, settings).read_items(metarange_id, "metarange")
    return [value_to_range_info(key, raw) for key, raw in items]


def iter_range_entries(namespace: str, settings: JobSettings, range_id: str) -> Iterator[tuple[bytes, Entry]]:
    """``(key, Entry)`` of every record of a range, in key order."""
    items, _size = graveler_files(namespace, settings).read_items(range_id, "range")
    for key, raw in items:
        _identity, data = decode_value(raw)
        yield key, decode_entry(data)


def split_full_address(address: str) -> tuple[str, str]:
    """``(directory URI, key)`` of a full physical address, split like the catalog does (at
    the last ``/``), e.g. ``s3://bucket/a/b.csv`` -> ``("s3://bucket/a", "b.csv")``."""
    directory, _, key = address.rpartition("/")
    scheme, sep, location = directory.partition("://")
    if not sep or not scheme or not location.strip("/") or not key:
        raise CorruptedData(f"entry has a malformed full address {address!r}")
    return directory, key


def locate_entry(namespace: str, s3: S3Config | None, entry: Entry) -> tuple[BlockAdapter, str]:
    """The adapter and key holding an entry's bytes (relative addresses live in the
    repository's namespace, full addresses anywhere)."""
    if not entry.address_is_full:
        return adapter_for(namespace, s3), entry.physical_address
    directory, key = split_full_address(entry.physical_address)
    return adapter_for(directory, s3), key
