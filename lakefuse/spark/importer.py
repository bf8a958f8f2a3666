"""``lakefuse import``: ingest a local directory tree or an S3 prefix into a branch as one
commit, without copying data.

Pipeline (one Spark job per step, nothing but small summaries reaches the driver):

1. The driver checks everything first - repository, branch (not a tag or commit), no
   uncommitted changes under the prefix, the source outside every storage namespace and
   listable - and plans listing tasks (``sources``).
2. Executors list (walk subtrees / list S3 sub-prefixes) and turn each object into a record:
   key = prefix + path relative to the source, entry = full address of the object, size,
   mtime and checksum from the listing (``sources`` explains the local checksum).
3. One pass over the (persisted) records counts them and takes a deterministic sample: the
   ``SAMPLE_SIZE`` keys with the smallest CRC-32 (ties by key).  The number of partitions,
   ``ceil(count / records_per_partition)``, and the partition bounds, evenly spaced keys of the
   sorted sample, depend only on the set of keys - not on the cluster, the listing order or
   the task layout.
4. Records are range-partitioned on those bounds and sorted within partitions; each partition
   writes its ranges (``ranges.write_sorted_ranges``) and returns their RangeInfos.
5. The driver writes the metarange: the branch head with every key under the prefix replaced by
   the imported ranges (``ranges.replace_prefix``), and commits it on the branch (compare and
   swap; if the branch moved meanwhile it re-reads the head and assembles again).

``import_listing`` runs steps 3-5 on any RDD of ``sources.SourceObject`` (an inventory file, a
synthetic listing); ``import_objects`` plans and lists a directory / S3 prefix and calls it.

Hence a re-import of an unchanged source (same keys, sizes, mtimes, inodes / ETags) with the
same ``records_per_partition`` and range settings produces the same metarange ID.

Staged changes: the import refuses (``DirtyBranch``) when the branch has uncommitted changes
under the prefix (they would silently shadow imported objects); uncommitted changes elsewhere
stay staged on top of the new commit.  The commit is made even when nothing changed (it records
the import); its metadata names the source (``lakefuse.import.*``).  Import commits don't run
pre/post-commit hooks.
"""

from __future__ import annotations

import heapq
import math
import time
import zlib
from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import Mapping

from lakefuse.checksums import content_hasher
from lakefuse.config import committer_name
from lakefuse.errors import ConcurrentUpdate, DirtyBranch, InvalidArgument, ReadOnly, RefNotFound
from lakefuse.graveler.committed.encoding import encode_entry, encode_value, entry_identity, validate_key
from lakefuse.graveler.committed.files import GravelerFiles
from lakefuse.graveler.model import Entry, RangeInfo
from lakefuse.spark.executor import adapter_for, graveler_files
from lakefuse.spark.locations import check_outside_namespaces, key_prefix, normalize_location
from lakefuse.spark.ranges import check_ordered, replace_prefix, write_sorted_ranges
from lakefuse.spark.session import Progress
from lakefuse.spark.settings import JobSettings, settings_from_config
from lakefuse.spark.sources import SourceLocation, SourceObject, check_reachable, list_task, plan_listing

DEFAULT_RECORDS_PER_PARTITION = 100_000
MAX_PARTITIONS = 1024
SAMPLE_SIZE = 8192
COMMIT_ATTEMPTS = 5
CONTENT_TYPE = "application/octet-stream"
#: objects the import stores itself (targets of symbolic links), named by their content
INLINE_PREFIX = "data/posix-"


@dataclass(frozen=True)
class ImportSummary:
    repository: str
    branch: str
    source: str
    prefix: str
    commit_id: str
    metarange_id: str
    changed: bool  # False: the branch already had exactly this content
    objects: int
    bytes: int
    skipped: int  # listed entries left out (unusable names, links with non-UTF-8 targets)
    ranges: int
    ranges_uploaded: int  # ranges not already in storage
    listing_tasks: int
    partitions: int
    seconds: float

    def lines(self) -> list[str]:
        rate = self.objects / self.seconds if self.seconds > 0 else 0.0
        return [
            f"imported {self.objects} objects ({self.bytes} bytes) from {self.source} into "
            f"lakefs://{self.repository}/{self.branch}/{self.prefix}",
            f"commit {self.commit_id}  metarange {self.metarange_id}" + ("" if self.changed else "  (content unchanged)"),
            f"{self.ranges} ranges ({self.ranges_uploaded} new), {self.partitions} partitions, "
            f"{self.listing_tasks} listing tasks, {self.skipped} entries skipped, "
            f"{self.seconds:.1f}s ({rate:.0f} objects/s)",
        ]


