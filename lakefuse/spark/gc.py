"""``lakefuse gc``: find (and delete) the data objects of a repository nothing references.

What is referenced (lakeFS semantics):

- every object of a *retained* commit: each branch head and each tagged commit, and every
  commit reachable from a branch head (through all parents) created within
  ``retention_days`` of now;
- every object staged on a branch (its staging token and the sealed tokens of commits in
  progress).

Everything else under ``data/`` of the storage namespace is garbage: objects of commits that
expired or that no branch reaches any more, and uncommitted objects overwritten or deleted
before a commit.  Objects younger than ``min_age_seconds`` (mtime) are never deleted (an upload
may not be staged yet, a commit may be under way, a mount may be writing a file made under
``data/`` where it becomes an object: for at most ``lakefuse.fs.spool.IN_PLACE_SECONDS``), nor
objects modified after the listing began; they are counted as ``too_young``.  Never
touched: anything outside ``data/`` - ``_lakefs/`` (ranges, metaranges), action logs, markers,
foreign files - the namespaces of other repositories nested inside this one, and objects with
full addresses outside the namespace (imports); a full address that points inside the
namespace counts as a reference.

Order, so that a concurrent writer cannot lose data: the namespace is listed (and the listing
persisted) first; then the branches are read, the staging areas of their tokens, the branches
again (new heads and tokens are added), the tags, and the commits.  Anything written after the
listing began is not a candidate; anything referenced before the references were read is kept.

Distributed: the namespace listing is split into key ranges of ``data/`` (addresses start
with the upload time in hex, so ranges are time slices); executors read the metaranges of the
retained commits, then the distinct ranges, emitting physical addresses; the unreferenced set
is ``listing.subtractByKey(references)``; deletion runs on the executors.  The driver holds
the commit graph and the staged addresses (streamed to Spark in
batches), never the object listing nor the range IDs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from lakefuse.errors import CorruptedData, InvalidArgument, LakefuseError, StorageError
from lakefuse.graveler.committed.encoding import decode_entry
from lakefuse.graveler.model import Commit
from lakefuse.spark.executor import adapter_for, iter_range_entries, read_range_infos
from lakefuse.spark.locations import nested_namespaces
from lakefuse.spark.session import Progress
from lakefuse.spark.settings import JobSettings, settings_from_config

DATA_PREFIX = "data/"
DEFAULT_RETENTION_DAYS = 21
DEFAULT_MIN_AGE_SECONDS = 6 * 3600
STAGED_BATCH = 50_000
MAX_REPORTED_FAILURES = 10
_DAY = 86400


@dataclass(frozen=True)
class GCSummary:
    repository: str
    dry_run: bool
    retention_days: float
    min_age_seconds: float
    commits: int
    retained_commits: int
    metaranges: int
    staged_references: int
    listed: int  # objects under data/
    referenced: int  # of those, referenced
    candidates: int  # unreferenced and old enough: listed (dry run) or to delete
    candidate_bytes: int
    too_young: int  # unreferenced but younger than min_age_seconds: kept
    deleted: int = 0
    deleted_bytes: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        action = (
            f"{self.candidates} objects ({self.candidate_bytes} bytes) would be deleted (dry run)"
            if self.dry_run
            else f"deleted {self.deleted} objects ({self.deleted_bytes} bytes), {self.failed} failed"
        )
        return [
            f"gc of repository {self.repository!r}: retention {self.retention_days:g} days, min age {self.min_age_seconds:g}s",
            f"{self.retained_commits} of {self.commits} commits retained ({self.metaranges} metaranges), "
            f"{self.staged_references} staged references",
            f"{self.listed} data objects listed, {self.referenced} referenced, {self.too_young} unreferenced but too young",
            f"{action}, {self.seconds:.1f}s",
        ]


def collect_garbage(
    spark,
    app,
    repository: str,
    *,
    retention_days: float = DEFAULT_RETENTION_DAYS,
    min_age_seconds: float = DEFAULT_MIN_AGE_SECONDS,
    dry_run: bool = False,
    on_object: Callable[[str, int], None] | None = None,
    settings: JobSettings | None = None,
    listing_tasks: int | None = None,
    now: float | None = None,
    progress: Progress | None = None,
) -> GCSummary:
    """Collect the garbage of ``repository`` (see the module docstring).  ``on_object(key,
    size)`` is called on the driver for every candidate (dry run) or deleted object, streamed
    partition by partition.  ``now`` (seconds since the epoch) is for tests."""
    from pyspark import StorageLevel

    progress = progress or Progress("gc")
    started = time.monotonic()
    if retention_days < 0:
        raise InvalidArgument(f"retention days must not be negative, got {retention_days}")
    if min_age_seconds < 0:
        raise InvalidArgument(f"min age must not be negative, got {min_age_seconds}")
    now = time.time() if now is None else float(now)
    graveler = app.graveler
    settings = settings or settings_from_config(app.config)
    repo = graveler.repository(repository)
    namespace = repo.storage_namespace
    excluded = nested_namespaces(namespace, graveler.list_repositories(), repo.id)
    for prefix in excluded:
        progress(f"not listing {prefix}: the storage namespace of another repository")
    sc = spark.sparkContext

    # -- 1. list the namespace first -------------------------------------------------------
    listing_started = time.time()
    tasks = listing_ranges(repo.creation_date, now, listing_tasks or 4 * sc.defaultParallelism)
    listing = sc.parallelize(tasks, len(tasks)).flatMap(_namespace_lister(namespace, settings, excluded))
    listing.persist(StorageLevel.MEMORY_AND_DISK)
    unreferenced = candidates = None
    try:
        with progress.step(spark, f"listing {namespace}/{DATA_PREFIX} in {len(tasks)} tasks"):
            listed = listing.count()
        progress(f"listed {listed} data objects")

        # -- 2. references, read after the listing ----------------------------------------
        snapshot = read_references(graveler, repository)
        cutoff = int(now - retention_days * _DAY)
        retained = retained_commit_ids(snapshot.commits, snapshot.heads, snapshot.tagged, cutoff)
        metaranges = sorted({snapshot.commits[commit_id].metarange_id for commit_id in retained})
        progress(
            f"{len(retained)} of {len(snapshot.commits)} commits retained ({len(metaranges)} metaranges), "
            f"{len(snapshot.staged)} staged references"
        )
        committed_refs = (
            sc.parallelize(metaranges, max(1, min(len(metaranges), 4 * sc.defaultParallelism)))
            .flatMap(_metarange_ranges(namespace, settings))
            .distinct()
            .flatMap(_range_addresses(namespace, settings))
        )
        references = committed_refs.union(_parallelize_batches(sc, snapshot.staged)).map(lambda key: (key, None))

        # -- 3. set difference and age -------------------------------------------------------
        # never an object modified after the listing began (a re-listed partition could see it)
        oldest_allowed = min(now - min_age_seconds, listing_started)
        unreferenced = listing.subtractByKey(references)
        unreferenced.persist(StorageLevel.MEMORY_AND_DISK)
        with progress.step(spark, "computing unreferenced objects"):
            counts = unreferenced.map(lambda kv: _age_counts(kv, oldest_allowed)).fold((0, 0, 0), _add3)
        candidate_count, candidate_bytes, too_young = counts
        progress(f"{candidate_count} unreferenced objects ({candidate_bytes} bytes) old enough, {too_young} too young")
        candidates = unreferenced.filter(lambda kv: kv[1][1] <= oldest_allowed)

        # -- 4. list or delete -----------------------------------------------------------------
        deleted = deleted_bytes = failed = 0
        failures: list[str] = []
        if dry_run:
            if on_object is not None:
                with progress.step(spark, f"listing {candidate_count} candidates"):
                    for key, (size, _mtime) in candidates.toLocalIterator():
                        on_object(key, size)
        elif candidate_count:
            results = candidates.mapPartitions(_deleter(namespace, settings))
            results.persist(StorageLevel.MEMORY_AND_DISK)
            try:
                with progress.step(spark, f"deleting {candidate_count} objects"):
                    totals = results.map(_deletion_counts).fold((0, 0, 0, []), _merge_deletions)
                deleted, deleted_bytes, failed, failures = totals
                if on_object is not None:  # from the persisted results (deleting again is harmless)
                    for key, size, error in results.toLocalIterator():
                        if not error:
                            on_object(key, size)
            finally:
                results.unpersist()
    finally:
        listing.unpersist()
        if unreferenced is not None:
            unreferenced.unpersist()

    summary = GCSummary(
        repository=repository,
        dry_run=dry_run,
        retention_days=retention_days,
        min_age_seconds=min_age_seconds,
        commits=len(snapshot.commits),
        retained_commits=len(retained),
        metaranges=len(metaranges),
        staged_references=len(snapshot.staged),
        listed=listed,
        referenced=listed - candidate_count - too_young,
        candidates=candidate_count,
        candidate_bytes=candidate_bytes,
        too_young=too_young,
        deleted=deleted,
        deleted_bytes=deleted_bytes,
        failed=failed,
        failures=failures,
        seconds=time.monotonic() - started,
    )
    if failed:
        raise StorageError(
            f"gc of {repository!r}: {failed} deletions failed (first: {failures[0]}); re-run to retry", summary=summary
        )
    progress("done")
    return summary


# ---------------------------------------------------------------------------------------------
# references (driver)


@dataclass
class ReferenceSnapshot:
    commits: dict[str, Commit]
    heads: set[str]
    tagged: set[str]
    staged: list[str]  # relative physical addresses of staged entries (may repeat)


def read_references(graveler, repository: str) -> ReferenceSnapshot:
    """Branches, their staged addresses, branches again, tags, then commits (see the module
    docstring for why in this order)."""
    repo = graveler.repository(repository)
    namespace = repo.storage_namespace
    heads: set[str] = set()
    tokens_read: set[str] = set()
    staged: list[str] = []
    for _round in range(2):
        for branch in graveler.list_branches(repository):
            heads.add(branch.commit_id)
            for token in (branch.staging_token, *branch.sealed_tokens):
                if token in tokens_read:
                    continue
                tokens_read.add(token)
                for _key, record in graveler.staging.iterate(token):
                    if record is not None:
                        address = namespace_key(namespace, decode_entry(record.value))
                        if address is not None:
                            staged.append(address)
    tagged = {commit_id for _tag, commit_id in graveler.list_tags(repository)}
    commits = {commit.id: commit for commit in graveler.refs.list_commits(repo.id)}
    return ReferenceSnapshot(commits, heads, tagged, staged)


def retained_commit_ids(commits: Mapping[str, Commit], heads: Iterable[str], tagged: Iterable[str], cutoff: int) -> set[str]:
    """Heads and tagged commits, and every ancestor of a head created at or after ``cutoff``.
    ``CorruptedData`` if a head, tag or parent names a commit that does not exist: collecting
    garbage on an inconsistent graph could delete live data."""
    heads = set(heads)
    retained = set(heads) | set(tagged)
    for commit_id in retained:
        if commit_id not in commits:
            raise CorruptedData(f"commit {commit_id} (a branch head or tag) is missing; refusing to collect garbage")
    stack = list(heads)
    seen: set[str] = set()
    while stack:
        commit_id = stack.pop()
        if commit_id in seen:
            continue
        seen.add(commit_id)
        commit = commits.get(commit_id)
        if commit is None:
            raise CorruptedData(f"commit {commit_id} (a parent) is missing; refusing to collect garbage")
        if commit.creation_date >= cutoff:
            retained.add(commit_id)
        stack.extend(commit.parents)
    return retained


def namespace_key(namespace: str, entry) -> str | None:
    """The key inside ``namespace`` an entry's data lives at, or None if it lives elsewhere."""
    if not entry.address_is_full:
        return entry.physical_address
    root = namespace.rstrip("/") + "/"
    if entry.physical_address.startswith(root):
        return entry.physical_address[len(root) :]
    return None


