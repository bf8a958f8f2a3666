"""What another reader of the backend sees of files this mount closed: they are staged in
batches, a moment after their close (``lakefuse.fs.stager``)."""

from __future__ import annotations

import time

STAGED_WITHIN = 5.0  # seconds: far beyond the stager's batch window, for a loaded machine


def staged_entry(backend, repo: str, ref: str, path: str):
    """The entry the backend has at ``path`` once the mount's stager wrote it (closed files are
    staged in batches, a moment after their close), polled for at most ``STAGED_WITHIN`` s."""
    deadline = time.monotonic() + STAGED_WITHIN
    while True:
        entry = backend.get_entry(repo, backend.resolve_ref(repo, ref), path)
        if entry is not None or time.monotonic() > deadline:
            return entry
        time.sleep(0.01)


def staged_away(backend, repo: str, ref: str, path: str) -> bool:
    """Whether the backend stops having ``path`` within ``STAGED_WITHIN`` s (a deletion through
    the mount is staged with the next batch too)."""
    deadline = time.monotonic() + STAGED_WITHIN
    while backend.get_entry(repo, backend.resolve_ref(repo, ref), path) is not None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def staged_entry_where(backend, repo: str, ref: str, path: str, condition):
    """The entry at ``path`` once ``condition(entry)`` holds for what the backend has (a change
    of metadata is staged with the next batch too), polled for at most ``STAGED_WITHIN`` s;
    the last entry seen otherwise."""
    deadline = time.monotonic() + STAGED_WITHIN
    while True:
        entry = backend.get_entry(repo, backend.resolve_ref(repo, ref), path)
        if (entry is not None and condition(entry)) or time.monotonic() > deadline:
            return entry
        time.sleep(0.01)
