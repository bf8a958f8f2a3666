"""``AppBackend``: the ``LakeBackend`` a real mount uses, over the composition root's
``Catalog`` (objects, uploads, commits) and ``Graveler`` (repositories, refs).

Owns the translation between the core's types and ``lakefuse.fs.backend``'s, and the choice of
how object bytes are read: straight from the file for a ``local`` storage namespace,
through the mount's ``BlockCache`` (with read-ahead) for anything remote.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from lakefuse.checksums import content_hasher
from lakefuse.config import committer_name
from lakefuse.errors import ObjectNotFound, RepositoryNotFound
from lakefuse.fs.backend import ChangeKind, InPlaceObjects, ListedItem, MountRef, MountRefKind, UncommittedChange
from lakefuse.fs.readers import BlockCache, LocalFileReader
from lakefuse.fs.replies import WouldBlock
from lakefuse.graveler.committed.encoding import record_to_entry
from lakefuse.graveler.model import Entry
from lakefuse.graveler.quick import NotQuick, quick_only

_KINDS = {"branch": MountRefKind.BRANCH, "tag": MountRefKind.TAG}
_CHANGES = {"added": ChangeKind.ADDED, "changed": ChangeKind.CHANGED, "removed": ChangeKind.REMOVED}


def _namespace_path(block, entry: Entry) -> str | None:
    """The file of an object of a ``local://`` storage namespace; None for other storage."""
    root = getattr(block, "root", None)
    if root is not None and block.uri.startswith("local://"):
        return os.path.join(root, entry.physical_address)
    return None


