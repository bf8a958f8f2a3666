"""``Catalog``: objects with paths and contents on top of the ``Graveler``.

Owns what the version-control core leaves opaque: an object's data lives in the repository's
storage namespace under a unique physical address (``data/<12 hex ms><20 hex random>``, so
addresses sort by upload time), its metadata is an ``Entry`` (size, mtime, checksum computed while
the bytes stream to storage (``lakefuse.checksums``), content type, user metadata) stored as a
``ValueRecord`` through ``committed.encoding.entry_to_record``.  Paths are ``str`` here and
UTF-8 ``bytes`` keys in the Graveler.  A checksum is an opaque string to everything but
``lakefuse.checksums`` and ``ChecksumVerifier``: imported objects carry their source's (an S3
ETag, ...), and entries written by older versions a SHA-256 or MD5 hex digest.

Everything version-control (branches, commits, merges, diffs) is forwarded to the Graveler with
records turned into entries; see ``lakefuse.graveler.graveler`` for the semantics.  Reads of an
object's whole content check its size and checksum (``CorruptedData`` on mismatch) when the
checksum is a digest we can recompute (BLAKE3, or SHA-256 and MD5 for older entries and
single-part S3 ETags); range reads do not (they cannot).
"""

from __future__ import annotations

import io
import os
import secrets
import time
from dataclasses import dataclass
from functools import partial
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping

from lakefuse.block.base import BlockAdapter
from lakefuse.checksums import content_hasher, is_content_checksum, verifier_hasher
from lakefuse.errors import CorruptedData, InvalidArgument, ObjectNotFound
from lakefuse.graveler.changes import Change, ChangeType
from lakefuse.graveler.committed.encoding import entry_to_record, record_to_entry
from lakefuse.graveler.graveler import Graveler
from lakefuse.graveler.merge import MergeStrategy
from lakefuse.graveler.model import BranchCursor, Commit, CommitID, Entry, TagID, ValueRecord, string_map
from lakefuse.graveler.once import OncePerKey
from lakefuse.graveler.ports import Branch, Repository
from lakefuse.graveler.refexpr import ResolvedRef
from lakefuse.graveler.views import RefView

DEFAULT_CONTENT_TYPE = "application/octet-stream"
DATA_PREFIX = "data/"
ACTIONS_PREFIX = "_lakefs_actions/"
_ACTION_SUFFIXES = (b".yaml", b".yml")
_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ListedObject:
    """One listing row: an object (``entry``) or a common prefix (``entry is None``)."""

    path: str
    entry: Entry | None

    @property
    def is_prefix(self) -> bool:
        return self.entry is None


@dataclass(frozen=True, slots=True)
class ObjectListing:
    items: list[ListedObject]
    has_more: bool

    @property
    def next_after(self) -> str | None:
        return self.items[-1].path if self.has_more and self.items else None


@dataclass(frozen=True, slots=True)
class Difference:
    """A path that differs: ``left`` / ``right`` entries (``None`` where absent)."""

    path: str
    type: ChangeType
    left: Entry | None
    right: Entry | None


def _check_content_checksum(checksum: str) -> None:
    """``InvalidArgument`` unless ``checksum`` has the form ``content_hasher()`` gives."""
    if not is_content_checksum(checksum):
        raise InvalidArgument(f"checksum must be a content_hasher() digest ('blake3:' and 64 hex digits), "
                              f"got {checksum!r}")


def _file_checksum(local_path: str | os.PathLike) -> str:
    hasher = content_hasher()
    try:
        with open(local_path, "rb", buffering=0) as handle:
            while chunk := handle.read(_CHUNK):
                hasher.update(chunk)
    except OSError as exc:
        raise InvalidArgument(f"cannot read {os.fspath(local_path)!r}: {exc.strerror or exc}") from None
    return hasher.hexdigest()


