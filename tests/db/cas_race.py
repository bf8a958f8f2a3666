"""Worker of the two-process branch CAS race (run in a spawned process by test_branch_cas_race.py).

Each worker opens the database itself and moves one branch with read -> compare-and-swap:
first in lockstep rounds (both read the same head, then both swap: exactly one may win), then
free-running.  It reports every successful transition ``(expected_commit, new_commit)``, how
many swaps failed with ConcurrentUpdate, and any other exception as an error.
"""

from __future__ import annotations

import traceback
from dataclasses import replace

BARRIER_TIMEOUT_S = 30


def cas_worker(url, repo, branch, worker, lockstep_rounds, free_rounds, barrier, results) -> None:
    report = {"worker": worker, "wins": [], "lockstep_conflicts": [], "free_conflicts": 0, "errors": []}
    try:
        from lakefuse.db import SqlRefStore, open_database
        from lakefuse.errors import ConcurrentUpdate

        database = open_database(url)
        refs = SqlRefStore(database)

        def attempt(commit_id: str, phase: str, round_: int) -> bool:
            current = refs.get_branch(repo, branch)
            if phase == "lockstep":
                barrier.wait(BARRIER_TIMEOUT_S)  # both have read the same head
            try:
                refs.compare_and_swap_branch(repo, branch, current, replace(current, commit_id=commit_id))
            except ConcurrentUpdate:
                return False
            except Exception as exc:  # a raw database error is a failure of the store
                report["errors"].append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
                return False
            report["wins"].append((phase, round_, current.commit_id, commit_id))
            return True

        barrier.wait(BARRIER_TIMEOUT_S)
        for round_ in range(lockstep_rounds):
            barrier.wait(BARRIER_TIMEOUT_S)  # the previous round's swaps are all done
            if not attempt(f"w{worker}-lockstep-{round_}", "lockstep", round_):
                report["lockstep_conflicts"].append(round_)
        barrier.wait(BARRIER_TIMEOUT_S)
        for round_ in range(free_rounds):
            if not attempt(f"w{worker}-free-{round_}", "free", round_):
                report["free_conflicts"] += 1
        database.close()
    except BaseException:
        report["errors"].append(traceback.format_exc())
        barrier.abort()  # never leave the other worker waiting
    results.put(report)