class AppBackend:
    def __init__(self, app, block_cache: BlockCache | None = None, committer: str | None = None):
        self.app = app
        self.catalog = app.catalog
        self.graveler = app.graveler
        self.block_cache = block_cache
        # the CLI's rule: $LAKEFUSE_USER, else user.name of the configuration, else the OS user
        self.committer = committer or committer_name(getattr(app, "config", None))

    # refs ------------------------------------------------------------------------------

    def list_repositories(self) -> list[str]:
        return sorted(repo.id for repo in self.catalog.list_repositories())

    def repository_exists(self, repo: str) -> bool:
        try:
            self.graveler.repository(repo)
            return True
        except RepositoryNotFound:
            return False

    def list_refs(self, repo: str) -> list[MountRef]:
        refs = [MountRef(MountRefKind.BRANCH, b.id, b.commit_id) for b in self.catalog.list_branches(repo)]
        refs += [MountRef(MountRefKind.TAG, tag, commit_id) for tag, commit_id in self.catalog.list_tags(repo)]
        return sorted(refs, key=lambda ref: ref.name)

    def resolve_ref(self, repo: str, ref: str) -> MountRef:
        resolved = self.catalog.resolve(repo, ref)
        kind = _KINDS.get(getattr(resolved.kind, "value", resolved.kind), MountRefKind.COMMIT)
        commit = resolved.commit
        return MountRef(kind, ref, commit.id, int(commit.creation_date))

    @staticmethod
    def _ref(ref: MountRef) -> str:
        # a branch is read live (staging over its current head); anything else by commit ID
        return ref.name if ref.is_branch else ref.commit_id

    # objects ---------------------------------------------------------------------------

    def get_entry(self, repo: str, ref: MountRef, key: str) -> Entry | None:
        try:
            return self.catalog.stat(repo, self._ref(ref), key)
        except ObjectNotFound:
            return None

    def get_entry_or_child(self, repo: str, ref: MountRef, key: str) -> tuple[Entry | None, ListedItem | None]:
        # one read of the branch (and one check that it did not move) where get_entry and
        # list_entries(key + "/", limit=1) made two: a lookup of a name memory cannot answer
        record, child = self.graveler.lookup_path(repo, self._ref(ref), key.encode(), (key + "/").encode())
        if record is not None:
            return record_to_entry(record), None
        if child is None:
            return None, None
        child_key, child_record = child
        return None, ListedItem(child_key.decode(), None if child_record is None else record_to_entry(child_record))

    def get_entry_or_child_quick(self, repo: str, ref: MountRef, key: str) -> tuple[Entry | None, ListedItem | None]:
        """``get_entry_or_child`` if memory and an embedded database answer it at once (a
        branch's staged rows in SQLite, ranges already decoded: ``lakefuse.graveler.quick``),
        else WouldBlock: on the event loop, where a hop to a worker thread costs more."""
        try:
            with quick_only():
                return self.get_entry_or_child(repo, ref, key)
        except NotQuick:
            raise WouldBlock from None

    def list_entries(self, repo: str, ref: MountRef, prefix: str, after: str = "", limit: int = 1000,
                     delimiter: str = "/") -> list[ListedItem]:
        # straight from the Graveler's records (what Catalog.list_objects does, minus its own
        # row objects): every cold stat and ls of a big directory pays this per entry
        page = self.graveler.list_objects(repo, self._ref(ref), prefix.encode(), delimiter.encode(),
                                          after.encode(), limit, markers=True)
        return [ListedItem(key.decode(), None if record is None else record_to_entry(record))
                for key, record in page.items]

    def upload_file(self, repo: str, branch: str, key: str, path: str, *, mtime: int,
                    metadata: Mapping[str, str], content_type: str | None = None,
                    checksum: str | None = None, move: bool = False, durable: bool = True) -> Entry:
        return self.catalog.upload_file(repo, branch, key, path, mtime=mtime, metadata=dict(metadata),
                                        content_type=content_type, checksum=checksum, move=move,
                                        durable=durable)

    def store_file(self, repo: str, path: str, *, mtime: int, metadata: Mapping[str, str],
                   content_type: str | None = None, checksum: str | None = None, move: bool = False,
                   durable: bool = True, source_fd: int | None = None) -> Entry:
        return self.catalog.store_file(repo, path, mtime=mtime, metadata=dict(metadata), content_type=content_type,
                                       checksum=checksum, move=move, durable=durable, source_fd=source_fd)

    def in_place_objects(self, repo: str) -> InPlaceObjects | None:
        site = self.catalog.in_place_site(repo)
        if site is None:
            return None
        directory, prefix = site
        new_address = self.catalog.new_address
        return InPlaceObjects(directory, prefix, lambda: new_address()[len(prefix):])

    def store_in_place(self, repo: str, address: str, fd: int, *, checksum: str, mtime: int,
                       metadata: Mapping[str, str], content_type: str | None = None,
                       durable: bool = True) -> Entry:
        return self.catalog.store_in_place(repo, address, fd, checksum=checksum, mtime=mtime, metadata=dict(metadata),
                                           content_type=content_type, durable=durable)

    def sync(self, repo: str) -> None:
        self.catalog.sync(repo)

    def content_hasher(self):
        return content_hasher()

    def stores_locally(self, repo: str) -> bool:
        return self.catalog.repository_block(repo).uri.startswith("local://")

    def upload_stream(self, repo: str, branch: str, key: str, stream, *, mtime: int,
                      metadata: Mapping[str, str], content_type: str | None = None) -> Entry:
        return self.catalog.upload_stream(repo, branch, key, stream, mtime=mtime, metadata=dict(metadata),
                                          content_type=content_type)

    def stage_entries(self, repo: str, branch: str, items: Sequence[tuple[str, Entry | None]],
                      deleted_exist: bool = False) -> None:
        self.catalog.stage_entries(repo, branch, items, deleted_exist=deleted_exist)

    def commit(self, repo: str, branch: str, message: str) -> str:
        return self.catalog.commit(repo, branch, message, self.committer).id

    def branch_head(self, repo: str, branch: str) -> str:
        return self.catalog.get_branch(repo, branch).commit_id

    def branch_changes(self, repo: str, branch: str, since: object | None) -> tuple[object, list[str] | None]:
        return self.catalog.branch_changes(repo, branch, since)

    # refs the mount changes: the CLI's own catalog calls (same rules, errors, hooks) ----------

    def default_branch(self, repo: str) -> str:
        return self.catalog.get_repository(repo).default_branch

    def create_branch(self, repo: str, branch: str, source: str) -> MountRef:
        created = self.catalog.create_branch(repo, branch, source)
        return MountRef(MountRefKind.BRANCH, created.id, created.commit_id)

    def delete_branch(self, repo: str, branch: str) -> None:
        self.catalog.delete_branch(repo, branch)

    def create_tag(self, repo: str, tag: str, ref: str) -> str:
        return self.catalog.create_tag(repo, tag, ref)

    def merge(self, repo: str, dest: str, source: str, strategy: str | None) -> str:
        return self.catalog.merge(repo, dest, source, self.committer, None, None, strategy).id

    def reset(self, repo: str, branch: str, prefix: str | None) -> None:
        self.catalog.reset(repo, branch, prefix)

    def contained_elsewhere(self, repo: str, branch: str) -> bool:
        head = self.catalog.get_branch(repo, branch).commit_id
        default = self.default_branch(repo)
        others = [ref for ref in self.list_refs(repo) if not (ref.is_branch and ref.name == branch)]
        if any(ref.commit_id == head for ref in others):
            return True
        others.sort(key=lambda ref: ref.name != default)  # the default branch first: the usual home
        for ref in others:
            base = self.catalog.merge_base(repo, head, ref.commit_id)
            if base is not None and base.id == head:
                return True
        return False

    def list_changes(self, repo: str, branch: str, limit: int) -> list[UncommittedChange]:
        out = []
        for diff in self.catalog.diff_uncommitted(repo, branch):
            out.append(UncommittedChange(_CHANGES[getattr(diff.type, "value", diff.type)], diff.path))
            if len(out) >= limit:
                break
        return out

    def local_file(self, repo: str, entry: Entry) -> str | None:
        if entry.address_is_full:
            return None  # imported by address: not the namespace's to keep unchanged
        return _namespace_path(self.catalog.repository_block(repo), entry)

    def delete_data(self, repo: str, entry: Entry) -> None:
        if entry.address_is_full:
            raise ValueError(f"not an object of the namespace: {entry.physical_address}")
        self.catalog.repository_block(repo).delete(entry.physical_address)

    def open_reader(self, repo: str, entry: Entry):
        if not entry.address_is_full:
            block = self.catalog.repository_block(repo)
            path = _namespace_path(block, entry)
            if path is not None:
                return LocalFileReader(path)
            if self.block_cache is not None:
                key = entry.physical_address
                identity = f"{block.uri}/{key}#{entry.checksum}#{entry.size}"
                return self.block_cache.open(identity, entry.size,
                                             lambda offset, length: block.get_range(key, offset, length))
        reader = self.catalog.open_entry(repo, entry)
        if self.block_cache is None:
            return reader
        identity = f"{entry.physical_address}#{entry.checksum}#{entry.size}"
        return self.block_cache.open(identity, entry.size, reader.read)