def import_objects(
    spark,
    app,
    repository: str,
    branch: str,
    source: str,
    *,
    prefix: str = "",
    message: str | None = None,
    committer: str | None = None,
    metadata: Mapping[str, str] | None = None,
    settings: JobSettings | None = None,
    records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION,
    progress: Progress | None = None,
) -> ImportSummary:
    """Import ``source`` (a local directory or ``s3://bucket/prefix``) under ``prefix`` of
    ``branch`` as one commit (see the module docstring).  ``app`` provides ``graveler``,
    ``catalog`` and ``config`` (``lakefuse.app.App``)."""
    progress = progress or Progress("import")
    settings = settings or settings_from_config(app.config)
    graveler = app.graveler
    # everything that can be wrong is checked before any write
    prefix = check_target(graveler, repository, branch, prefix)
    location = SourceLocation(normalize_location(source), settings.s3)
    check_outside_namespaces(location.uri, graveler.list_repositories(), "import source")
    check_reachable(location)
    sc = spark.sparkContext
    tasks = plan_listing(location, min_tasks=4 * sc.defaultParallelism)
    if not tasks:
        raise InvalidArgument(f"import source {location.uri} holds no objects")
    skipped = sc.accumulator(0)
    slices = max(1, min(len(tasks), 16 * sc.defaultParallelism))
    objects = sc.parallelize(tasks, slices).flatMap(_lister(location, skipped))
    return import_listing(
        spark,
        app,
        repository,
        branch,
        objects,
        source_label=location.uri,
        prefix=prefix,
        message=message,
        committer=committer,
        metadata=metadata,
        settings=settings,
        records_per_partition=records_per_partition,
        progress=progress,
        listing_tasks=len(tasks),
        skipped=skipped,
    )


def import_listing(
    spark,
    app,
    repository: str,
    branch: str,
    objects,
    *,
    source_label: str,
    prefix: str = "",
    message: str | None = None,
    committer: str | None = None,
    metadata: Mapping[str, str] | None = None,
    settings: JobSettings | None = None,
    records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION,
    progress: Progress | None = None,
    listing_tasks: int = 0,
    skipped=None,
) -> ImportSummary:
    """Import an RDD of ``sources.SourceObject`` (keys relative to ``prefix``, full addresses)
    - any listing: an inventory file, a synthetic one - under ``prefix`` of ``branch`` as one
    commit.  Steps 3-5 of the module docstring; ``source_label`` names the source in the commit
    metadata."""
    from pyspark import StorageLevel

    progress = progress or Progress("import")
    started = time.monotonic()
    if records_per_partition < 1:
        raise InvalidArgument(f"records_per_partition must be at least 1, got {records_per_partition}")
    graveler = app.graveler
    settings = settings or settings_from_config(app.config)
    prefix = check_target(graveler, repository, branch, prefix)
    repo = graveler.repository(repository)
    tasks_note = f" ({listing_tasks} listing tasks)" if listing_tasks else ""
    progress(f"importing {source_label} into lakefs://{repository}/{branch}/{prefix}{tasks_note}")

    records = objects.map(_recorder(prefix, repo.storage_namespace, settings))
    records.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with progress.step(spark, "listing the source"):
            count, total_bytes, sample = records.mapPartitions(_partition_stats).fold((0, 0, []), _merge_stats)
        skipped_count = int(skipped.value) if skipped is not None else 0
        progress(f"listed {count} objects ({total_bytes} bytes), {skipped_count} entries skipped")
        if count == 0:
            raise InvalidArgument(f"import source {source_label} holds no objects")
        bounds = partition_bounds(sorted(key for _crc, key in sample), count, records_per_partition)
        partitions = len(bounds) + 1
        with progress.step(spark, f"sorting into {partitions} partitions and writing ranges"):
            written = (
                records.repartitionAndSortWithinPartitions(partitions, RangeBounds(bounds))
                .mapPartitionsWithIndex(_range_writer(repo.storage_namespace, settings))
                .collect()
            )
    finally:
        records.unpersist()
    written.sort(key=lambda item: (item[0], item[1]))
    ranges = [info for _index, _seq, info, _uploaded in written]
    check_ordered(ranges)
    uploaded = sum(1 for *_rest, was_uploaded in written if was_uploaded)
    progress(f"wrote {len(ranges)} ranges ({uploaded} new)")

    message = message or f"Import {source_label} into {prefix or '/'}"
    commit_metadata = {
        **dict(metadata or {}),
        "lakefuse.import.source": source_label,
        "lakefuse.import.prefix": prefix,
        "lakefuse.import.objects": str(count),
    }
    commit, changed = commit_ranges(
        app, repository, branch, prefix, ranges, message, committer or committer_name(app.config), commit_metadata
    )
    progress(f"committed {commit.id[:12]} on {branch}")
    return ImportSummary(
        repository=repository,
        branch=branch,
        source=source_label,
        prefix=prefix,
        commit_id=commit.id,
        metarange_id=commit.metarange_id,
        changed=changed,
        objects=count,
        bytes=total_bytes,
        skipped=skipped_count,
        ranges=len(ranges),
        ranges_uploaded=uploaded,
        listing_tasks=listing_tasks,
        partitions=partitions,
        seconds=time.monotonic() - started,
    )


