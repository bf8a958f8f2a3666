"""``lakefuse commit PATH_IN_MOUNT -m MSG``: commit through a live lakefuse mount.

The mount owns the files being written through it, so the mount must commit (it uploads them
first).  The protocol is the mount's control file ``<branch dir>/.lakefuse/commit`` (see
``lakefuse.fs.filesystem``): write the message and close; close(2) fails with an errno when the
commit fails; reading the file then gives the new commit ID, or ``error: <reason>``.

The branch directory is found by walking up from the given path to the first directory with a
``.lakefuse/commit`` and ``.lakefuse/head`` (the control directory is hidden from readdir but
answers lookups), stopping at the mount point.  The errno maps back to the error kind through
the ``errno`` attributes of ``lakefuse.errors``, so the exit code is what the same failure gives
through ``lakefs://`` (EIO is reported as a storage failure).
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


def find_branch_dir(path: str) -> str:
    """The directory of the branch ``path`` is in (InvalidArgument if none)."""
    if not os.path.exists(path):
        raise InvalidArgument(f"{path}: no such file or directory (expected lakefs://REPO/BRANCH or a path in a mount)")
    current = os.path.abspath(path)
    if not os.path.isdir(current):
        current = os.path.dirname(current)
    while True:
        control = os.path.join(current, CONTROL_DIR)
        if os.path.isfile(os.path.join(control, COMMIT_FILE)) and os.path.isfile(os.path.join(control, HEAD_FILE)):
            return current
        parent = os.path.dirname(current)
        if parent == current or os.path.ismount(current):
            break
        current = parent
    raise InvalidArgument(f"{path}: not a lakefs:// URI and not inside a branch of a lakefuse mount")


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
    branch_dir = find_branch_dir(args.branch)
    commit_id = commit_in_mount(branch_dir, args.message)
    if args.json:
        from lakefuse.cli.output import write_json

        write_json({"id": commit_id, "branch_dir": branch_dir})
        return 0
    ctx.out.write(f"Committed {branch_dir}: {commit_id}\n")
    return 0
