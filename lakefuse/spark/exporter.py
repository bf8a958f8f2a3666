"""``lakefuse export``: copy every object of a commit to a plain local directory or S3 prefix.

The driver resolves the ref to a commit (a branch means its head commit: staged changes are
not exported), checks the destination (outside every storage namespace, creatable / listable),
removes a ``_SUCCESS`` marker left by an earlier run, and splits the commit's ranges into tasks
of at most ``objects_per_task`` entries.  Executors read their range straight from the storage
namespace and copy each object with a few threads: an object already at the destination with
the entry's size is skipped (so re-running resumes), others are written atomically (the local
adapter writes a temporary file and renames it; an S3 PUT is atomic).  Object paths become
destination keys unchanged.  In a local destination a symbolic link entry (``lakefuse.posix``)
is written as a symbolic link, and a FIFO, socket or device entry as one (devices need the
privilege to make them); in S3 they are objects like the others (a link's bytes are its
target).  Only when every object is in place does the driver write
``_SUCCESS`` (a small JSON document naming the commit), last; otherwise the job fails naming the
first failures and leaves no marker.
"""

from __future__ import annotations

import json
import math
import os
import stat as stat_mode
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from lakefuse.block.namespace import parse_namespace
from lakefuse.errors import LakefuseError, ObjectNotFound, StorageError
from lakefuse.graveler.model import Entry
from lakefuse.posix import file_format, permissions, rdev, symlink_target
from lakefuse.spark.executor import adapter_for, iter_range_entries, locate_entry
from lakefuse.spark.locations import check_outside_namespaces, normalize_location
from lakefuse.spark.session import Progress
from lakefuse.spark.settings import JobSettings, settings_from_config

SUCCESS_MARKER = "_SUCCESS"
DEFAULT_OBJECTS_PER_TASK = 2000
DEFAULT_THREADS_PER_TASK = 8
SMALL_OBJECT_BYTES = 8 * 1024 * 1024  # copied through memory; larger ones through a temp file
MAX_REPORTED_FAILURES = 10


@dataclass(frozen=True)
class ExportSummary:
    repository: str
    ref: str
    commit_id: str
    destination: str
    objects: int
    copied: int
    skipped: int  # already at the destination with the right size
    bytes_copied: int
    failed: int
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        rate = self.bytes_copied / self.seconds / 1e6 if self.seconds > 0 else 0.0
        return [
            f"exported {self.objects} objects of lakefs://{self.repository}/{self.ref} "
            f"(commit {self.commit_id[:12]}) to {self.destination}",
            f"{self.copied} copied ({self.bytes_copied} bytes, {rate:.1f} MB/s), {self.skipped} already there, "
            f"{self.failed} failed, {self.seconds:.1f}s",
        ]


def export_commit(
    spark,
    app,
    repository: str,
    ref: str,
    destination: str,
    *,
    settings: JobSettings | None = None,
    objects_per_task: int = DEFAULT_OBJECTS_PER_TASK,
    threads_per_task: int = DEFAULT_THREADS_PER_TASK,
    progress: Progress | None = None,
) -> ExportSummary:
    """Copy the objects of the commit ``ref`` resolves to under ``destination`` (a local
    directory, created if needed, or ``s3://bucket/prefix``); see the module docstring."""
    progress = progress or Progress("export")
    started = time.monotonic()
    graveler = app.graveler
    settings = settings or settings_from_config(app.config)
    repo = graveler.repository(repository)
    commit = graveler.resolve(repository, ref).commit
    dest_uri = normalize_location(destination)
    check_outside_namespaces(dest_uri, graveler.list_repositories(), "export destination")
    dest = _prepare_destination(dest_uri, settings)
    store = graveler.committed_store(repo.storage_namespace)
    ranges = list(store.ranges(commit.metarange_id))
    objects = sum(info.count for info in ranges)
    progress(f"exporting {objects} objects of lakefs://{repository}/{ref} (commit {commit.id[:12]}) to {dest_uri}")
    dest.delete(SUCCESS_MARKER)

    tasks = []
    for info in ranges:
        parts = max(1, math.ceil(info.count / max(1, objects_per_task)))
        tasks.extend((info.id, part, parts) for part in range(parts))
    totals = (0, 0, 0, 0, [])
    if tasks:
        sc = spark.sparkContext
        copier = _copier(repo.storage_namespace, dest_uri, settings, max(1, threads_per_task))
        with progress.step(spark, f"copying in {len(tasks)} tasks"):
            totals = sc.parallelize(tasks, len(tasks)).mapPartitions(copier).fold((0, 0, 0, 0, []), _merge_counts)
    copied, skipped, copied_bytes, failed, failures = totals
    summary = ExportSummary(
        repository=repository,
        ref=ref,
        commit_id=commit.id,
        destination=dest_uri,
        objects=objects,
        copied=copied,
        skipped=skipped,
        bytes_copied=copied_bytes,
        failed=failed,
        failures=list(failures),
        seconds=time.monotonic() - started,
    )
    if failed:
        raise StorageError(
            f"export to {dest_uri} incomplete: {failed} of {objects} objects failed (first: {failures[0]}); "
            "no _SUCCESS written; re-run to resume",
            summary=summary,
        )
    marker = {"repository": repository, "ref": ref, "commit_id": commit.id, "objects": objects}
    dest.put(SUCCESS_MARKER, (json.dumps(marker, sort_keys=True) + "\n").encode())
    progress(f"done: {copied} copied, {skipped} already there; wrote {SUCCESS_MARKER}")
    return summary


