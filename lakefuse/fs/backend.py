"""The narrow interface ``lakefuse.fs`` needs from the rest of lakefuse, and nothing more.

``LakeBackend`` is what a mounted filesystem asks of the core: list repositories and refs,
resolve a ref expression (``MountRef``), stat and list the objects of a ref (staged + committed for a branch),
upload a local file into a branch, stage entries (renames, deletions, metadata changes), commit,
list uncommitted changes, and open an object's data for reading.

Two implementations: ``lakefuse.fs.memory.MemoryBackend`` (a small in-memory twin for unit tests
without a kernel or a database) and ``lakefuse.fs.app_backend.AppBackend`` (the real core through
the composition root ``lakefuse.app``).  Every method is synchronous, may block (database,
object storage), must be thread-safe, and raises only ``lakefuse.errors`` exceptions.

Keys are ``str`` object paths (UTF-8 in the core); a key ending in ``/`` is a directory marker.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, NamedTuple, Protocol, Sequence

from lakefuse.graveler.model import Entry


class MountRefKind(str, enum.Enum):
    """What a name under a repository directory is, as far as a mount cares: a branch (live
    and writable), a tag, or anything else that names one commit.  Coarser than the core's
    ``lakefuse.graveler.refexpr.RefKind``, which tells commit IDs from ``~``/``^`` expressions."""

    BRANCH = "branch"
    TAG = "tag"
    COMMIT = "commit"  # a commit ID, a unique prefix of one, or any ref expression


@dataclass(frozen=True, slots=True)
class MountRef:
    """What a name under a repository directory points at.  Not the core's
    ``lakefuse.graveler.refexpr.ResolvedRef`` (which holds the ``Commit`` and ``Branch``
    records): a flat, hashable value a backend can build from any source, and all a tree
    keeps of its ref (its name as looked up, its commit, that commit's time)."""

    kind: MountRefKind
    name: str  # as looked up: branch or tag name, ref expression or commit ID
    commit_id: str  # for a branch: its head when resolved
    commit_time: int = 0  # creation date of that commit (seconds since the epoch)

    @property
    def is_branch(self) -> bool:
        return self.kind is MountRefKind.BRANCH


class ListedItem(NamedTuple):
    """One row of a listing: an object (``entry``), or a common prefix (``key`` ends with the
    delimiter; ``entry`` is the directory's marker object ``key`` if there is one and the
    backend says so, else None).  A tuple: one is made per listed object."""

    key: str
    entry: Entry | None


class ChangeKind(str, enum.Enum):
    ADDED = "+"
    CHANGED = "~"
    REMOVED = "-"


@dataclass(frozen=True, slots=True)
class UncommittedChange:
    """One line of ``.lakefuse/status``: a key the branch's staging area changes.  Not the
    core's ``lakefuse.graveler.graveler.Change`` (a byte key with both sides' records): only
    what the status file shows."""

    kind: ChangeKind
    key: str


class DataReader(Protocol):
    """Random access to one immutable object's bytes; thread-safe."""

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (short only at the end of the object)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class InPlaceObjects:
    """Where a file made becomes a new object of one repository right where it lies
    (``LakeBackend.in_place_objects``): a file named ``new_name()`` in ``directory`` is the
    object at address ``prefix`` + that name once ``store_in_place`` gives it an entry; nothing
    else may use the name meanwhile."""

    directory: str
    prefix: str
    new_name: Callable[[], str]


class LakeBackend(Protocol):
    def list_repositories(self) -> list[str]: ...

    def repository_exists(self, repo: str) -> bool: ...

    def list_refs(self, repo: str) -> list[MountRef]:
        """Every branch and tag of the repository (``commit_time`` may be 0: unknown).
        Raises RepositoryNotFound."""

    def resolve_ref(self, repo: str, ref: str) -> MountRef:
        """A branch, a tag, a commit ID (or unique prefix) or a ref expression (``main~2``).
        Raises RepositoryNotFound, RefNotFound, AmbiguousRef, InvalidArgument."""

    def get_entry(self, repo: str, ref: MountRef, key: str) -> Entry | None:
        """The object at ``key``; for a branch the live state (staging over its head)."""

    # optional: ``get_entry_or_child(repo, ref, key) -> (entry, None) | (None, first item under
    # key + "/") | (None, None)``, both questions of a lookup in one read (``Tree.stat``)

    def list_entries(self, repo: str, ref: MountRef, prefix: str, after: str = "", limit: int = 1000,
                     delimiter: str = "/") -> list[ListedItem]:
        """Up to ``limit`` items with key starting with ``prefix`` and greater than ``after``,
        in key order.  With a delimiter, keys with a delimiter after the prefix collapse into
        one common prefix (``prefix + part + delimiter``, with the entry of the marker object of
        that name when one exists: a directory's mode, owner and times); ``after`` may be such a
        prefix, then everything under it is skipped.  ``delimiter=""`` lists recursively."""

    def upload_file(self, repo: str, branch: str, key: str, path: str, *, mtime: int,
                    metadata: Mapping[str, str], content_type: str | None = None,
                    checksum: str | None = None, move: bool = False, durable: bool = True) -> Entry:
        """Store the local file's bytes as a new object and stage it at ``key``; the entry.
        ``checksum``: the file's ``content_hasher()`` hex digest if the caller has it (then the
        file is not read again); ``move``: the file may be moved into storage rather than
        copied, and is gone once this returns; ``durable=False``: the bytes need survive only a
        crash of this process, not of the machine, until the next ``sync`` or commit."""

    def store_file(self, repo: str, path: str, *, mtime: int, metadata: Mapping[str, str],
                   content_type: str | None = None, checksum: str | None = None, move: bool = False,
                   durable: bool = True, source_fd: int | None = None) -> Entry:
        """Like ``upload_file``, staging nothing: the entry of the new object, for
        ``stage_entries``.  ``source_fd``: a descriptor of ``path`` the caller holds open (and
        closes), so storage on this machine need not open the file again."""

    def in_place_objects(self, repo: str) -> InPlaceObjects | None:
        """Where files may be made that become the repository's objects where they lie (its
        storage is a local directory), so a written file is stored with no move or copy; None
        if its storage offers no such place."""

    def store_in_place(self, repo: str, address: str, fd: int, *, checksum: str, mtime: int,
                       metadata: Mapping[str, str], content_type: str | None = None,
                       durable: bool = True) -> Entry:
        """The entry of the new object at ``address``: a file made as ``in_place_objects``
        says and written there, open as ``fd`` (the caller's), with the given ``checksum``;
        nothing moved, copied or staged.  ``ObjectNotFound`` if the file was deleted meanwhile."""

    def sync(self, repo: str) -> None:
        """Make everything stored and staged in the repository so far durable (fsync(2))."""

    def content_hasher(self):
        """A new hashlib-like hasher whose ``hexdigest()`` of an object's bytes is its checksum."""

    def stores_locally(self, repo: str) -> bool:
        """Whether the repository's objects live on this machine, so a written file is best
        hashed while written and moved into storage at close (``upload_file(checksum=...,
        move=True)``) rather than streamed there while written (``upload_stream``)."""

    # optional: a backend with ``upload_stream`` gets big sequential writes to repositories not
    # ``stores_locally`` streamed while they are written (see ``lakefuse.fs.spool.SpoolTail``)
    def upload_stream(self, repo: str, branch: str, key: str, stream, *, mtime: int,
                      metadata: Mapping[str, str], content_type: str | None = None) -> Entry:
        """Like ``upload_file``, reading a binary stream (``read(n)``) until it returns b""."""

    def stage_entries(self, repo: str, branch: str, items: Sequence[tuple[str, Entry | None]],
                      deleted_exist: bool = False) -> None:
        """Stage entries (``None`` deletes) in one transaction: all or nothing.  A deletion of
        a path that does not exist is skipped, unless ``deleted_exist`` (the caller just read
        them: no check; the deletion of a missing path is staged, which changes nothing)."""

    def commit(self, repo: str, branch: str, message: str) -> str:
        """Commit the branch's staged changes; the new commit ID.  NoChanges if none."""

    def branch_head(self, repo: str, branch: str) -> str: ...

    def list_changes(self, repo: str, branch: str, limit: int) -> list[UncommittedChange]:
        """Uncommitted changes of the branch, in key order, at most ``limit``."""

    def open_reader(self, repo: str, entry: Entry) -> DataReader: ...

    # refs a mount changes: branch directories (``lakefuse.fs.refdirs``) and the control files
    # ``merge``, ``tag``, ``branch`` and ``reset`` (``lakefuse.fs.refops``).  Each is the CLI's
    # operation (the same rules for names, the same errors, the same hooks and payloads)

    def default_branch(self, repo: str) -> str:
        """The repository's default branch.  Raises RepositoryNotFound."""

    def create_branch(self, repo: str, branch: str, source: str) -> MountRef:
        """``lakefuse branch create``: a new branch at the commit ``source`` resolves to.
        Raises InvalidName / NameTooLong, AlreadyExists (a branch or tag has the name),
        RefNotFound (``source``), HookFailed (pre-create-branch)."""

    def delete_branch(self, repo: str, branch: str) -> None:
        """``lakefuse branch delete``: the branch and its staged changes.  Raises
        InvalidArgument (the default branch), RefNotFound, HookFailed (pre-delete-branch)."""

    def create_tag(self, repo: str, tag: str, ref: str) -> str:
        """``lakefuse tag create``: tag the commit ``ref`` resolves to; that commit's ID.
        Raises InvalidName, AlreadyExists, RefNotFound, HookFailed (pre-create-tag)."""

    def merge(self, repo: str, dest: str, source: str, strategy: str | None) -> str:
        """``lakefuse merge``: merge the ref ``source`` into the branch ``dest`` (default
        message, the mount's committer); the merge commit's ID.  Raises DirtyBranch,
        NoChanges, MergeConflict (nothing written), InvalidArgument (``strategy``),
        RefNotFound, HookFailed (pre-merge)."""

    def reset(self, repo: str, branch: str, prefix: str | None) -> None:
        """``lakefuse branch reset``: drop the branch's staged changes, all of them (None) or
        those of keys starting with ``prefix``.  Raises RefNotFound."""

    def contained_elsewhere(self, repo: str, branch: str) -> bool:
        """Whether the branch's head commit is reachable from another branch or a tag (so
        deleting the branch loses no commit)."""

    # optional: a backend with ``local_file`` lets the kernel read such objects itself (FUSE
    # passthrough, see ``lakefuse.fs.passthrough``)
    def local_file(self, repo: str, entry: Entry) -> str | None:
        """The path of a local file that holds the object's bytes (its first ``entry.size``
        bytes: see ``lakefuse.fs.owned``), an object of a storage namespace on this machine, or
        None.  Committed objects never change."""

    # optional: deleting the object of an entry nothing references any more (lakefuse.fs.owned)
    def delete_data(self, repo: str, entry: Entry) -> None:
        """Delete the object ``entry`` names from the repository's storage."""

    # optional, the change feed: a backend with ``branch_changes`` lets a mount keep a branch's
    # metadata in the kernel for long and drop only what other writers changed
    def branch_changes(self, repo: str, branch: str, since: object | None) -> tuple[object, list[str] | None]:
        """``(cursor, keys)``: an opaque cursor of the branch's state now, and the keys that
        writers other than this backend changed (set or deleted) since the cursor ``since``;
        ``keys`` is None when anything may have changed: ``since`` is None, the branch's head
        moved (commit, merge, reset, revert), its staging area was dropped, or too many keys
        changed to list.  Raises RefNotFound once the branch is gone."""


def iter_listing(backend: LakeBackend, repo: str, ref: MountRef, prefix: str, *, delimiter: str = "/",
                 page: int = 1000) -> Iterable[ListedItem]:
    """Every item of a listing, fetched ``page`` at a time."""
    after = ""
    while True:
        items = backend.list_entries(repo, ref, prefix, after=after, limit=page, delimiter=delimiter)
        yield from items
        if len(items) < page:
            return
        after = items[-1].key
