"""What the kernel says is mounted where: /proc/self/mountinfo, read without touching any mount
(a hung FUSE mount would block a stat of its mount point), and whether a process is alive.

Imports nothing heavy, so the CLI uses it as well as the FUSE adapter.
"""

from __future__ import annotations

import os
from typing import NamedTuple

MOUNTINFO = "/proc/self/mountinfo"


class MountInfo(NamedTuple):
    device: str  # major:minor
    mountpoint: str
    fstype: str  # e.g. fuse.lakefuse


def unescape(field: str) -> str:
    """A mountinfo field with its octal escapes (``\\040`` for a space) decoded."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounted_at(mountpoint: str) -> MountInfo | None:
    """The filesystem mounted at ``mountpoint`` (the last one mounted there), or None."""
    target = os.path.realpath(mountpoint)
    found = None
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as mountinfo:
            for line in mountinfo:
                fields = line.split()
                if len(fields) > 4 and unescape(fields[4]) == target:
                    after = line.split(" - ", 1)
                    fstype = after[1].split()[0] if len(after) == 2 and after[1].split() else ""
                    found = MountInfo(fields[2], target, fstype)
    except OSError:
        return None
    return found


def process_alive(pid: object) -> bool:
    """Whether ``pid`` (any value) names a live process."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
