"""The POSIX attributes an object's entry carries in its user metadata: the one definition of
the keys, their text encoding, and what an entry without them means.  Shared by the mount
(``lakefuse.fs``), the CLI (``fs stat``, ``fs ls``, ``diff``), import and export.

Every key is optional and its value is plain ASCII text, except a link target (UTF-8):

==================  ==============================================================================
key                 meaning
==================  ==============================================================================
lakefuse-mode       permission bits with set-user-ID, set-group-ID and sticky, octal (``4755``)
lakefuse-type       ``symlink``, ``fifo``, ``socket``, ``char`` or ``block``; absent: a regular
                    file (or, for a ``dir/`` marker, the directory)
lakefuse-target     a symbolic link's target; the object's bytes are the target too
lakefuse-rdev       a device's numbers, ``MAJOR:MINOR``
lakefuse-uid        owner, decimal
lakefuse-gid        group, decimal
lakefuse-mtime-ns   modification time in nanoseconds (kept only while it agrees with the entry's
                    own mtime in seconds)
lakefuse-atime-ns   access time in nanoseconds; absent: the modification time
lakefuse-ctime-ns   status change time in nanoseconds; absent: the modification time
==================  ==============================================================================

An entry without any of them (written before lakefuse kept them, by the CLI, Spark or any
lakeFS client) is a regular file (or a directory marker) with the default mode, owned by
whoever the reader says owns such entries (the mount: the mounting user or ``--uid/--gid``),
whose three times are its mtime.  Values that do not parse are ignored the same way.
"""

from __future__ import annotations

import os
import stat as stat_mode
from typing import Mapping

MODE_KEY = "lakefuse-mode"
TYPE_KEY = "lakefuse-type"
TARGET_KEY = "lakefuse-target"
RDEV_KEY = "lakefuse-rdev"
UID_KEY = "lakefuse-uid"
GID_KEY = "lakefuse-gid"
MTIME_NS_KEY = "lakefuse-mtime-ns"
ATIME_NS_KEY = "lakefuse-atime-ns"
CTIME_NS_KEY = "lakefuse-ctime-ns"

#: every key above: user metadata lakefuse keeps for itself (not shown or settable as user.*)
POSIX_KEYS = (MODE_KEY, TYPE_KEY, TARGET_KEY, RDEV_KEY, UID_KEY, GID_KEY, MTIME_NS_KEY, ATIME_NS_KEY,
              CTIME_NS_KEY)

SYMLINK = "symlink"
#: ``lakefuse-type`` value -> the S_IFMT bits of st_mode
FORMAT_OF_TYPE = {
    SYMLINK: stat_mode.S_IFLNK,
    "fifo": stat_mode.S_IFIFO,
    "socket": stat_mode.S_IFSOCK,
    "char": stat_mode.S_IFCHR,
    "block": stat_mode.S_IFBLK,
}
TYPE_OF_FORMAT = {fmt: name for name, fmt in FORMAT_OF_TYPE.items()}
#: S_IFMT bits -> the word ``ls``-like listings print
FORMAT_NAMES = {stat_mode.S_IFREG: "file", stat_mode.S_IFDIR: "directory", **TYPE_OF_FORMAT}
DEVICE_FORMATS = (stat_mode.S_IFCHR, stat_mode.S_IFBLK)
NS = 1_000_000_000


def file_format(metadata: Mapping[str, str] | None) -> int:
    """The S_IFMT bits of a non-directory entry: S_IFREG unless ``lakefuse-type`` says otherwise."""
    if metadata:
        kind = metadata.get(TYPE_KEY)
        if kind is not None:
            return FORMAT_OF_TYPE.get(kind, stat_mode.S_IFREG)
    return stat_mode.S_IFREG


def permissions(metadata: Mapping[str, str] | None, default: int) -> int:
    """The permission bits (0o7777) of ``lakefuse-mode``, else ``default``."""
    if metadata:
        value = metadata.get(MODE_KEY)
        if value is not None:
            try:
                return int(value, 8) & 0o7777
            except ValueError:
                pass
    return default


def _number(metadata: Mapping[str, str] | None, key: str) -> int | None:
    if metadata:
        value = metadata.get(key)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                pass
    return None


def time_ns(metadata: Mapping[str, str] | None, key: str, default: int) -> int:
    """The time in ns stored under ``key`` (``ATIME_NS_KEY``, ``CTIME_NS_KEY``), else ``default``."""
    value = _number(metadata, key)
    return default if value is None else value