def check_target(graveler, repository: str, branch: str, prefix: str) -> str:
    """Check the repository, the branch and the prefix; returns the normalized prefix."""
    graveler.repository(repository)
    writable_branch(graveler, repository, branch)
    prefix = key_prefix(prefix)
    if prefix:
        validate_key(prefix.encode("utf-8"))
    require_clean_prefix(graveler, repository, branch, prefix)
    return prefix


def writable_branch(graveler, repository: str, branch: str):
    """The branch, ``ReadOnly`` if ``branch`` names a tag or commit, else ``RefNotFound``."""
    try:
        return graveler.get_branch(repository, branch)
    except RefNotFound:
        try:
            resolved = graveler.resolve(repository, branch)
        except (RefNotFound, InvalidArgument):
            raise RefNotFound(f"branch {branch!r} not found in repository {repository!r}") from None
        raise ReadOnly(f"{branch!r} is {resolved.kind.with_article} of repository {repository!r}, not a branch") from None


def require_clean_prefix(graveler, repository: str, branch: str, prefix: str) -> None:
    changes = graveler.diff_uncommitted(repository, branch, prefix.encode("utf-8"))
    first = next(iter(changes), None)
    if first is not None:
        where = f"under {prefix!r}" if prefix else "on it"
        raise DirtyBranch(
            f"branch {branch!r} of repository {repository!r} has uncommitted changes {where} "
            f"(e.g. {first.key.decode('utf-8', 'replace')!r}); commit or reset them before importing"
        )


# ---------------------------------------------------------------------------------------------
# partitioning