class ChecksumVerifier:
    """Checks bytes read back against their entry: ``update`` with every chunk in order,
    then ``check()`` raises ``CorruptedData`` if the size differs, or the checksum does when
    it is a digest this can recompute (else only the size is checked)."""

    def __init__(self, entry: Entry):
        self.entry = entry
        self.size = 0
        self._hasher = verifier_hasher(entry.checksum)

    def update(self, data) -> None:
        self.size += len(data)
        if self._hasher is not None:
            self._hasher.update(data)

    def check(self) -> None:
        entry = self.entry
        if self.size != entry.size:
            raise CorruptedData(f"object {entry.physical_address}: {self.size} bytes stored, entry says {entry.size}")
        if self._hasher is not None and self._hasher.hexdigest() != entry.checksum:
            raise CorruptedData(f"object {entry.physical_address}: {self._hasher.name.upper()} "
                                f"{self._hasher.hexdigest()} differs from entry checksum {entry.checksum}")


class _HashingReader(io.RawIOBase):
    """Reads through ``raw`` while computing the checksum and counting bytes."""

    def __init__(self, raw: BinaryIO):
        super().__init__()
        self._raw = raw
        self.hasher = content_hasher()
        self.size = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        if data:
            self.hasher.update(data)
            self.size += len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        if data is None:
            return None
        buffer[: len(data)] = data
        return len(data)


class ObjectReader:
    """Random access to one object's bytes (thread-safe: every read is independent)."""

    def __init__(self, block: BlockAdapter, key: str, size: int):
        self._block = block
        self._key = key
        self.size = size

    def read(self, offset: int, size: int) -> bytes:
        if offset >= self.size or size <= 0:
            return b""
        return self._block.get_range(self._key, offset, min(size, self.size - offset))

    def close(self) -> None:
        pass


def _key(path: str) -> bytes:
    if not isinstance(path, str) or not path:
        raise InvalidArgument(f"object path must be a non-empty string, got {path!r}")
    return path.encode("utf-8")


def _prefix(text: str) -> bytes:
    if not isinstance(text, str):
        raise InvalidArgument(f"expected a string, got {text!r}")
    return text.encode("utf-8")


def _path(key: bytes) -> str:
    return key.decode("utf-8")


def _entry(record: ValueRecord | None) -> Entry | None:
    return None if record is None else record_to_entry(record)


def _difference(change: Change) -> Difference:
    return Difference(_path(change.key), change.type, _entry(change.left), _entry(change.right))