def _parallelize_batches(sc, keys: list[str]):
    if not keys:
        return sc.emptyRDD()
    batches = [sc.parallelize(keys[i : i + STAGED_BATCH]) for i in range(0, len(keys), STAGED_BATCH)]
    return batches[0] if len(batches) == 1 else sc.union(batches)


# ---------------------------------------------------------------------------------------------
# listing


def listing_ranges(created: int, now: float, count: int) -> list[tuple[str, str]]:
    """``count`` + 1 key ranges ``(after, until)`` covering every key under ``data/``: time
    slices of the upload-time part of addresses, from a day before the repository was created
    to a day from now, plus open ends.  ``""`` is no bound."""
    count = max(1, int(count))
    low = (int(created) - _DAY) * 1000
    high = int(now + _DAY) * 1000
    bounds = [f"{DATA_PREFIX}{low + (high - low) * i // count:012x}" for i in range(count + 1)]
    edges = [""] + bounds + [""]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def _namespace_lister(namespace: str, settings: JobSettings, excluded: list[str]):
    excluded_tuple = tuple(excluded)

    def run(task):
        after, until = task
        adapter = adapter_for(namespace, settings.s3)
        for stat in adapter.list(DATA_PREFIX, start_after=after):
            key = stat.key
            if until and key > until:
                return
            if excluded_tuple and key.startswith(excluded_tuple):
                continue
            yield key, (stat.size, stat.mtime)

    return run