def partition_bounds(sample_keys: list[bytes], count: int, records_per_partition: int) -> list[bytes]:
    """Strictly increasing partition bounds from a sorted deterministic sample of keys."""
    wanted = max(1, min(MAX_PARTITIONS, math.ceil(count / records_per_partition), len(sample_keys)))
    bounds: list[bytes] = []
    for i in range(1, wanted):
        key = sample_keys[(i * len(sample_keys)) // wanted]
        if not bounds or key > bounds[-1]:
            bounds.append(key)
    return bounds


class RangeBounds:
    """Spark partition function: the partition of a key is the number of bounds <= key."""

    def __init__(self, bounds: list[bytes]):
        self.bounds = bounds

    def __call__(self, key: bytes) -> int:
        return bisect_right(self.bounds, key)


def _partition_stats(records):
    totals = [0, 0]

    def keyed():
        for key, (size, _raw) in records:
            totals[0] += 1
            totals[1] += size
            yield zlib.crc32(key), key

    sample = heapq.nsmallest(SAMPLE_SIZE, keyed())
    yield totals[0], totals[1], sample


def _merge_stats(left, right):
    return left[0] + right[0], left[1] + right[1], heapq.nsmallest(SAMPLE_SIZE, left[2] + right[2])


# ---------------------------------------------------------------------------------------------
# executor functions


def source_record(prefix: str, obj: SourceObject) -> tuple[bytes, tuple[int, bytes]]:
    """``(key, (size, encoded value))`` of a listed object (its ``address`` set: see
    ``store_inline``)."""
    entry = Entry(
        physical_address=obj.address,
        size=obj.size,
        mtime=obj.mtime,
        checksum=obj.checksum,
        content_type=CONTENT_TYPE,
        metadata=dict(obj.metadata),
        address_is_full=obj.address.partition("://")[1] != "",
    )
    return (prefix + obj.key).encode("utf-8"), (obj.size, encode_value(entry_identity(entry), encode_entry(entry)))


def inline_address(data: bytes) -> tuple[str, str]:
    """``(address in the storage namespace, checksum)`` of an object the import stores itself:
    named by its content, so a re-import stores and references the same object."""
    hasher = content_hasher()
    hasher.update(data)
    checksum = hasher.hexdigest()
    return f"{INLINE_PREFIX}{checksum.rpartition(':')[2]}", checksum


def store_inline(namespace: str, settings: JobSettings, obj: SourceObject) -> SourceObject:
    """``obj`` with the bytes it carries (a symbolic link's target, a special file's empty
    content) stored in the repository's namespace and its address set.  Written every time
    (also when present): a fresh modification time keeps ``gc`` from deleting it before the
    import commits."""
    if obj.data is None:
        return obj
    address, checksum = inline_address(obj.data)
    adapter_for(namespace, settings.s3).put(address, obj.data)
    return replace(obj, address=address, checksum=checksum, size=len(obj.data), data=None)


def _recorder(prefix: str, namespace: str, settings: JobSettings):
    def run(obj: SourceObject):
        return source_record(prefix, store_inline(namespace, settings, obj))

    return run


def _lister(location: SourceLocation, skipped):
    def run(task):
        return list_task(location, task, skipped.add)

    return run


def _range_writer(namespace: str, settings: JobSettings):
    def run(index, records):
        files = graveler_files(namespace, settings)
        raw_records = ((key, raw) for key, (_size, raw) in records)
        for seq, (info, uploaded) in enumerate(write_sorted_ranges(files, settings.committed, raw_records)):
            yield index, seq, info, uploaded

    return run


# ---------------------------------------------------------------------------------------------
# commit (driver)


def driver_files(app, namespace: str) -> GravelerFiles:
    return GravelerFiles(app.catalog.block(namespace), getattr(app, "file_cache", None))


def commit_ranges(
    app,
    repository: str,
    branch: str,
    prefix: str,
    ranges: list[RangeInfo],
    message: str,
    committer: str,
    metadata: Mapping[str, str],
):
    """Commit the branch head with the keys under ``prefix`` replaced by ``ranges``; returns
    ``(commit, changed)``.  Retries when the branch moves meanwhile."""
    graveler = app.graveler
    repo = graveler.repository(repository)
    store = graveler.committed_store(repo.storage_namespace)
    files = driver_files(app, repo.storage_namespace)
    for _attempt in range(COMMIT_ATTEMPTS):
        state = graveler.get_branch(repository, branch)
        require_clean_prefix(graveler, repository, branch, prefix)
        head = graveler.get_commit(repository, state.commit_id)
        metarange = replace_prefix(store, files, head.metarange_id, prefix.encode("utf-8"), ranges)
        try:
            commit = graveler.commit_metarange(repository, state, metarange, message, committer, metadata)
        except ConcurrentUpdate:
            continue
        return commit, metarange != head.metarange_id
    raise ConcurrentUpdate(f"branch {branch!r} of repository {repository!r} kept moving; the import was not committed, retry")
