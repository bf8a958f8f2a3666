"""The one exception tree of lakefuse.

Every error a user can see is a ``LakefuseError`` subclass.  Each class carries the errno a
filesystem call should answer with and the exit code the CLI should end with, so the two
boundaries (``lakefuse.cli`` and the FUSE adapter) translate an error exactly once, by looking
at these two attributes, and never by matching message text.

Exit codes are distinct per kind of error so scripts can tell them apart:

====  ==========================================
 1    unexpected internal error (a bug)
 2    bad usage / invalid argument / bad config
 3    not found (repository, ref, object)
 4    already exists
 5    conflict (merge conflict, concurrent update)
 6    no changes
 7    dirty branch (uncommitted changes)
 8    hook / action failed
 9    storage backend failure
10    read-only (tag, commit, read-only mount)
11    corrupted data (checksum mismatch)
12    mount point in use (already a mount point, or not empty)
====  ==========================================
"""

from __future__ import annotations

import errno as _errno


class LakefuseError(Exception):
    """Base of every user-visible lakefuse error."""

    errno: int = _errno.EIO
    exit_code: int = 1

    def __init__(self, message: str = "", **details):
        super().__init__(message or self.__class__.__doc__ or self.__class__.__name__)
        self.details = details

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgument(LakefuseError):
    """Invalid argument."""

    errno = _errno.EINVAL
    exit_code = 2


class ConfigError(InvalidArgument):
    """Invalid configuration."""


class InvalidName(InvalidArgument):
    """Invalid name."""


class NameTooLong(InvalidArgument):
    """Name too long."""

    errno = _errno.ENAMETOOLONG


class NotFound(LakefuseError):
    """Not found."""

    errno = _errno.ENOENT
    exit_code = 3


class RepositoryNotFound(NotFound):
    """Repository not found."""


class RefNotFound(NotFound):
    """Reference not found."""


class ObjectNotFound(NotFound):
    """Object not found."""


class AlreadyExists(LakefuseError):
    """Already exists."""

    errno = _errno.EEXIST
    exit_code = 4


class Conflict(LakefuseError):
    """Conflict."""

    errno = _errno.EBUSY
    exit_code = 5


class MergeConflict(Conflict):
    """Merge conflict."""

    def __init__(self, message: str = "", conflicts=(), **details):
        super().__init__(message, **details)
        self.conflicts = list(conflicts)


class ConcurrentUpdate(Conflict):
    """The branch moved while this operation ran; retry."""


class AmbiguousRef(InvalidArgument):
    """Ambiguous reference."""

    def __init__(self, message: str = "", candidates=(), **details):
        super().__init__(message, **details)
        self.candidates = list(candidates)


class NoChanges(LakefuseError):
    """No changes."""

    errno = _errno.ENODATA
    exit_code = 6


class DirtyBranch(LakefuseError):
    """Branch has uncommitted changes."""

    errno = _errno.EBUSY
    exit_code = 7


class HookFailed(LakefuseError):
    """A hook failed."""

    errno = _errno.EPERM
    exit_code = 8


class StorageError(LakefuseError):
    """Object storage failure."""

    errno = _errno.EIO
    exit_code = 9


class ReadOnly(LakefuseError):
    """Read-only reference."""

    errno = _errno.EROFS
    exit_code = 10


class CorruptedData(LakefuseError):
    """Corrupted data."""

    errno = _errno.EIO
    exit_code = 11


class MountPointInUse(LakefuseError):
    """The mount point is in use: already a mount point, or a directory that is not empty."""

    errno = _errno.EBUSY
    exit_code = 12
