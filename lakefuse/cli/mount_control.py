"""``lakefuse commit PATH_IN_MOUNT -m MSG``: commit through a live lakefuse mount.

The mount owns the files being written through it, so the mount must commit (it uploads them
first).  The protocol is the mount's control file ``<branch dir>/.lakefuse/commit`` (see
``lakefuse.fs.filesystem``): write the message and close; close(2) fails with an errno when the
commit fails; reading the file then gives the new commit ID, or ``error: <reason>``.

The branch directory is found by walking up from the given path to the first directory with a
``.lakefuse/commit`` and ``.lakefuse/head`` (the control directory is hidden from readdir but
answers lookups), stopping at the mount point.  A path inside a tag, commit or
ref-expression directory of a mount is ``ReadOnly`` (exit 10), like ``lakefs://`` URIs of
those refs.  The errno maps back to the error kind through the ``errno`` attributes of
``lakefuse.errors``, so the exit code is what the same failure gives through ``lakefs://``
(EIO is reported as a storage failure).
"""

from __future__ import annotations

import errno
import os
import re

from lakefuse.errors import (
    AlreadyExists,
    Conflict,
    HookFailed,
    InvalidArgument,
    LakefuseError,
    NoChanges,
    NotFound,
    ReadOnly,
    StorageError,
)
from lakefuse.fuse.mountinfo import mounted_at

CONTROL_DIR = ".lakefuse"
COMMIT_FILE = "commit"
HEAD_FILE = "head"
ERROR_PREFIX = "error:"
_COMMIT_ID_RE = re.compile(r"^[0-9a-f]{64}$")

ERRNO_ERRORS: dict[int, type[LakefuseError]] = {
    errno.ENODATA: NoChanges,
    errno.EPERM: HookFailed,
    errno.EBUSY: Conflict,
    errno.EINVAL: InvalidArgument,
    errno.ENAMETOOLONG: InvalidArgument,
    errno.ENOENT: NotFound,
    errno.EEXIST: AlreadyExists,
    errno.EROFS: ReadOnly,
    errno.EACCES: ReadOnly,
    errno.EIO: StorageError,
}


def _is_branch_dir(directory: str) -> bool:
    control = os.path.join(directory, CONTROL_DIR)
    return os.path.isfile(os.path.join(control, COMMIT_FILE)) and os.path.isfile(os.path.join(control, HEAD_FILE))


def find_branch_dir(path: str, home: str | os.PathLike | None = None) -> str:
    """The directory of the branch ``path`` is in.  ``ReadOnly`` if it is in a tag, commit or
    ref-expression directory of a mount instead; else InvalidArgument.  ``home``: where the
    mounts' status files are (``lakefuse.fuse.status``), to know the layout of the mount."""
    if not os.path.exists(path):
        raise InvalidArgument(f"{path}: no such file or directory (expected lakefs://REPO/BRANCH or a path in a mount)")
    current = start = os.path.abspath(path)
    if not os.path.isdir(current):
        current = start = os.path.dirname(current)
    while True:
        if _is_branch_dir(current):
            return current
        parent = os.path.dirname(current)
        if parent == current or os.path.ismount(current):
            break
        current = parent
    found = read_only_ref_dir(start, home)
    if found is not None:
        name, kind = found
        raise ReadOnly(f"{path}: inside {kind} {name!r} of a lakefuse mount, not a branch: read-only "
                       "(commit on a branch)")
    raise InvalidArgument(f"{path}: not a lakefs:// URI and not inside a branch of a lakefuse mount")


def ref_kind(name: str) -> str:
    """What a ref directory that is not a branch shows, from its name: ``ref expression``
    (``~``/``^``), ``commit`` (hex: branch and tag names never are) or ``tag``."""
    if "~" in name or "^" in name:
        return "ref expression"
    if re.fullmatch(r"[0-9a-f]{4,64}", name):
        return "commit"
    return "tag"


def _mount_point_of(directory: str) -> str | None:
    current = directory
    while True:
        if os.path.ismount(current):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def is_lakefuse_mount(mountpoint: str) -> bool:
    """Whether the filesystem mounted at ``mountpoint`` is a lakefuse mount (``fuse.lakefuse``
    in /proc/self/mountinfo)."""
    info = mounted_at(mountpoint)
    return info is not None and info.fstype == "fuse.lakefuse"


