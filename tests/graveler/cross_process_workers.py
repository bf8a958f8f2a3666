"""Workers of the cross-process staging/commit races (run in spawned processes by
test_cross_process.py).

Each worker opens the database and the storage namespace itself, exactly like a second lakefuse
process (a mount and a CLI) would, and reports what it was told through a queue:

- ``writer_worker`` stages single keys and multi-key batches in a loop and reports the ones
  that succeeded;
- ``committer_worker`` commits in a loop until the writer is done and reports its commits;
- ``racing_committer_worker`` stages its own keys and commits, first in lockstep rounds with
  another racing committer (both commit at the same moment), then free-running.

Any unexpected exception is reported as an error (never raised into the void).
"""

from __future__ import annotations

import hashlib
import time
import traceback

from lakefuse.config import CommittedConfig

BARRIER_TIMEOUT_S = 60
BATCH_SIZE = 6  # keys b/<batch>/0..5 of one ``stage`` call
RENAMED_DISTANCE = 30  # a batch also deletes the single key written this many steps earlier
#: small ranges: a few thousand keys already span several range files
RANGES = CommittedConfig(range_min_bytes=4000, range_max_bytes=16000, range_raggedness=32)


def record(key: str, content: str):
    """The record of ``key`` holding ``content`` (same content -> same identity)."""
    from lakefuse.graveler.committed.encoding import entry_to_record
    from lakefuse.graveler.model import Entry

    checksum = hashlib.md5(content.encode()).hexdigest()
    entry = Entry(physical_address="data/" + checksum, size=len(content), mtime=1_700_000_000, checksum=checksum)
    return entry_to_record(key.encode(), entry)


def open_graveler(url: str, staging_page_size: int = 1000):
    """A Graveler on its own connection pool and committed store: ``(graveler, close)``."""
    from lakefuse.block.namespace import open_namespace
    from lakefuse.db import SqlRefStore, SqlStagingStore, open_database
    from lakefuse.graveler.committed import CommittedManager
    from lakefuse.graveler.graveler import Graveler

    database = open_database(url)
    managers = []

    def committed_for(namespace: str):
        manager = CommittedManager(open_namespace(namespace), None, None, RANGES, upload_threads=0)
        managers.append(manager)
        return manager

    graveler = Graveler(SqlRefStore(database), SqlStagingStore(database, page_size=staging_page_size), committed_for)

    def close() -> None:
        for manager in managers:
            manager.close()
        database.close()

    return graveler, close


def single_key(step: int) -> str:
    return f"w/{step:06d}"


def batch_keys(step: int) -> list[str]:
    return [f"b/{step:06d}/{index}" for index in range(BATCH_SIZE)]


def writer_worker(url, repo, branch, seconds, start, writer_done, results) -> None:
    """Stage ``w/<step>`` every step and, every third step, one ``stage`` call writing the
    batch ``b/<step>/0..5`` and deleting ``w/<step - 30>`` (a "rename": all or nothing)."""
    report = {"puts": [], "batches": [], "failed": [], "errors": []}
    close = None
    try:
        from lakefuse.errors import LakefuseError

        graveler, close = open_graveler(url)
        start.wait(BARRIER_TIMEOUT_S)
        deadline = time.monotonic() + seconds
        step = 0
        while time.monotonic() < deadline:
            key = single_key(step)
            try:
                graveler.set(repo, branch, record(key, f"put {step}"))
                report["puts"].append(step)
            except LakefuseError as exc:
                report["failed"].append(f"put {key}: {type(exc).__name__}: {exc}")
            if step % 3 == 2:
                changes = [(name.encode(), record(name, f"batch {step}")) for name in batch_keys(step)]
                if step >= RENAMED_DISTANCE:
                    changes.append((single_key(step - RENAMED_DISTANCE).encode(), None))
                try:
                    graveler.stage(repo, branch, changes)
                    report["batches"].append(step)
                except LakefuseError as exc:
                    report["failed"].append(f"batch {step}: {type(exc).__name__}: {exc}")
            step += 1
    except BaseException:
        report["errors"].append(traceback.format_exc())
        start.abort()
    finally:
        writer_done.set()
        if close is not None:
            close()
    results.put(("writer", report))


def committer_worker(url, repo, branch, staging_page_size, start, writer_done, results) -> None:
    """Commit in a loop until the writer is done.  Reads the sealed tokens in pages of
    ``staging_page_size`` rows, so one batch spans several reads of the commit."""
    report = {"commits": [], "no_changes": 0, "conflicts": 0, "errors": []}
    close = None
    try:
        from lakefuse.errors import ConcurrentUpdate, NoChanges

        graveler, close = open_graveler(url, staging_page_size)
        start.wait(BARRIER_TIMEOUT_S)
        deadline = time.monotonic() + BARRIER_TIMEOUT_S
        while not writer_done.is_set() and time.monotonic() < deadline:
            try:
                commit = graveler.commit(repo, branch, f"auto {len(report['commits'])}", "committer")
                report["commits"].append(commit.id)
            except NoChanges:
                report["no_changes"] += 1
                time.sleep(0.005)
            except ConcurrentUpdate:
                report["conflicts"] += 1
    except BaseException:
        report["errors"].append(traceback.format_exc())
        start.abort()
    finally:
        if close is not None:
            close()
    results.put(("committer", report))


def racing_committer_worker(url, repo, branch, worker, lockstep_rounds, free_rounds, barrier, results) -> None:
    """Round r: stage ``p<worker>/<r>/0..2`` (one batch) and commit.  Lockstep rounds wait for
    the other racer between staging and committing, so both commit at the same moment.
    Reports each attempt's outcome: ``(phase, round, "won", commit_id)``, ``"conflict"`` or
    ``"no-changes"``."""
    report = {"worker": worker, "attempts": [], "staged": [], "errors": []}
    close = None
    try:
        from lakefuse.errors import ConcurrentUpdate, NoChanges

        graveler, close = open_graveler(url, staging_page_size=2)
        barrier.wait(BARRIER_TIMEOUT_S)

        def one_round(phase: str, round_: int) -> None:
            names = [f"p{worker}/{phase}/{round_:04d}/{index}" for index in range(3)]
            graveler.stage(repo, branch, [(name.encode(), record(name, name)) for name in names])
            report["staged"].extend(names)
            if phase == "lockstep":
                barrier.wait(BARRIER_TIMEOUT_S)
            try:
                commit = graveler.commit(repo, branch, f"{worker} {phase} {round_}", f"racer-{worker}")
                report["attempts"].append((phase, round_, "won", commit.id))
            except ConcurrentUpdate:
                report["attempts"].append((phase, round_, "conflict", None))
            except NoChanges:
                report["attempts"].append((phase, round_, "no-changes", None))

        for round_ in range(lockstep_rounds):
            one_round("lockstep", round_)
            barrier.wait(BARRIER_TIMEOUT_S)  # both attempts of this round are over
        for round_ in range(free_rounds):
            one_round("free", round_)
    except BaseException:
        report["errors"].append(traceback.format_exc())
        barrier.abort()
    finally:
        if close is not None:
            close()
    results.put(("racer", report))