def _metarange_ranges(namespace: str, settings: JobSettings):
    def run(metarange_id):
        return [info.id for info in read_range_infos(namespace, settings, metarange_id)]

    return run


def _range_addresses(namespace: str, settings: JobSettings):
    def run(range_id):
        for _key, entry in iter_range_entries(namespace, settings, range_id):
            address = namespace_key(namespace, entry)
            if address is not None:
                yield address

    return run


def _age_counts(item, oldest_allowed: float) -> tuple[int, int, int]:
    _key, (size, mtime) = item
    if mtime <= oldest_allowed:
        return 1, size, 0
    return 0, 0, 1


def _add3(left, right):
    return left[0] + right[0], left[1] + right[1], left[2] + right[2]


# ---------------------------------------------------------------------------------------------
# deletion


def _deleter(namespace: str, settings: JobSettings):
    def run(items):
        adapter = adapter_for(namespace, settings.s3)
        for key, (size, _mtime) in items:
            if not key.startswith(DATA_PREFIX):  # never reached: the listing is of data/ only
                continue
            try:
                adapter.delete(key)
                yield key, size, ""
            except LakefuseError as exc:
                yield key, size, exc.message

    return run


def _merge_deletions(left, right):
    return left[0] + right[0], left[1] + right[1], left[2] + right[2], (left[3] + right[3])[:MAX_REPORTED_FAILURES]


def _deletion_counts(result) -> tuple[int, int, int, list[str]]:
    key, size, error = result
    if error:
        return 0, 0, 1, [f"{key}: {error}"]
    return 1, size, 0, []