def read_only_ref_dir(directory: str, home: str | os.PathLike | None = None) -> tuple[str, str] | None:
    """``(name, kind)`` of the tag, commit or ref-expression directory of a lakefuse mount that
    ``directory`` is in or is, else None (not in a mount, a repository directory, the root...).

    The mount's status file gives its layout (which path level holds the refs).  Without one,
    a directory counts as a ref directory when a sibling is a branch directory (a repository
    directory always shows its default branch)."""
    mountpoint = _mount_point_of(directory)
    if mountpoint is None or not is_lakefuse_mount(mountpoint):
        return None
    relative = os.path.relpath(directory, mountpoint)
    parts = [] if relative == "." else relative.split(os.sep)
    status = None
    if home is not None:
        from lakefuse.fuse.status import status_of_mountpoint

        status = status_of_mountpoint(home, mountpoint)
    if status is not None and status.get("state") == "mounted":
        layout = status.get("layout")
        if layout == "ref":
            ref = str(status.get("ref") or "")
            return (ref, ref_kind(ref)) if ref and not _is_branch_dir(mountpoint) else None
        level = {"all": 1, "repository": 0}.get(layout)
        if level is None or len(parts) <= level:
            return None
        name = parts[level]
        ref_dir = os.path.join(mountpoint, *parts[:level + 1])
        return None if _is_branch_dir(ref_dir) else (name, ref_kind(name))
    current = directory
    while current != mountpoint:
        parent = os.path.dirname(current)
        try:
            siblings = [entry.path for entry in os.scandir(parent) if entry.is_dir()]
        except OSError:
            return None
        if any(_is_branch_dir(sibling) for sibling in siblings if sibling != current):
            name = os.path.basename(current)
            return name, ref_kind(name)
        current = parent
    return None


def error_for(code: int | None, reason: str) -> LakefuseError:
    return ERRNO_ERRORS.get(code, StorageError)(reason)


def _read_result(control_file: str) -> str:
    try:
        with open(control_file, "rb") as handle:
            return handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


def commit_in_mount(branch_dir: str, message: str) -> str:
    """Commit the branch mounted at ``branch_dir`` with ``message``; the new commit ID."""
    control_file = os.path.join(branch_dir, CONTROL_DIR, COMMIT_FILE)
    data = message.encode("utf-8")
    try:
        fd = os.open(control_file, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        raise error_for(exc.errno, f"{control_file}: {exc.strerror}") from None
    try:
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
    except OSError as exc:
        os.close(fd)
        raise error_for(exc.errno, f"{control_file}: {exc.strerror}") from None
    try:
        os.close(fd)  # the mount commits here
    except OSError as exc:
        result = _read_result(control_file)
        reason = result[len(ERROR_PREFIX):].strip() if result.startswith(ERROR_PREFIX) else ""
        raise error_for(exc.errno, reason or f"commit of {branch_dir} failed: {exc.strerror}") from None
    result = _read_result(control_file)
    if result.startswith(ERROR_PREFIX):
        raise StorageError(result[len(ERROR_PREFIX):].strip() or f"commit of {branch_dir} failed")
    if not _COMMIT_ID_RE.match(result):
        raise StorageError(f"{control_file}: unexpected answer {result[:80]!r} (is this a lakefuse mount?)")
    return result


def commit_mount_path(ctx, args) -> int:
    """``lakefuse commit PATH -m MSG`` for a path inside a mount."""
    unsupported = [name for name, given in (("--meta", args.meta), ("--committer", args.committer),
                                            ("--allow-empty", args.allow_empty)) if given]
    if unsupported:
        raise InvalidArgument(
            f"{', '.join(unsupported)}: not available when committing through a mount path; "
            "use lakefs://REPO/BRANCH")
    try:
        home = ctx.config().home  # where mounts write their status files
    except LakefuseError:
        home = None
    branch_dir = find_branch_dir(args.branch, home)
    commit_id = commit_in_mount(branch_dir, args.message)
    if args.json:
        from lakefuse.cli.output import write_json

        write_json({"id": commit_id, "branch_dir": branch_dir})
        return 0
    ctx.out.write(f"Committed {branch_dir}: {commit_id}\n")
    return 0
