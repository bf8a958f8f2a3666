"""Listing an import source - a local directory tree or an S3 prefix - in parallel.

The driver plans (``plan_listing``): it walks the top levels breadth first, down to
``max_depth`` levels or until there are enough tasks, and turns what it found into tasks:

- ``tree``: everything below one directory / prefix (an executor walks it whole);
- ``files``: the files directly in one directory.  A local directory with many files becomes
  several tasks, each taking the names whose CRC-32 falls in its bucket (the driver only
  counts names); an S3 level becomes several tasks between split keys the driver noted while
  paging (every ``files_per_task``-th key, nothing else is kept).

Executors run the tasks (``list_task``) and yield ``SourceObject``s.  Entries of an import
point at the listed objects (full addresses); the checksum is the S3 ETag, or for local files
``fs-<size>-<mtime_ns>-<inode>`` (hex): a cheap deterministic identity that needs no read of
the data and changes whenever a file is rewritten (it is never MD5-shaped, so readers don't
mistake it for a content hash).  Local symbolic links, FIFOs, sockets and devices become
entries of their own (``lakefuse.posix``; a link's target is the bytes of an object the import
stores, see ``importer``), as the mount shows them; links whose target is not UTF-8, names that
are not UTF-8 and names lakefuse reserves are skipped and counted; directories are walked
without following symlinks.  S3 keys no lakefuse key can be (``a//b``, folder markers ``dir/``) are skipped.
"""

from __future__ import annotations

import math
import os
import stat as stat_mode
import threading
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

from lakefuse.block.base import RESERVED_SEGMENT_PREFIX, check_key
from lakefuse.block.namespace import parse_namespace
from lakefuse.config import S3Config
from lakefuse.errors import InvalidArgument, LakefuseError, NotFound, StorageError
from lakefuse.posix import MODE_KEY, MTIME_NS_KEY, TYPE_OF_FORMAT, special_metadata

FILES_PER_TASK = 20_000
MAX_PLAN_DEPTH = 3


@dataclass(frozen=True, slots=True)
class ListingTask:
    kind: str  # "tree" or "files"
    path: str  # relative directory / prefix: "" or ending in "/"
    bucket: int = 0  # local "files": names with crc32(name) % buckets == bucket
    buckets: int = 1
    after: str = ""  # s3 "files": keys (relative to path) > after ...
    until: str = ""  # ... and <= until; "" means no bound


@dataclass(frozen=True, slots=True)
class SourceObject:
    key: str  # relative to the source root
    size: int
    mtime: int
    checksum: str
    address: str  # full URI of the object ("" until an inline object is stored: see ``data``)
    #: user metadata of the entry (``lakefuse.posix`` keys of a link or special file)
    metadata: tuple[tuple[str, str], ...] = ()
    #: the bytes of an object the import stores itself (a symbolic link's target), else None
    data: bytes | None = None


@dataclass(frozen=True)
class SourceLocation:
    """A normalized import source: ``local:///abs/dir`` or ``s3://bucket[/prefix]``."""

    uri: str
    s3: S3Config | None = None

    @property
    def scheme(self) -> str:
        return parse_namespace(self.uri)[0]

    @property
    def location(self) -> str:
        return parse_namespace(self.uri)[1]


def local_checksum(st: os.stat_result) -> str:
    return f"fs-{st.st_size:x}-{st.st_mtime_ns:x}-{st.st_ino:x}"


# ---------------------------------------------------------------------------------------------
# checks and planning (driver)


def check_reachable(source: SourceLocation) -> None:
    """``NotFound`` / ``StorageError`` unless the source can be listed."""
    if source.scheme == "local":
        root = source.location
        if not os.path.isdir(root):
            raise NotFound(f"import source {source.uri} does not exist or is not a directory")
        if not os.access(root, os.R_OK | os.X_OK):
            raise StorageError(f"import source {source.uri} is not readable")
        return
    bucket, root = _s3_root(source)
    try:
        _s3_client(source.s3).list_objects_v2(Bucket=bucket, Prefix=root, MaxKeys=1)
    except Exception as exc:  # botocore errors: unreachable endpoint, no bucket, denied
        raise StorageError(f"import source {source.uri} cannot be listed: {_one_line(exc)}") from None