def owner(metadata: Mapping[str, str] | None) -> tuple[int | None, int | None]:
    """``(uid, gid)`` stored in the metadata; None for what is not stored."""
    return _number(metadata, UID_KEY), _number(metadata, GID_KEY)


def mtime_ns(metadata: Mapping[str, str] | None, mtime_seconds: int) -> int:
    """The modification time in ns: ``lakefuse-mtime-ns`` if it agrees with the entry's mtime
    in seconds (an older writer may have changed the mtime without it), else those seconds."""
    precise = _number(metadata, MTIME_NS_KEY)
    if precise is not None and precise // NS == mtime_seconds:
        return precise
    return mtime_seconds * NS


def times_ns(metadata: Mapping[str, str] | None, mtime_seconds: int) -> tuple[int, int, int]:
    """``(atime, mtime, ctime)`` in ns; atime and ctime default to the mtime."""
    mtime = mtime_ns(metadata, mtime_seconds)
    atime = _number(metadata, ATIME_NS_KEY)
    ctime = _number(metadata, CTIME_NS_KEY)
    return (mtime if atime is None else atime), mtime, (mtime if ctime is None else ctime)


def rdev(metadata: Mapping[str, str] | None) -> int:
    """A device entry's st_rdev (0 when none is stored)."""
    value = metadata.get(RDEV_KEY) if metadata else None
    if value:
        major, sep, minor = value.partition(":")
        try:
            if sep:
                return os.makedev(int(major), int(minor))
        except (ValueError, OverflowError):
            pass
    return 0


def symlink_target(metadata: Mapping[str, str] | None) -> str | None:
    """The target of a symbolic link entry (None for anything else, or a link without one)."""
    if metadata and metadata.get(TYPE_KEY) == SYMLINK:
        return metadata.get(TARGET_KEY)
    return None


def special_metadata(fmt: int, *, target: str | None = None, device: int = 0) -> dict[str, str]:
    """The keys that make an entry a symbolic link (``target``), a FIFO, a socket or a device
    (``device``: st_rdev); none for a regular file."""
    kind = TYPE_OF_FORMAT.get(fmt)
    if kind is None:
        return {}
    out = {TYPE_KEY: kind}
    if kind == SYMLINK:
        out[TARGET_KEY] = target or ""
    if fmt in DEVICE_FORMATS:
        out[RDEV_KEY] = f"{os.major(device)}:{os.minor(device)}"
    return out


def set_time(metadata: dict[str, str], key: str, value_ns: int | None, mtime_ns_value: int) -> None:
    """Store atime or ctime ``value_ns`` under ``key``, or drop the key when the value is the
    mtime (what an absent key means): entries stay as small as they can."""
    if value_ns is None or value_ns == mtime_ns_value:
        metadata.pop(key, None)
    else:
        metadata[key] = str(value_ns)


def describe(metadata: Mapping[str, str] | None, *, is_dir: bool = False) -> dict[str, object]:
    """What the POSIX keys of an entry say, for listings and ``stat`` (only what is stored:
    ``type`` always, ``mode``/``uid``/``gid``/``target``/``rdev``/times when present)."""
    fmt = stat_mode.S_IFDIR if is_dir else file_format(metadata)
    out: dict[str, object] = {"type": FORMAT_NAMES.get(fmt, "file")}
    if metadata and MODE_KEY in metadata:
        out["mode"] = format(permissions(metadata, 0), "04o")
    uid, gid = owner(metadata)
    if uid is not None:
        out["uid"] = uid
    if gid is not None:
        out["gid"] = gid
    target = symlink_target(metadata)
    if target is not None:
        out["target"] = target
    if fmt in DEVICE_FORMATS:
        device = rdev(metadata)
        out["rdev"] = f"{os.major(device)}:{os.minor(device)}"
    for key, name in ((ATIME_NS_KEY, "atime_ns"), (CTIME_NS_KEY, "ctime_ns"), (MTIME_NS_KEY, "mtime_ns")):
        value = _number(metadata, key)
        if value is not None:
            out[name] = value
    return out


def mode_string(fmt: int, perms: int) -> str:
    """``ls -l``'s mode column, e.g. ``lrwxrwxrwx`` or ``-rwsr-xr-x``."""
    return stat_mode.filemode(fmt | perms)