class Catalog:
    """Objects of repositories.  ``block_for(storage_namespace)`` opens the block adapter of a
    namespace (called once per namespace, then cached); ``normalize_namespace`` spells a
    namespace canonically before a repository is created with it."""

    def __init__(
        self,
        graveler: Graveler,
        block_for: Callable[[str], BlockAdapter],
        *,
        normalize_namespace: Callable[[str], str] | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.graveler = graveler
        self._blocks: OncePerKey[str, BlockAdapter] = OncePerKey(block_for)
        if normalize_namespace is None:
            from lakefuse.block.namespace import normalize_namespace
        self._normalize = normalize_namespace
        self._clock = clock
        graveler.action_files_reader = self._read_action_files

    # ------------------------------------------------------------------------------------
    # storage

    def block(self, storage_namespace: str) -> BlockAdapter:
        return self._blocks.get(storage_namespace)

    def repository_block(self, repo_id: str) -> BlockAdapter:
        return self.block(self.graveler.repository(repo_id).storage_namespace)

    def _locate(self, repo_id: str, entry: Entry) -> tuple[BlockAdapter, str]:
        if not entry.address_is_full:
            return self.repository_block(repo_id), entry.physical_address
        namespace, _, key = entry.physical_address.rpartition("/")
        scheme, sep, location = namespace.partition("://")
        if not sep or not scheme or not location.strip("/") or not key:
            raise CorruptedData(f"entry has a malformed full address {entry.physical_address!r}")
        return self.block(namespace), key

    def new_address(self) -> str:
        """A fresh physical address for a data object: ``data/``, the time in milliseconds (12
        hex digits: ``lakefuse gc`` splits its listing by it), 20 random hex digits."""
        millis = int(self._clock() * 1000)
        return f"{DATA_PREFIX}{millis:012x}{secrets.token_hex(10)}"

    def in_place_site(self, repo_id: str) -> tuple[str, str] | None:
        """``(directory, prefix)`` when the repository's storage is a local directory: a file
        named ``n`` made in ``directory`` is the object ``prefix + n`` where it lies, once
        ``store_in_place`` gives it an entry (``n`` from ``new_address``, less the prefix); None
        for other storage."""
        local_path = getattr(self.repository_block(repo_id), "local_path", None)
        if local_path is None:
            return None
        return os.path.dirname(local_path(DATA_PREFIX + "x")), DATA_PREFIX

    # ------------------------------------------------------------------------------------
    # repositories, branches, tags (forwarded)

    def create_repository(self, repo_id: str, storage_namespace: str, default_branch: str = "main") -> Repository:
        return self.graveler.create_repository(repo_id, self._normalize(storage_namespace), default_branch)

    def get_repository(self, repo_id: str) -> Repository:
        return self.graveler.get_repository(repo_id)

    def list_repositories(self) -> list[Repository]:
        return self.graveler.list_repositories()

    def delete_repository(self, repo_id: str) -> None:
        self.graveler.delete_repository(repo_id)

    def create_branch(self, repo_id: str, branch_id: str, source_ref: str) -> Branch:
        return self.graveler.create_branch(repo_id, branch_id, source_ref)

    def get_branch(self, repo_id: str, branch_id: str) -> Branch:
        return self.graveler.get_branch(repo_id, branch_id)

    def branch_changes(self, repo_id: str, branch_id: str, since: BranchCursor | None,
                       limit: int = 10_000) -> tuple[BranchCursor, list[str] | None]:
        """The branch's cursor now and the paths other writers changed since ``since`` (None:
        anything may have changed); see ``Graveler.branch_changes``."""
        cursor, keys = self.graveler.branch_changes(repo_id, branch_id, since, limit)
        return cursor, None if keys is None else [_path(key) for key in keys]

    def list_branches(self, repo_id: str) -> list[Branch]:
        return self.graveler.list_branches(repo_id)

    def delete_branch(self, repo_id: str, branch_id: str) -> None:
        self.graveler.delete_branch(repo_id, branch_id)

    def create_tag(self, repo_id: str, tag_id: str, ref: str, force: bool = False) -> CommitID:
        return self.graveler.create_tag(repo_id, tag_id, ref, force)

    def get_tag(self, repo_id: str, tag_id: str) -> CommitID:
        return self.graveler.get_tag(repo_id, tag_id)

    def list_tags(self, repo_id: str) -> list[tuple[TagID, CommitID]]:
        return self.graveler.list_tags(repo_id)

    def delete_tag(self, repo_id: str, tag_id: str) -> None:
        self.graveler.delete_tag(repo_id, tag_id)

    def resolve(self, repo_id: str, ref: str) -> ResolvedRef:
        return self.graveler.resolve(repo_id, ref)

    # ------------------------------------------------------------------------------------
    # writing objects

    def write_data(self, repo_id: str, stream: BinaryIO) -> tuple[str, int, str]:
        """Store what ``stream`` yields as a new data object of the repository:
        ``(physical_address, size, checksum)``.  Nothing is staged."""
        block = self.repository_block(repo_id)
        address = self.new_address()
        reader = _HashingReader(stream)
        block.put_stream(address, reader)
        return address, reader.size, reader.hasher.hexdigest()

    def upload_stream(
        self,
        repo_id: str,
        branch_id: str,
        path: str,
        stream: BinaryIO,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        mtime: int | None = None,
    ) -> Entry:
        """Store the stream's bytes and stage the object at ``path``; its entry."""
        key = _key(path)
        metadata = string_map(metadata, "user metadata")
        self.graveler.writable_branch(repo_id, branch_id)  # fail before writing data for nothing
        address, size, checksum = self.write_data(repo_id, stream)
        return self._stage_new_object(repo_id, branch_id, key, address, size, checksum, content_type, metadata, mtime)

    def _stage_new_object(self, repo_id: str, branch_id: str, key: bytes, address: str, size: int, checksum: str,
                          content_type: str | None, metadata: dict[str, str], mtime: int | None) -> Entry:
        entry = self._new_entry(address, size, checksum, content_type, metadata, mtime)
        self.graveler.set(repo_id, branch_id, entry_to_record(key, entry))
        return entry

    def _new_entry(self, address: str, size: int, checksum: str, content_type: str | None,
                   metadata: dict[str, str], mtime: int | None) -> Entry:
        return Entry(
            physical_address=address,
            size=size,
            mtime=int(self._clock()) if mtime is None else int(mtime),
            checksum=checksum,
            content_type=content_type or DEFAULT_CONTENT_TYPE,
            metadata=metadata,
        )

    def upload_bytes(self, repo_id: str, branch_id: str, path: str, data: bytes, **options) -> Entry:
        return self.upload_stream(repo_id, branch_id, path, io.BytesIO(bytes(data)), **options)

    def upload_file(
        self,
        repo_id: str,
        branch_id: str,
        path: str,
        local_path: str | os.PathLike,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        mtime: int | None = None,
        checksum: str | None = None,
        move: bool = False,
        durable: bool = True,
    ) -> Entry:
        """Store a local file's bytes and stage the object at ``path``; its entry.

        ``checksum``: the file's ``content_hasher()`` hex digest, when the caller computed it
        while writing the file (the mount does, for its own spool files): trusted as is,
        so the file is not read again.  ``move``: the file may be moved into storage instead
        of copied (renamed on a local namespace on the same filesystem, see
        ``BlockAdapter.put_file``); it is gone once this returns.  ``durable=False``: the bytes
        need not survive a crash of the machine yet (see ``BlockAdapter.put_file``); ``sync``
        or the branch's next commit makes them durable."""
        if checksum is None and not move:
            try:
                handle = open(local_path, "rb")
            except OSError as exc:
                raise InvalidArgument(f"cannot read {os.fspath(local_path)!r}: {exc.strerror or exc}") from None
            with handle:
                return self.upload_stream(repo_id, branch_id, path, handle, content_type=content_type,
                                          metadata=metadata, mtime=mtime)
        key = _key(path)
        self.graveler.writable_branch(repo_id, branch_id)  # fail before writing data for nothing
        entry = self.store_file(repo_id, local_path, content_type=content_type, metadata=metadata, mtime=mtime,
                                checksum=checksum, move=move, durable=durable)
        self.graveler.set(repo_id, branch_id, entry_to_record(key, entry))
        return entry

    def store_file(
        self,
        repo_id: str,
        local_path: str | os.PathLike,
        *,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        mtime: int | None = None,
        checksum: str | None = None,
        move: bool = False,
        durable: bool = True,
        source_fd: int | None = None,
    ) -> Entry:
        """Store a local file's bytes as a new object of the repository and return its entry;
        nothing is staged (``stage_entries`` does that).  The options are ``upload_file``'s;
        ``source_fd``: a descriptor of the file the caller holds open (see ``put_file``)."""
        metadata = string_map(metadata, "user metadata")
        if checksum is None:
            checksum = _file_checksum(local_path)
        else:
            _check_content_checksum(checksum)
        address = self.new_address()
        stored = self.repository_block(repo_id).put_file(address, os.fspath(local_path), move=move,
                                                            durable=durable, source_fd=source_fd)
        return self._new_entry(address, stored.size, checksum, content_type, metadata, mtime)

    def store_in_place(
        self,
        repo_id: str,
        address: str,
        fd: int,
        *,
        checksum: str,
        content_type: str | None = None,
        metadata: Mapping[str, str] | None = None,
        mtime: int | None = None,
        durable: bool = True,
    ) -> Entry:
        """The entry of a new object written where it lies (``in_place_site``): the file at
        ``address``, open as ``fd``, whose ``checksum`` the caller computed; nothing is moved,
        copied or staged.  ``ObjectNotFound`` if the file was deleted meanwhile."""
        metadata = string_map(metadata, "user metadata")
        _check_content_checksum(checksum)
        adopt = getattr(self.repository_block(repo_id), "adopt_file", None)
        if adopt is None or not address.startswith(DATA_PREFIX):
            raise InvalidArgument(f"{address!r} is not an address of a file written in place")
        stored = adopt(address, fd, durable=durable)
        return self._new_entry(address, stored.size, checksum, content_type, metadata, mtime)

    def sync(self, repo_id: str) -> None:
        """Make the repository's objects stored with ``durable=False`` durable (staged entries
        are durable once staged)."""
        self.repository_block(repo_id).sync()

    def stage_entries(self, repo_id: str, branch_id: str, items: Iterable[tuple[str, Entry | None]],
                      deleted_exist: bool = False) -> None:
        """Stage entries as they are (``None`` deletes), all or nothing: renames, metadata
        changes, entries pointing at data written with ``write_data``.  ``deleted_exist``: see
        ``Graveler.stage``."""
        records = []
        for path, entry in items:
            key = _key(path)
            records.append((key, None if entry is None else entry_to_record(key, entry)))
        self.graveler.stage(repo_id, branch_id, records, deleted_exist=deleted_exist)

    def delete_object(self, repo_id: str, branch_id: str, path: str) -> bool:
        """Stage the deletion of ``path``; False (and nothing staged) if it does not exist."""
        return self.graveler.delete(repo_id, branch_id, _key(path))

    # ------------------------------------------------------------------------------------
    # reading objects

    def stat(self, repo_id: str, ref: str, path: str) -> Entry:
        """The entry at ``path`` in ``ref`` (``ObjectNotFound``)."""
        return record_to_entry(self.graveler.get(repo_id, ref, _key(path)))

    def open_entry(self, repo_id: str, entry: Entry) -> ObjectReader:
        block, key = self._locate(repo_id, entry)
        return ObjectReader(block, key, entry.size)

    def read_entry(self, repo_id: str, entry: Entry, verify: bool = True) -> bytes:
        block, key = self._locate(repo_id, entry)
        data = block.get(key)
        if len(data) > entry.size:  # an entry names its object's first ``size`` bytes (see lakefuse.fs.owned)
            data = data[:entry.size]
        if verify:
            verifier = ChecksumVerifier(entry)
            verifier.update(data)
            verifier.check()
        return data

    def read_object(self, repo_id: str, ref: str, path: str, verify: bool = True) -> bytes:
        return self.read_entry(repo_id, self.stat(repo_id, ref, path), verify)

    def read_range(self, repo_id: str, ref: str, path: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InvalidArgument(f"invalid range: offset {offset}, length {length}")
        return self.open_entry(repo_id, self.stat(repo_id, ref, path)).read(offset, length)

    def download(self, repo_id: str, ref: str, path: str, local_path: str | os.PathLike, verify: bool = True) -> Entry:
        """Write the object's bytes to ``local_path`` (streamed); its entry."""
        entry = self.stat(repo_id, ref, path)
        block, key = self._locate(repo_id, entry)
        stored = block.get_to_file(key, os.fspath(local_path))
        if stored.size > entry.size:  # an entry names its object's first ``size`` bytes
            os.truncate(local_path, entry.size)
        if verify:
            verifier = ChecksumVerifier(entry)
            with open(local_path, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    verifier.update(chunk)
            verifier.check()
        return entry

    def list_objects(
        self, repo_id: str, ref: str, prefix: str = "", delimiter: str = "", after: str = "", limit: int = 1000
    ) -> ObjectListing:
        """A page of the objects under ``prefix`` (with a ``delimiter``, common prefixes as
        ``entry=None`` rows), strictly after ``after``; see ``RefView.list``."""
        page = self.graveler.list_objects(repo_id, ref, _prefix(prefix), _prefix(delimiter), _prefix(after), limit)
        return ObjectListing([ListedObject(_path(key), _entry(record)) for key, record in page.items], page.has_more)

    def iter_objects(self, repo_id: str, ref: str, prefix: str = "", delimiter: str = "", after: str = "") -> Iterator[ListedObject]:
        for key, record in self.graveler.iter_objects(repo_id, ref, _prefix(prefix), _prefix(delimiter), _prefix(after)):
            yield ListedObject(_path(key), _entry(record))

    # ------------------------------------------------------------------------------------
    # versions (forwarded, records turned into entries)

    def commit(
        self,
        repo_id: str,
        branch_id: str,
        message: str,
        committer: str,
        metadata: Mapping[str, str] | None = None,
        allow_empty: bool = False,
    ) -> Commit:
        """Commit the branch's staged changes (``Graveler.commit``); objects stored without
        ``durable`` are made durable before the commit is written."""
        return self.graveler.commit(repo_id, branch_id, message, committer, metadata, allow_empty,
                                    make_durable=partial(self.sync, repo_id))

    def get_commit(self, repo_id: str, commit_id: str) -> Commit:
        return self.graveler.get_commit(repo_id, commit_id)

    def log(self, repo_id: str, ref: str, amount: int | None = None, all_parents: bool = False) -> Iterator[Commit]:
        return self.graveler.log(repo_id, ref, amount, all_parents)

    def diff(self, repo_id: str, left_ref: str, right_ref: str, prefix: str = "") -> Iterator[Difference]:
        return map(_difference, self.graveler.diff(repo_id, left_ref, right_ref, _prefix(prefix)))

    def diff_uncommitted(self, repo_id: str, branch_id: str, prefix: str = "") -> Iterator[Difference]:
        return map(_difference, self.graveler.diff_uncommitted(repo_id, branch_id, _prefix(prefix)))

    def merge(
        self,
        repo_id: str,
        dest_branch_id: str,
        source_ref: str,
        committer: str,
        message: str | None = None,
        metadata: Mapping[str, str] | None = None,
        strategy: str | MergeStrategy | None = None,
    ) -> Commit:
        return self.graveler.merge(repo_id, dest_branch_id, source_ref, committer, message, metadata, strategy)

    def merge_base(self, repo_id: str, left_ref: str, right_ref: str) -> Commit | None:
        return self.graveler.merge_base(repo_id, left_ref, right_ref)

    def revert(
        self,
        repo_id: str,
        branch_id: str,
        ref: str,
        committer: str,
        parent_number: int | None = None,
        message: str | None = None,
        metadata: Mapping[str, str] | None = None,
        allow_empty: bool = False,
    ) -> Commit:
        return self.graveler.revert(repo_id, branch_id, ref, committer, parent_number, message, metadata, allow_empty)

    def reset(self, repo_id: str, branch_id: str, prefix: str | None = None) -> None:
        self.graveler.reset(repo_id, branch_id, None if prefix is None else _prefix(prefix))

    # ------------------------------------------------------------------------------------
    # hooks support

    def _read_action_files(self, repo: Repository, view: RefView) -> list[tuple[str, bytes]]:
        """The action files directly under ``_lakefs_actions/`` in ``view``."""
        files = []
        for key, record in view.list(ACTIONS_PREFIX.encode(), b"/"):
            if record is None or not key.lower().endswith(_ACTION_SUFFIXES):
                continue
            entry = record_to_entry(record)
            try:
                files.append((_path(key), self.read_entry(repo.id, entry)))
            except ObjectNotFound:
                raise ObjectNotFound(f"action file {_path(key)!r}: its data object {entry.physical_address} is missing") from None
        return files