def plan_listing(
    source: SourceLocation,
    min_tasks: int,
    files_per_task: int | None = None,
    max_depth: int | None = None,
) -> list[ListingTask]:
    """The listing tasks of a source (see the module docstring); ``files_per_task`` and
    ``max_depth`` default to ``FILES_PER_TASK`` and ``MAX_PLAN_DEPTH``."""
    files_per_task = max(1, files_per_task or FILES_PER_TASK)
    max_depth = max(1, max_depth or MAX_PLAN_DEPTH)
    scan = _scan_local_level if source.scheme == "local" else _scan_s3_level
    tasks: list[ListingTask] = []
    frontier = [""]
    depth = 0
    while frontier:
        deeper: list[str] = []
        for path in frontier:
            subdirs, file_tasks = scan(source, path, files_per_task)
            tasks.extend(file_tasks)
            deeper.extend(path + name + "/" for name in subdirs)
        depth += 1
        if depth >= max_depth or len(tasks) + len(deeper) >= min_tasks:
            tasks.extend(ListingTask("tree", path) for path in deeper)
            break
        frontier = deeper
    return tasks


def _scan_local_level(source: SourceLocation, path: str, files_per_task: int):
    directory = os.path.join(source.location, path) if path else source.location
    subdirs: list[str] = []
    files = 0
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                    else:  # files, links, special files
                        files += 1
                except OSError:
                    continue
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc.strerror or exc}") from None
    buckets = max(1, math.ceil(files / files_per_task))
    tasks = [ListingTask("files", path, bucket, buckets) for bucket in range(buckets)] if files else []
    return sorted(subdirs), tasks


def _scan_s3_level(source: SourceLocation, path: str, files_per_task: int):
    bucket, root = _s3_root(source)
    client = _s3_client(source.s3)
    full = root + path
    subdirs: list[str] = []
    splits: list[str] = []
    files = 0
    request = {"Bucket": bucket, "Prefix": full, "Delimiter": "/"}
    try:
        while True:
            response = client.list_objects_v2(**request)
            for item in response.get("CommonPrefixes", ()):
                name = item["Prefix"][len(full) :].rstrip("/")
                if name:
                    subdirs.append(name)
            for item in response.get("Contents", ()):
                files += 1
                if files % files_per_task == 0:
                    splits.append(item["Key"][len(full) :])
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                break
            request["ContinuationToken"] = token
    except LakefuseError:
        raise
    except Exception as exc:
        raise StorageError(f"cannot list {source.uri}/{path}: {_one_line(exc)}") from None
    tasks = []
    if files:
        bounds = [""] + splits + [""]
        tasks = [ListingTask("files", path, after=bounds[i], until=bounds[i + 1]) for i in range(len(bounds) - 1)]
    return subdirs, tasks


# ---------------------------------------------------------------------------------------------
# running tasks (executors)


def list_task(source: SourceLocation, task: ListingTask, skipped: Callable[[int], None] | None = None) -> Iterator[SourceObject]:
    """The objects of one listing task; ``skipped(n)`` is told of entries left out."""
    skip = skipped or (lambda n: None)
    if source.scheme == "local":
        if task.kind == "tree":
            return _walk_local(source.location, task.path, skip)
        return _local_files(source.location, task, skip)
    if task.kind == "tree":
        return _s3_tree(source, task.path, skip)
    return _s3_files(source, task, skip)


def _usable_name(name: str) -> bool:
    if name.startswith(RESERVED_SEGMENT_PREFIX):
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _local_object(root: str, key: str, st: os.stat_result) -> SourceObject:
    return SourceObject(key, st.st_size, int(st.st_mtime), local_checksum(st), f"local://{root.rstrip('/')}/{key}")


def _local_entry(root: str, key: str, st: os.stat_result, path: str) -> SourceObject | None:
    """A regular file as an object it points at; a symbolic link, FIFO, socket or device as an
    entry of its own (``lakefuse.posix``: a link's target is stored as its object's bytes, see
    ``importer``); None for what cannot be imported (a link whose target is not UTF-8)."""
    if stat_mode.S_ISREG(st.st_mode):
        return _local_object(root, key, st)
    fmt = stat_mode.S_IFMT(st.st_mode)
    if fmt not in TYPE_OF_FORMAT:
        return None
    target = None
    data = b""
    if fmt == stat_mode.S_IFLNK:
        data = os.readlink(os.fsencode(path))
        try:
            target = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    metadata = special_metadata(fmt, target=target, device=st.st_rdev)
    if fmt != stat_mode.S_IFLNK:
        metadata[MODE_KEY] = format(stat_mode.S_IMODE(st.st_mode), "o")
    if st.st_mtime_ns % 1_000_000_000:
        metadata[MTIME_NS_KEY] = str(st.st_mtime_ns)
    return SourceObject(key, len(data), int(st.st_mtime), "", "", tuple(sorted(metadata.items())), data)


