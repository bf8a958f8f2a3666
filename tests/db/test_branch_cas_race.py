"""Moving a branch head is a compare-and-swap: two real processes racing on one branch, on
SQLite (file) and PostgreSQL.  One wins, the other gets ConcurrentUpdate - never a lost update.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
from dataclasses import replace

from lakefuse.errors import ConcurrentUpdate
from lakefuse.graveler.model import Commit
from lakefuse.graveler.ports import Branch, Repository
from tests.db.cas_race import cas_worker

LOCKSTEP_ROUNDS = 25
FREE_ROUNDS = 150
JOIN_TIMEOUT_S = 90


def create_race_repo(refs) -> None:
    refs.create_repository(
        Repository("race", "local://race", "main", 1),
        Commit("c0", "mr0", (), "init", "tester", 1),
        Branch("main", "c0", "race/main/t0"),
    )


def assert_no_lost_update(refs, wins) -> None:
    """Every win moved the head from where the previous win left it, so the wins form one
    chain from the first commit to the final head, each head left exactly once."""
    successor = {}
    for _phase, _round, old, new in wins:
        assert old not in successor, f"two swaps both moved the head from {old}: a lost update"
        successor[old] = new
    chain, head = 0, "c0"
    while head in successor:
        head = successor[head]
        chain += 1
    assert chain == len(wins)
    assert refs.get_branch("race", "main").commit_id == head


def test_two_processes_racing_on_one_branch(sql_backend):
    refs = sql_backend.refs
    create_race_repo(refs)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    workers = [
        context.Process(
            target=cas_worker,
            args=(sql_backend.url, "race", "main", worker, LOCKSTEP_ROUNDS, FREE_ROUNDS, barrier, results),
        )
        for worker in (1, 2)
    ]
    for process in workers:
        process.start()
    reports = []
    try:
        for _ in workers:
            reports.append(results.get(timeout=JOIN_TIMEOUT_S))
    except queue.Empty:
        pass
    finally:
        for process in workers:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
    assert len(reports) == 2, "a worker did not report back in time"
    for report in reports:
        assert report["errors"] == [], f"worker {report['worker']} failed: {report['errors']}"

    wins = [win for report in reports for win in report["wins"]]

    # Lockstep: both read the same head, both swap: exactly one wins, the other conflicts.
    for round_ in range(LOCKSTEP_ROUNDS):
        winners = [win for win in wins if win[0] == "lockstep" and win[1] == round_]
        losers = [r["worker"] for r in reports if round_ in r["lockstep_conflicts"]]
        assert len(winners) == 1 and len(losers) == 1, f"round {round_}: winners {winners}, losers {losers}"

    assert_no_lost_update(refs, wins)
    free_attempts = sum(1 for w in wins if w[0] == "free") + sum(r["free_conflicts"] for r in reports)
    assert free_attempts == 2 * FREE_ROUNDS


def test_threads_racing_on_one_branch(backend):
    """The same guarantee inside one process (the memory twin included), four threads."""
    refs = backend.refs
    create_race_repo(refs)
    wins, conflicts, errors = [], [], []
    start = threading.Barrier(4)

    def racer(worker: int) -> None:
        try:
            start.wait(30)
            for round_ in range(40):
                current = refs.get_branch("race", "main")
                new_commit = f"t{worker}-{round_}"
                try:
                    refs.compare_and_swap_branch("race", "main", current, replace(current, commit_id=new_commit))
                    wins.append(("free", round_, current.commit_id, new_commit))
                except ConcurrentUpdate:
                    conflicts.append(worker)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=racer, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(wins) + len(conflicts) == 4 * 40
    assert_no_lost_update(refs, wins)
