"""``MemoryBackend``: an in-memory twin of ``LakeBackend`` for tests of ``lakefuse.fs`` (and a
kernel mount) without a database or object storage.

It implements the lakeFS model just far enough: repositories, branches with a staging area,
tags, commits with parents, three-way merges by key, resets, ref expressions (``~N``, ``^N``,
commit ID prefixes), listings with prefix / delimiter / after served from sorted key lists
(bisect, no full scans), uncommitted changes, and object bytes kept in a dict.  Names of new
branches and tags follow the core's rules (``validate_ref_name``); no hooks run.  ``calls`` counts every method call by name so tests
can assert how much work an operation did.  Its change feed (``branch_changes``) counts the
``LakeBackend`` methods as the mount's own writes and the test helpers (``put_object``,
``put_entries``, ``delete_object``) as another process's.  ``local_storage`` is what ``stores_locally`` says:
whether the filesystem hashes big written files while they are written and moves them in at
close (True), or streams them with ``upload_stream`` (False).  ``in_place_directory``, if set,
is offered as ``in_place_objects`` of every repository: files the mount makes there become
objects (their bytes read once, then kept in the dict like the others) with ``store_in_place``.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import hashlib
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from lakefuse.checksums import ContentHasher, content_hasher
from lakefuse.errors import (
    AlreadyExists,
    AmbiguousRef,
    CorruptedData,
    DirtyBranch,
    InvalidArgument,
    MergeConflict,
    NoChanges,
    ObjectNotFound,
    RefNotFound,
    RepositoryNotFound,
)
from lakefuse.fs.backend import ChangeKind, InPlaceObjects, ListedItem, MountRef, MountRefKind, UncommittedChange
from lakefuse.graveler.merge import MergeStrategy, parse_strategy
from lakefuse.graveler.model import Entry
from lakefuse.graveler.refexpr import validate_ref_name

_EXPR_RE = re.compile(r"^(?P<base>[^~^]+)(?P<ops>(?:[~^]\d*)*)$")
_OP_RE = re.compile(r"([~^])(\d*)")


@dataclass
class _Commit:
    id: str
    parents: tuple[str, ...]
    message: str
    creation_date: int
    tree: dict[str, Entry]
    keys: list[str]  # sorted keys of tree


@dataclass
class _Branch:
    head: str
    staging: dict[str, Entry | None] = field(default_factory=dict)
    view: dict[str, Entry] | None = None  # materialised staging-over-head, rebuilt lazily
    view_keys: list[str] | None = None
    version: int = 0  # staging changes so far (the change feed's cursor)
    epoch: int = 0  # head moves so far
    changed: dict[str, tuple[int, bool]] = field(default_factory=dict)  # key -> (version, by the mount)


@dataclass
class _Repo:
    name: str
    default_branch: str
    commits: dict[str, _Commit] = field(default_factory=dict)
    branches: dict[str, _Branch] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)


class BytesReader:
    def __init__(self, data: bytes):
        self._data = data

    def read(self, offset: int, size: int) -> bytes:
        return self._data[offset:offset + size]

    def close(self) -> None:
        pass


class MemoryBackend:
    """Thread-safe (one lock); see the module docstring."""

    def __init__(self, local_storage: bool = True, in_place_directory: str | None = None):
        self.local_storage = local_storage
        self.in_place_directory = in_place_directory
        self._lock = threading.RLock()
        self._repos: dict[str, _Repo] = {}
        self._objects: dict[str, bytes] = {}
        self._counter = 0
        self.calls: collections.Counter[str] = collections.Counter()

    # ------------------------------------------------------------------ test helpers

    def create_repository(self, repo: str, default_branch: str = "main") -> str:
        with self._lock:
            if repo in self._repos:
                raise AlreadyExists(f"repository {repo!r} already exists")
            r = _Repo(repo, default_branch)
            initial = self._new_commit(r, (), "Repository created", {})
            r.branches[default_branch] = _Branch(head=initial.id)
            self._repos[repo] = r
            return initial.id


    def put_object(self, repo: str, branch: str, key: str, data: bytes, *, mtime: int | None = None,
                   metadata: Mapping[str, str] | None = None) -> Entry:
        """Stage an object as another process would (the change feed reports it)."""
        entry = self._store(data, mtime if mtime is not None else int(time.time()), metadata or {}, None)
        self._stage(repo, branch, [(key, entry)], by_mount=False)
        return entry

    def put_entries(self, repo: str, branch: str, items: Sequence[tuple[str, bytes]]) -> None:
        """Stage many small objects at once (test setup of large directories)."""
        now = int(time.time())
        self._stage(repo, branch, [(key, self._store(data, now, {}, None)) for key, data in items], by_mount=False)

    def delete_object(self, repo: str, branch: str, key: str) -> None:
        """Stage a deletion as another process would."""
        self._stage(repo, branch, [(key, None)], by_mount=False)

    def object_bytes(self, entry: Entry) -> bytes:
        return self._objects[entry.physical_address]

    # ------------------------------------------------------------------ LakeBackend

    def list_repositories(self) -> list[str]:
        self.calls["list_repositories"] += 1
        with self._lock:
            return sorted(self._repos)

    def repository_exists(self, repo: str) -> bool:
        self.calls["repository_exists"] += 1
        return repo in self._repos

    def list_refs(self, repo: str) -> list[MountRef]:
        self.calls["list_refs"] += 1
        with self._lock:
            r = self._repo(repo)
            refs = [MountRef(MountRefKind.BRANCH, name, b.head) for name, b in r.branches.items()]
            refs += [MountRef(MountRefKind.TAG, name, cid) for name, cid in r.tags.items()]
            return sorted(refs, key=lambda ref: ref.name)

    def resolve_ref(self, repo: str, ref: str) -> MountRef:
        self.calls["resolve_ref"] += 1
        with self._lock:
            return self._resolve(self._repo(repo), ref)

    def get_entry(self, repo: str, ref: MountRef, key: str) -> Entry | None:
        self.calls["get_entry"] += 1
        with self._lock:
            tree, _ = self._view(self._repo(repo), ref)
            return tree.get(key)

    def list_entries(self, repo: str, ref: MountRef, prefix: str, after: str = "", limit: int = 1000,
                     delimiter: str = "/") -> list[ListedItem]:
        self.calls["list_entries"] += 1
        with self._lock:
            tree, keys = self._view(self._repo(repo), ref)
            out: list[ListedItem] = []
            start = max(prefix, after)
            i = bisect.bisect_left(keys, start)
            if i < len(keys) and keys[i] == after:
                i += 1
            if after.startswith(prefix) and delimiter and after.endswith(delimiter) and len(after) > len(prefix):
                i = bisect.bisect_left(keys, after[:-1] + chr(ord(delimiter) + 1))
            while i < len(keys) and len(out) < limit:
                key = keys[i]
                if not key.startswith(prefix):
                    break
                cut = key.find(delimiter, len(prefix)) if delimiter else -1
                if cut >= 0:
                    common = key[:cut + 1]
                    out.append(ListedItem(common, tree.get(common)))  # with its marker, if any
                    i = bisect.bisect_left(keys, key[:cut] + chr(ord(delimiter) + 1), i)
                else:
                    out.append(ListedItem(key, tree[key]))
                    i += 1
            return out

    def upload_file(self, repo: str, branch: str, key: str, path: str, *, mtime: int,
                    metadata: Mapping[str, str], content_type: str | None = None,
                    checksum: str | None = None, move: bool = False, durable: bool = True) -> Entry:
        self.calls["upload_file"] += 1
        self._branch(self._repo(repo), branch)
        entry = self.store_file(repo, path, mtime=mtime, metadata=metadata, content_type=content_type,
                                checksum=checksum, move=move, durable=durable)
        self.stage_entries(repo, branch, [(key, entry)])
        return entry

    def store_file(self, repo: str, path: str, *, mtime: int, metadata: Mapping[str, str],
                   content_type: str | None = None, checksum: str | None = None, move: bool = False,
                   durable: bool = True, source_fd: int | None = None) -> Entry:
        self.calls["store_file"] += 1
        self.calls["store_file durable"] += durable
        self.calls["store_file with checksum"] += checksum is not None
        self._repo(repo)
        if source_fd is not None:  # what the caller holds open (the path may be gone)
            data = os.pread(source_fd, os.fstat(source_fd).st_size, 0)
        else:
            with open(path, "rb") as f:
                data = f.read()
        entry = self._store(data, mtime, metadata, content_type)
        if checksum is not None and checksum != entry.checksum:
            raise CorruptedData(f"storing {path!r}: the given checksum {checksum} is not the file's {entry.checksum}")
        if move:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        return entry

    def in_place_objects(self, repo: str) -> InPlaceObjects | None:
        self.calls["in_place_objects"] += 1
        self._repo(repo)
        if self.in_place_directory is None:
            return None
        return InPlaceObjects(self.in_place_directory, "data/", lambda: f"p{secrets.token_hex(10)}")

    def store_in_place(self, repo: str, address: str, fd: int, *, checksum: str, mtime: int,
                       metadata: Mapping[str, str], content_type: str | None = None,
                       durable: bool = True) -> Entry:
        self.calls["store_in_place"] += 1
        self.calls["store_in_place durable"] += durable
        self._repo(repo)
        if self.in_place_directory is None or not address.startswith("data/"):
            raise InvalidArgument(f"{address!r} is not an address of a file written in place")
        st = os.fstat(fd)
        if st.st_nlink == 0:
            raise ObjectNotFound(f"the file written for {address!r} was deleted")
        data = os.pread(fd, st.st_size, 0)
        if ContentHasher(data).hexdigest() != checksum:
            raise CorruptedData(f"storing {address!r} in place: the given checksum {checksum} is not the file's")
        with self._lock:
            self._objects[address] = data
        return Entry(physical_address=address, size=len(data), mtime=int(mtime), checksum=checksum,
                     content_type=content_type or "application/octet-stream", metadata=dict(metadata))

    def sync(self, repo: str) -> None:
        self.calls["sync"] += 1

    def content_hasher(self):
        return content_hasher()

    def stores_locally(self, repo: str) -> bool:
        return self.local_storage

    def upload_stream(self, repo: str, branch: str, key: str, stream, *, mtime: int,
                      metadata: Mapping[str, str], content_type: str | None = None) -> Entry:
        self.calls["upload_stream"] += 1
        self._branch(self._repo(repo), branch)
        chunks = []
        while True:
            chunk = stream.read(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        entry = self._store(b"".join(chunks), mtime, metadata, content_type)
        self.stage_entries(repo, branch, [(key, entry)])
        return entry

    def stage_entries(self, repo: str, branch: str, items: Sequence[tuple[str, Entry | None]],
                      deleted_exist: bool = False) -> None:
        self.calls["stage_entries"] += 1
        self._stage(repo, branch, items, by_mount=True)

    def _stage(self, repo: str, branch: str, items: Sequence[tuple[str, Entry | None]], by_mount: bool) -> None:
        with self._lock:
            b = self._branch(self._repo(repo), branch)
            for key, _entry in items:
                if not key or key.startswith("/"):
                    raise InvalidArgument(f"invalid key {key!r}")
            b.version += 1
            for key, entry in items:
                b.staging[key] = entry
                b.changed[key] = (b.version, by_mount)
            b.view = b.view_keys = None

    def commit(self, repo: str, branch: str, message: str) -> str:
        self.calls["commit"] += 1
        with self._lock:
            r = self._repo(repo)
            b = self._branch(r, branch)
            head = r.commits[b.head]
            changes = {k: v for k, v in b.staging.items() if head.tree.get(k) != v}
            if not changes:
                raise NoChanges(f"no changes to commit on branch {branch!r}")
            tree = dict(head.tree)
            for key, entry in changes.items():
                if entry is None:
                    tree.pop(key, None)
                else:
                    tree[key] = entry
            c = self._new_commit(r, (head.id,), message, tree)
            b.head, b.staging, b.view, b.view_keys = c.id, {}, None, None
            b.epoch += 1
            b.changed.clear()
            return c.id

    def branch_head(self, repo: str, branch: str) -> str:
        self.calls["branch_head"] += 1
        with self._lock:
            return self._branch(self._repo(repo), branch).head

    def list_changes(self, repo: str, branch: str, limit: int) -> list[UncommittedChange]:
        self.calls["list_changes"] += 1
        with self._lock:
            r = self._repo(repo)
            b = self._branch(r, branch)
            head = r.commits[b.head].tree
            out = []
            for key in sorted(b.staging):
                entry, old = b.staging[key], head.get(key)
                if entry is None and old is not None:
                    out.append(UncommittedChange(ChangeKind.REMOVED, key))
                elif entry is not None and old is None:
                    out.append(UncommittedChange(ChangeKind.ADDED, key))
                elif entry is not None and entry != old:
                    out.append(UncommittedChange(ChangeKind.CHANGED, key))
                if len(out) >= limit:
                    break
            return out

    def branch_changes(self, repo: str, branch: str, since: object | None) -> tuple[object, list[str] | None]:
        self.calls["branch_changes"] += 1
        with self._lock:
            b = self._branch(self._repo(repo), branch)
            cursor = (b.head, b.epoch, b.version)
            if since is None or since[:2] != cursor[:2]:
                return cursor, None
            return cursor, sorted(key for key, (version, by_mount) in b.changed.items()
                                  if version > since[2] and not by_mount)

    # ------------------------------------------------------------------ refs (also test helpers)

    def default_branch(self, repo: str) -> str:
        self.calls["default_branch"] += 1
        return self._repo(repo).default_branch

    def create_branch(self, repo: str, branch: str, source: str) -> MountRef:
        self.calls["create_branch"] += 1
        validate_ref_name(branch, "branch")
        with self._lock:
            r = self._repo(repo)
            if branch in r.branches or branch in r.tags:
                raise AlreadyExists(f"ref {branch!r} already exists")
            head = self._resolve(r, source).commit_id
            r.branches[branch] = _Branch(head=head)
            return MountRef(MountRefKind.BRANCH, branch, head)

    def delete_branch(self, repo: str, branch: str) -> None:
        self.calls["delete_branch"] += 1
        with self._lock:
            r = self._repo(repo)
            if branch == r.default_branch:
                raise InvalidArgument(f"cannot delete {branch!r}: it is the default branch")
            self._branch(r, branch)
            del r.branches[branch]

    def create_tag(self, repo: str, tag: str, ref: str) -> str:
        self.calls["create_tag"] += 1
        validate_ref_name(tag, "tag")
        with self._lock:
            r = self._repo(repo)
            if tag in r.tags or tag in r.branches:
                raise AlreadyExists(f"ref {tag!r} already exists")
            r.tags[tag] = self._resolve(r, ref).commit_id
            return r.tags[tag]

    def merge(self, repo: str, dest: str, source: str, strategy: str | None = None) -> str:
        """Three-way merge by key (the core's table, without ranges); "Merge 'SOURCE' into 'DEST'"."""
        self.calls["merge"] += 1
        wins = parse_strategy(strategy)
        with self._lock:
            r = self._repo(repo)
            b = self._branch(r, dest)
            source_id = self._resolve(r, source).commit_id
            head = r.commits[b.head]
            if any(head.tree.get(key) != entry for key, entry in b.staging.items()):
                raise DirtyBranch(f"merge of {source!r} into {dest!r}: branch {dest!r} has uncommitted changes")
            base_id = self._merge_base(r, source_id, head.id)
            if base_id == source_id:
                raise NoChanges(f"nothing to merge, {source!r} is already contained in {dest!r}")
            base = r.commits[base_id].tree if base_id is not None else {}
            theirs = r.commits[source_id].tree
            tree, conflicts = dict(head.tree), []
            for key in sorted(set(base) | set(theirs) | set(head.tree)):
                was, new, ours = base.get(key), theirs.get(key), head.tree.get(key)
                if new == was or new == ours:
                    continue
                if ours != was and wins is not MergeStrategy.SOURCE_WINS:
                    if wins is None:
                        conflicts.append(key)
                    continue
                if new is None:
                    tree.pop(key, None)
                else:
                    tree[key] = new
            if conflicts:
                raise MergeConflict(f"merge of {source!r} into {dest!r}: {len(conflicts)} conflicting path(s)",
                                    conflicts=conflicts)
            c = self._new_commit(r, (head.id, source_id), f"Merge '{source}' into '{dest}'", tree)
            self._moved(b, c.id)
            return c.id

    def reset(self, repo: str, branch: str, prefix: str | None) -> None:
        self.calls["reset"] += 1
        with self._lock:
            b = self._branch(self._repo(repo), branch)
            if prefix:
                b.staging = {key: entry for key, entry in b.staging.items() if not key.startswith(prefix)}
            else:
                b.staging = {}
            self._moved(b, b.head)

    def contained_elsewhere(self, repo: str, branch: str) -> bool:
        self.calls["contained_elsewhere"] += 1
        with self._lock:
            r = self._repo(repo)
            head = self._branch(r, branch).head
            others = [b.head for name, b in r.branches.items() if name != branch] + list(r.tags.values())
            return any(head in self._ancestors(r, commit_id) for commit_id in others)

    def open_reader(self, repo: str, entry: Entry) -> BytesReader:
        self.calls["open_reader"] += 1
        try:
            return BytesReader(self._objects[entry.physical_address])
        except KeyError:
            raise ObjectNotFound(f"object data not found: {entry.physical_address}") from None

    # ------------------------------------------------------------------ internals

    def _repo(self, repo: str) -> _Repo:
        try:
            return self._repos[repo]
        except KeyError:
            raise RepositoryNotFound(f"repository {repo!r} not found") from None

    @staticmethod
    def _branch(r: _Repo, branch: str) -> _Branch:
        try:
            return r.branches[branch]
        except KeyError:
            raise RefNotFound(f"branch {branch!r} not found in repository {r.name!r}") from None

    def _store(self, data: bytes, mtime: int, metadata: Mapping[str, str], content_type: str | None) -> Entry:
        with self._lock:
            self._counter += 1
            address = f"data/{self._counter:08d}"
            self._objects[address] = bytes(data)
        return Entry(physical_address=address, size=len(data), mtime=int(mtime),
                     checksum=ContentHasher(data).hexdigest(),
                     content_type=content_type or "application/octet-stream", metadata=dict(metadata))

    @staticmethod
    def _moved(b: _Branch, head: str) -> None:
        """The branch is now at ``head`` with its staging as it is: the change feed says so."""
        b.head, b.view, b.view_keys = head, None, None
        b.epoch += 1
        b.changed.clear()

    @staticmethod
    def _ancestors(r: _Repo, commit_id: str) -> set[str]:
        seen, todo = set(), [commit_id]
        while todo:
            cid = todo.pop()
            if cid not in seen:
                seen.add(cid)
                todo.extend(r.commits[cid].parents)
        return seen

    def _merge_base(self, r: _Repo, left: str, right: str) -> str | None:
        """The first ancestor of ``left``, breadth first, that is also one of ``right``."""
        theirs = self._ancestors(r, right)
        queue, seen = collections.deque([left]), set()
        while queue:
            cid = queue.popleft()
            if cid in theirs:
                return cid
            if cid not in seen:
                seen.add(cid)
                queue.extend(r.commits[cid].parents)
        return None

    def _new_commit(self, r: _Repo, parents: tuple[str, ...], message: str, tree: dict[str, Entry]) -> _Commit:
        self._counter += 1
        cid = hashlib.sha256(f"{r.name}/{self._counter}/{message}".encode()).hexdigest()
        c = _Commit(cid, parents, message, int(time.time()), tree, sorted(tree))
        r.commits[cid] = c
        return c

    def _view(self, r: _Repo, ref: MountRef) -> tuple[dict[str, Entry], list[str]]:
        if ref.kind is MountRefKind.BRANCH:
            b = self._branch(r, ref.name)
            if b.view is None:
                tree = dict(r.commits[b.head].tree)
                for key, entry in b.staging.items():
                    if entry is None:
                        tree.pop(key, None)
                    else:
                        tree[key] = entry
                b.view, b.view_keys = tree, sorted(tree)
            return b.view, b.view_keys
        c = r.commits.get(ref.commit_id)
        if c is None:
            raise RefNotFound(f"commit {ref.commit_id!r} not found")
        return c.tree, c.keys

    def _resolve(self, r: _Repo, ref: str) -> MountRef:
        if ref in r.branches:
            head = r.commits[r.branches[ref].head]
            return MountRef(MountRefKind.BRANCH, ref, head.id, head.creation_date)
        if ref in r.tags:
            c = r.commits[r.tags[ref]]
            return MountRef(MountRefKind.TAG, ref, c.id, c.creation_date)
        m = _EXPR_RE.match(ref)
        if not m:
            raise RefNotFound(f"ref {ref!r} not found in repository {r.name!r}")
        base = m.group("base")
        if base in r.branches:
            cid = r.branches[base].head
        elif base in r.tags:
            cid = r.tags[base]
        elif re.fullmatch(r"[0-9a-f]{4,64}", base):
            matches = [c for c in r.commits if c.startswith(base)]
            if not matches:
                raise RefNotFound(f"ref {ref!r} not found in repository {r.name!r}")
            if len(matches) > 1:
                raise AmbiguousRef(f"commit prefix {base!r} is ambiguous", candidates=matches)
            cid = matches[0]
        else:
            raise RefNotFound(f"ref {ref!r} not found in repository {r.name!r}")
        for op, num in _OP_RE.findall(m.group("ops")):
            n = int(num) if num else 1
            if op == "~":
                for _ in range(n):
                    parents = r.commits[cid].parents
                    if not parents:
                        raise RefNotFound(f"ref {ref!r}: commit has no parent")
                    cid = parents[0]
            elif n:
                parents = r.commits[cid].parents
                if len(parents) < n:
                    raise RefNotFound(f"ref {ref!r}: commit has no parent number {n}")
                cid = parents[n - 1]
        c = r.commits[cid]
        return MountRef(MountRefKind.COMMIT, ref, cid, c.creation_date)
