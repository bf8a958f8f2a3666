"""On-disk layout of a disk cache directory: file names, entry naming and file cleanup.

Owns where things live in a cache directory and the filesystem helpers that create, list and
delete them; knows nothing of the index, the lock protocol or eviction (see ``disk``)::

    <dir>/lock              flock(2) target: every insert, eviction, drop, repair, counter flush
    <dir>/index.sqlite3     WAL SQLite (+ -wal/-shm): name -> (size, sha256), byte/entry totals
                            and the cumulative counters of every process that used the directory
    <dir>/tmp/              fetches land here first (same filesystem, so the rename is atomic)
    <dir>/<name[:2]>/<name> the cached files (shard directories keep directories small)

Entry names are single safe path components (``check_cache_name``).  Temporary files nobody has
written for ``TMP_MAX_AGE_SECONDS`` are left by crashed fetches and deleted by ``clean_tmp``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import time
from contextlib import suppress

from lakefuse.errors import InvalidArgument

MAX_NAME_LENGTH = 255
LOCK_FILE = "lock"
INDEX_FILE = "index.sqlite3"
TMP_DIR = "tmp"
TMP_MAX_AGE_SECONDS = 3600.0

_NAME_RE = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]*\Z")
_SHARD_RE = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]?\Z")


def check_cache_name(name: str) -> str:
    """Return ``name`` if it is a safe single path component for a cache entry.

    Allowed: ASCII letters, digits, ``_ - .``, 1-255 characters, not starting with ``.``
    (which also rules out ``.`` and ``..``).  Raises ``InvalidArgument`` otherwise.
    """
    if not isinstance(name, str):
        raise InvalidArgument(f"invalid cache entry name {name!r}: must be a string")
    if not name or len(name) > MAX_NAME_LENGTH or not _NAME_RE.match(name):
        raise InvalidArgument(
            f"invalid cache entry name {name!r}: use 1-{MAX_NAME_LENGTH} of [A-Za-z0-9_.-], not starting with '.'"
        )
    return name


def entry_path(root: str, name: str) -> str:
    """Path of the cached file ``name`` (already checked) in the cache directory ``root``."""
    return os.path.join(root, name[:2], name)


def new_tmp_path(tmp_dir: str) -> str:
    """A fresh, unique path in ``tmp_dir`` for a fetch to write to."""
    return os.path.join(tmp_dir, f"{os.getpid()}.{secrets.token_hex(8)}.tmp")


def scandir(path: str) -> list[os.DirEntry]:
    """Entries of ``path``; a missing directory has none."""
    try:
        with os.scandir(path) as it:
            return list(it)
    except FileNotFoundError:
        return []


def shard_dirs(root: str) -> list[str]:
    """Paths of the shard directories of the cache directory ``root``."""
    return [
        entry.path
        for entry in scandir(root)
        if _SHARD_RE.match(entry.name) and entry.is_dir(follow_symlinks=False)
    ]


def remove_entry(entry: os.DirEntry) -> None:
    """Delete a file, or a whole directory tree, ignoring what is already gone."""
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path, ignore_errors=True)
    else:
        with suppress(FileNotFoundError):
            os.unlink(entry.path)


def unlink_quietly(path: str) -> bool:
    """Delete ``path``; False if it was already gone."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def clean_tmp(tmp_dir: str) -> None:
    """Delete temporary files nobody has written for an hour (left by crashed fetches)."""
    cutoff = time.time() - TMP_MAX_AGE_SECONDS
    for entry in scandir(tmp_dir):
        with suppress(OSError):
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                remove_entry(entry)
