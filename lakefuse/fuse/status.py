"""The status file of a mount: ``$LAKEFUSE_HOME/mounts/<mount point>.json``.

A mount writes it once it answers requests, again (at most every ``STATUS_INTERVAL_SECONDS``)
when its error counters change, and a last time at unmount (``"mounted": false``), always by
an atomic rename.  It says what is mounted where (``uri``, ``repository``, ``ref``, ``layout``:
``all``, ``repository`` or ``ref``), by which process (``pid``, ``log_file``), and how many
requests the mount answered with each errno, per operation (``errors``:
``{"read": {"EIO": 2}}``).  ``lakefuse mounts`` shows these files, and ``lakefuse commit
MOUNT_PATH`` reads the layout to tell a tag or commit directory from anything else.

No pyfuse3 or trio here: the CLI reads these files without the FUSE libraries.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import tempfile
import time
from pathlib import Path

from lakefuse.fuse.mountinfo import process_alive

STATUS_DIR = "mounts"
STATUS_INTERVAL_SECONDS = 1.0


def status_dir(home: str | os.PathLike) -> Path:
    return Path(home) / STATUS_DIR


def status_path(home: str | os.PathLike, mountpoint: str) -> Path:
    """The status file of ``mountpoint``: its path made a file name, plus a short digest of it
    so ``/a/b`` and ``/a_b`` do not share one."""
    mountpoint = os.path.abspath(mountpoint)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", mountpoint.strip("/")) or "root"
    digest = hashlib.sha256(mountpoint.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return status_dir(home) / f"{name[:100]}-{digest}.json"


def layout_of(repository: str | None, ref: str | None) -> str:
    """What the root of a mount shows: ``all`` repositories, one ``repository`` or one ``ref``."""
    if repository is None:
        return "all"
    return "repository" if ref is None else "ref"


def errno_name(code: int) -> str:
    return errno.errorcode.get(code, str(code))


def named_counts(errors: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    """``{"read": {5: 2}}`` -> ``{"read": {"EIO": 2}}``, operations and errnos sorted."""
    return {operation: {errno_name(code): count for code, count in sorted(counts.items())}
            for operation, counts in sorted(errors.items()) if counts}


def format_counts(errors: dict[str, dict]) -> str:
    """``read: EIO 2; lookup: ENOENT 5`` (errnos as ints or names), or ``none``."""
    parts = []
    for operation, counts in sorted(errors.items()):
        if counts:
            listed = ", ".join(f"{code if isinstance(code, str) else errno_name(code)} {count}"
                               for code, count in sorted(counts.items(), key=lambda item: str(item[0])))
            parts.append(f"{operation}: {listed}")
    return "; ".join(parts) or "none"


class MountStatusFile:
    """Writes the status file of one mount (``info``: the fixed part)."""

    def __init__(self, home: str | os.PathLike, mountpoint: str, info: dict):
        self.path = status_path(home, mountpoint)
        self.info = {"mountpoint": os.path.abspath(mountpoint), "pid": os.getpid(),
                     "started_at": time.time(), **info}

    def write(self, *, mounted: bool, errors: dict[str, dict[int, int]]) -> None:
        data = {**self.info, "mounted": mounted, "updated_at": time.time(), "errors": named_counts(errors)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2, sort_keys=True)
                handle.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


def read_status(path: str | os.PathLike) -> dict | None:
    """One status file with its ``state``: ``mounted`` (the process is alive and says so),
    ``unmounted`` (it ended cleanly) or ``gone`` (it died without saying); None if unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("mountpoint"), str):
        return None
    if not data.get("mounted"):
        data["state"] = "unmounted"
    else:
        data["state"] = "mounted" if process_alive(data.get("pid")) else "gone"
    data.setdefault("errors", {})
    return data


def read_statuses(home: str | os.PathLike) -> list[dict]:
    """Every readable status file under ``home``, by mount point."""
    directory = status_dir(home)
    if not directory.is_dir():
        return []
    found = (read_status(path) for path in sorted(directory.glob("*.json")))
    return sorted((status for status in found if status is not None), key=lambda s: s["mountpoint"])


def status_of_mountpoint(home: str | os.PathLike, mountpoint: str) -> dict | None:
    status = read_status(status_path(home, mountpoint))
    if status is None or status["mountpoint"] != os.path.abspath(mountpoint):
        return None
    return status