def _walk_local(root: str, path: str, skip) -> Iterator[SourceObject]:
    stack = [path]
    while stack:
        rel = stack.pop()
        directory = os.path.join(root, rel) if rel else root
        try:
            with os.scandir(directory) as it:
                entries = list(it)
        except FileNotFoundError:
            continue  # removed while we listed
        except OSError as exc:
            raise StorageError(f"cannot list {directory}: {exc.strerror or exc}") from None
        for entry in entries:
            name = entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if _usable_name(name):
                        stack.append(rel + name + "/")
                    else:
                        skip(1)
                    continue
                st = entry.stat(follow_symlinks=False)
                obj = _local_entry(root, rel + name, st, entry.path) if _usable_name(name) else None
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"cannot stat {entry.path}: {exc.strerror or exc}") from None
            if obj is not None:
                yield obj
            else:
                skip(1)


def _local_files(root: str, task: ListingTask, skip) -> Iterator[SourceObject]:
    directory = os.path.join(root, task.path) if task.path else root
    try:
        with os.scandir(directory) as it:
            entries = list(it)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot list {directory}: {exc.strerror or exc}") from None
    for entry in entries:
        name = entry.name
        if task.buckets > 1 and zlib.crc32(os.fsencode(name)) % task.buckets != task.bucket:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                continue  # a tree task of its own
            st = entry.stat(follow_symlinks=False)
            obj = _local_entry(root, task.path + name, st, entry.path) if _usable_name(name) else None
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(f"cannot stat {entry.path}: {exc.strerror or exc}") from None
        if obj is not None:
            yield obj
        else:
            skip(1)


_clients: dict = {}
_clients_lock = threading.Lock()


def _s3_client(s3: S3Config | None):
    """One botocore client per S3 configuration and process (built by the s3 block module)."""
    config = s3 or S3Config()
    with _clients_lock:
        client = _clients.get(config)
        if client is None:
            from lakefuse.block.s3 import make_s3_client

            client = _clients[config] = make_s3_client(config)
        return client


def _s3_root(source: SourceLocation) -> tuple[str, str]:
    bucket, _, prefix = source.location.partition("/")
    return bucket, (prefix.strip("/") + "/" if prefix.strip("/") else "")


def _s3_object(bucket: str, root: str, item: dict) -> SourceObject | None:
    full_key = item["Key"]
    key = full_key[len(root) :]
    try:
        check_key(key)
    except InvalidArgument:
        return None
    etag = (item.get("ETag") or "").strip('"')
    return SourceObject(key, int(item["Size"]), int(item["LastModified"].timestamp()), etag, f"s3://{bucket}/{full_key}")


def _s3_pages(source: SourceLocation, request: dict) -> Iterator[dict]:
    client = _s3_client(source.s3)
    while True:
        try:
            response = client.list_objects_v2(**request)
        except Exception as exc:
            raise StorageError(f"cannot list {source.uri}: {_one_line(exc)}") from None
        yield response
        token = response.get("NextContinuationToken")
        if not response.get("IsTruncated") or not token:
            return
        request["ContinuationToken"] = token


def _s3_tree(source: SourceLocation, path: str, skip) -> Iterator[SourceObject]:
    bucket, root = _s3_root(source)
    for response in _s3_pages(source, {"Bucket": bucket, "Prefix": root + path}):
        for item in response.get("Contents", ()):
            obj = _s3_object(bucket, root, item)
            if obj is None:
                skip(1)
            else:
                yield obj


def _s3_files(source: SourceLocation, task: ListingTask, skip) -> Iterator[SourceObject]:
    bucket, root = _s3_root(source)
    full = root + task.path
    request = {"Bucket": bucket, "Prefix": full, "Delimiter": "/"}
    if task.after:
        request["StartAfter"] = full + task.after
    for response in _s3_pages(source, request):
        for item in response.get("Contents", ()):
            name = item["Key"][len(full) :]
            if task.until and name > task.until:
                return
            obj = _s3_object(bucket, root, item)
            if obj is None:
                skip(1)
            else:
                yield obj


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