def _prepare_destination(dest_uri: str, settings: JobSettings):
    scheme, location = parse_namespace(dest_uri)
    if scheme == "local":
        try:
            os.makedirs(location, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create export destination {dest_uri}: {exc.strerror or exc}") from None
        if not os.access(location, os.W_OK | os.X_OK):
            raise StorageError(f"export destination {dest_uri} is not writable")
    dest = adapter_for(dest_uri, settings.s3)
    try:
        next(iter(dest.list(page_size=1)), None)
    except LakefuseError as exc:
        raise StorageError(f"export destination {dest_uri} cannot be listed: {exc.message}") from None
    return dest


def _merge_counts(left, right):
    failures = (left[4] + right[4])[:MAX_REPORTED_FAILURES]
    return left[0] + right[0], left[1] + right[1], left[2] + right[2], left[3] + right[3], failures


def _copier(namespace: str, dest_uri: str, settings: JobSettings, threads: int):
    def run(tasks):
        dest = adapter_for(dest_uri, settings.s3)
        counts = [0, 0, 0, 0, []]
        with ThreadPoolExecutor(threads, thread_name_prefix="lakefuse-export") as pool:
            for range_id, part, parts in tasks:
                entries = [item for i, item in enumerate(iter_range_entries(namespace, settings, range_id)) if i % parts == part]
                for key, outcome in zip(
                    (key for key, _entry in entries),
                    pool.map(lambda item: _copy_one(namespace, settings, dest, item[0], item[1]), entries),
                ):
                    kind, size, error = outcome
                    if kind == "copied":
                        counts[0] += 1
                        counts[2] += size
                    elif kind == "skipped":
                        counts[1] += 1
                    else:
                        counts[3] += 1
                        if len(counts[4]) < MAX_REPORTED_FAILURES:
                            counts[4].append(f"{key.decode('utf-8', 'replace')}: {error}")
        yield tuple(counts)

    return run


def _copy_one(namespace: str, settings: JobSettings, dest, key_bytes: bytes, entry: Entry):
    """``("copied" | "skipped" | "failed", bytes, error)`` for one object."""
    try:
        key = key_bytes.decode("utf-8")
        root = getattr(dest, "root", None)
        if root and file_format(entry.metadata) != stat_mode.S_IFREG:
            return _make_special(os.path.join(root, key), entry)
        try:
            if dest.stat(key).size == entry.size:
                return "skipped", 0, ""
        except ObjectNotFound:
            pass
        source, source_key = locate_entry(namespace, settings.s3, entry)
        root = getattr(source, "root", None)
        if source.uri.startswith("local://") and root:
            stat = dest.put_file(key, os.path.join(root, source_key))
        elif entry.size <= SMALL_OBJECT_BYTES:
            stat = dest.put(key, source.get(source_key))
        else:
            fd, tmp = tempfile.mkstemp(prefix="lakefuse-export-")
            os.close(fd)
            try:
                source.get_to_file(source_key, tmp)
                stat = dest.put_file(key, tmp)
            finally:
                os.unlink(tmp)
        if stat.size != entry.size:
            return "failed", 0, f"copied {stat.size} bytes, the entry says {entry.size}"
        return "copied", stat.size, ""
    except LakefuseError as exc:
        return "failed", 0, exc.message
    except OSError as exc:
        return "failed", 0, exc.strerror or str(exc)


def _make_special(path: str, entry: Entry):
    """Write a symbolic link, FIFO, socket or device entry as what it is (a local destination):
    ``("copied" | "skipped", 0, "")``; one already there, the same, is skipped.  Devices need
    the privilege to make them (else the object fails with EPERM)."""
    metadata = entry.metadata
    fmt = file_format(metadata)
    target = symlink_target(metadata)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if fmt == stat_mode.S_IFLNK and stat_mode.S_ISLNK(st.st_mode) and os.readlink(path) == target:
            return "skipped", 0, ""
        if fmt != stat_mode.S_IFLNK and stat_mode.S_IFMT(st.st_mode) == fmt and st.st_rdev == rdev(metadata):
            return "skipped", 0, ""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = f"{path}.lakefuse-export-{os.getpid()}-{threading.get_ident()}"
    if fmt == stat_mode.S_IFLNK:
        if target is None:
            return "failed", 0, "a symbolic link entry without its target"
        os.symlink(target, temporary)
    else:
        os.mknod(temporary, fmt | permissions(metadata, 0o644), rdev(metadata))
        os.chmod(temporary, permissions(metadata, 0o644))  # not narrowed by the umask
    os.replace(temporary, path)  # atomic, over whatever was there
    return "copied", 0, ""
