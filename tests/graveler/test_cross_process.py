"""Staged writes and commits racing across REAL processes, on SQLite (a file) and PostgreSQL.

What a second process (a mount next to a CLI, or another host) must never see:

- a staged write reported successful that no commit ever contains (a lost write);
- a commit holding part of a multi-key ``stage`` call (a half-committed directory rename);
- staged rows (or change-feed versions) left behind in a token no branch references any more;
- two commits racing on one branch both "winning" (a lost update): one wins, the other gets
  ``ConcurrentUpdate``, and the first-parent history holds every winner exactly once.

The workers live in ``cross_process_workers`` (spawned processes import them by name).
"""

from __future__ import annotations

import json
import multiprocessing
import queue

import pytest
from sqlalchemy import select, text

from lakefuse.db import open_database
from lakefuse.db.schema import DATA_TABLES, branches, staging_entries, staging_versions
from lakefuse.errors import NoChanges
from tests.graveler.cross_process_workers import (
    RENAMED_DISTANCE,
    batch_keys,
    committer_worker,
    open_graveler,
    racing_committer_worker,
    record,
    single_key,
    writer_worker,
)

WRITE_SECONDS = 4.0
COMMIT_PAGE_ROWS = 3  # the committer reads sealed tokens 3 rows at a time: a batch spans pages
LOCKSTEP_ROUNDS = 12
FREE_ROUNDS = 15
REPORT_TIMEOUT_S = 90


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request, tmp_path) -> str:
    """A database URL every process can open, empty."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'db' / 'lakefuse.db'}"
        open_database(url).close()
        return url
    database = request.getfixturevalue("graveler_pg_database")
    with database.write() as conn:
        conn.execute(text(f"TRUNCATE {', '.join(table.name for table in DATA_TABLES)}"))
    return database.engine.url.render_as_string(hide_password=False)


@pytest.fixture
def parent(shared_url, namespace):
    """This process's Graveler on the shared database, with repository ``race``."""
    graveler, close = open_graveler(shared_url)
    graveler.create_repository("race", namespace)
    yield graveler
    close()


def run_processes(targets_and_args) -> list[tuple[str, dict]]:
    """Start one spawned process per ``(target, args)`` (``args`` may name the shared queue as
    ``"results"``), collect one report from each, and make sure none is left running."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [
        context.Process(target=target, args=tuple(results if arg == "results" else arg for arg in args))
        for target, args in targets_and_args
    ]
    for process in processes:
        process.start()
    reports = []
    try:
        for _ in processes:
            reports.append(results.get(timeout=REPORT_TIMEOUT_S))
    except queue.Empty:
        pass
    finally:
        for process in processes:
            process.join(timeout=15)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
    assert len(reports) == len(processes), "a worker did not report back in time"
    for _kind, report in reports:
        assert report["errors"] == [], "\n".join(report["errors"])
    return reports


def final_commit(graveler) -> None:
    try:
        graveler.commit("race", "main", "final", "parent")
    except NoChanges:
        pass


def committed_keys(graveler, ref: str) -> dict[str, bytes]:
    """``key -> identity`` of everything in ``ref`` (listed page by page)."""
    return {key.decode(): value.identity for key, value in graveler.iter_objects("race", ref)}


def assert_no_orphan_staging_rows(url: str) -> None:
    """Every staged row and token version belongs to a token some branch still references."""
    database = open_database(url)
    try:
        with database.read() as conn:
            staged_tokens = set(conn.execute(select(staging_entries.c.token).distinct()).scalars())
            staged_tokens |= set(conn.execute(select(staging_versions.c.token)).scalars())
            referenced = set()
            for row in conn.execute(select(branches.c.staging_token, branches.c.sealed_tokens)):
                referenced.add(row.staging_token)
                referenced.update(json.loads(row.sealed_tokens))
    finally:
        database.close()
    assert staged_tokens <= referenced, f"staged rows in unreferenced tokens {sorted(staged_tokens - referenced)}"


def test_writes_racing_commits_of_another_process_are_never_lost_nor_split(shared_url, parent):
    context = multiprocessing.get_context("spawn")
    start, writer_done = context.Barrier(2), context.Event()
    reports = dict(
        run_processes(
            [
                (writer_worker, (shared_url, "race", "main", WRITE_SECONDS, start, writer_done, "results")),
                (committer_worker, (shared_url, "race", "main", COMMIT_PAGE_ROWS, start, writer_done, "results")),
            ]
        )
    )
    writer, committer = reports["writer"], reports["committer"]
    assert writer["failed"] == []
    assert len(committer["commits"]) >= 3, f"too few commits raced the writes: {committer}"
    final_commit(parent)
    assert list(parent.diff_uncommitted("race", "main")) == []

    # the final commit holds exactly what the writer was told it wrote, with its values
    expected = {single_key(step): record(single_key(step), f"put {step}").identity for step in writer["puts"]}
    for step in writer["batches"]:
        if step >= RENAMED_DISTANCE:
            expected.pop(single_key(step - RENAMED_DISTANCE), None)
        expected.update({name: record(name, f"batch {step}").identity for name in batch_keys(step)})
    final = committed_keys(parent, "main")
    assert sorted(set(expected) - set(final))[:10] == [], "writes reported successful are missing: lost"
    assert sorted(set(final) - set(expected))[:10] == []
    assert final == expected

    # every commit of the history holds whole batches (with their deletion) or none of them
    history = list(parent.log("race", "main"))
    assert set(committer["commits"]) <= {commit.id for commit in history}
    batches = set(writer["batches"])
    for commit in history:
        keys = set(committed_keys(parent, commit.id))
        for name in keys:
            if name.startswith("b/"):
                assert int(name.split("/")[1]) in batches, f"{name} of a failed batch in {commit.id[:12]}"
        for step in batches:
            present = [name in keys for name in batch_keys(step)]
            assert all(present) or not any(present), f"commit {commit.id[:12]} holds part of batch {step}: {present}"
            if all(present) and step >= RENAMED_DISTANCE:
                assert single_key(step - RENAMED_DISTANCE) not in keys, f"batch {step} committed without its delete"

    assert_no_orphan_staging_rows(shared_url)


def test_two_processes_committing_one_branch(shared_url, parent):
    initial = parent.get_branch("race", "main").commit_id
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    reports = run_processes(
        [
            (racing_committer_worker, (shared_url, "race", "main", worker, LOCKSTEP_ROUNDS, FREE_ROUNDS, barrier, "results"))
            for worker in (1, 2)
        ]
    )
    attempts = [(report["worker"], *attempt) for _kind, report in reports for attempt in report["attempts"]]
    assert len(attempts) == 2 * (LOCKSTEP_ROUNDS + FREE_ROUNDS)  # every attempt ended in a known outcome
    for round_ in range(LOCKSTEP_ROUNDS):
        outcomes = [outcome for _w, phase, r, outcome, _id in attempts if phase == "lockstep" and r == round_]
        # both staged before committing, so the first commit takes both changes: the other
        # commit lost the race (ConcurrentUpdate) or came after it and found nothing to commit
        assert sorted(outcomes) in (["conflict", "won"], ["no-changes", "won"]), f"lockstep round {round_}: {outcomes}"
    won = [commit_id for *_rest, outcome, commit_id in attempts if outcome == "won"]
    assert len(set(won)) == len(won)

    final_commit(parent)
    chain = [commit.id for commit in parent.log("race", "main")]
    assert len(chain) == len(set(chain))
    assert set(won) <= set(chain), "a winning commit is not in the history: a lost update"
    extra = set(chain) - set(won) - {initial}
    assert len(extra) <= 1 and all(parent.get_commit("race", c).message == "final" for c in extra)

    staged = {name for _kind, report in reports for name in report["staged"]}
    assert set(committed_keys(parent, "main")) == staged  # no staged change lost
    assert list(parent.diff_uncommitted("race", "main")) == []
    assert_no_orphan_staging_rows(shared_url)
