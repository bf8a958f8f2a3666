"""The stager: closed files' entries staged in batches, in order with everything else the mount
stages, and kept (never dropped) when the database fails."""

from __future__ import annotations

import time

import pytest

from lakefuse.errors import StorageError
import lakefuse.fs.stager as stager_module
from lakefuse.fs.memory import MemoryBackend
from lakefuse.fs.stager import Stager
from lakefuse.fs.tree import Tree


class FlakyBackend(MemoryBackend):
    failures = 0

    def stage_entries(self, repo, branch, items, deleted_exist=False):
        if self.failures:
            self.failures -= 1
            raise StorageError("database unreachable")
        super().stage_entries(repo, branch, items, deleted_exist)


@pytest.fixture
def backend():
    b = FlakyBackend()
    b.create_repository("sales")
    return b


@pytest.fixture
def tree(backend):
    return Tree(backend, "sales", backend.resolve_ref("sales", "main"), writable=True, ttl=1.0)


def entry_of(backend, data: bytes):
    return backend._store(data, 0, {}, None)


def entry_at(backend, path: str):
    return backend.get_entry("sales", backend.resolve_ref("sales", "main"), path)


def test_entries_closed_together_are_staged_in_one_transaction_soon(backend, tree):
    staged = []
    stager = Stager(backend, staged=lambda t, path, entry: staged.append(path))
    backend.calls.clear()
    for i in range(50):
        stager.put(tree, f"f{i:02d}", entry_of(backend, b"%d" % i))
    deadline = time.monotonic() + 5
    while len(staged) < 50 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(staged) == [f"f{i:02d}" for i in range(50)]
    assert backend.calls["stage_entries"] <= 2  # one batch (two if the thread woke in between)
    assert backend.object_bytes(entry_at(backend, "f07")) == b"7"
    stager.close()


def test_a_batch_waits_for_the_entries_to_pause(backend, tree, monkeypatch):
    """A burst of closes (``tar x``) is not interrupted by the batch's work: it is written once
    no entry came for BATCH_QUIET s, in one transaction."""
    monkeypatch.setattr(stager_module, "BATCH_QUIET", 0.3)
    monkeypatch.setattr(stager_module, "BATCH_LATEST", 30.0)
    staged = []
    stager = Stager(backend, staged=lambda t, path, entry: staged.append(path))
    backend.calls.clear()
    for i in range(20):  # one every 30 ms, for 0.6 s: never 0.3 s without one
        stager.put(tree, f"f{i:02d}", entry_of(backend, b"%d" % i))
        time.sleep(0.03)
    assert staged == [] and backend.calls["stage_entries"] == 0
    deadline = time.monotonic() + 5
    while len(staged) < 20 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(staged) == [f"f{i:02d}" for i in range(20)]
    assert backend.calls["stage_entries"] == 1
    stager.close()


def test_entries_that_keep_coming_are_written_every_batch_latest(backend, tree, monkeypatch):
    monkeypatch.setattr(stager_module, "BATCH_QUIET", 30.0)
    monkeypatch.setattr(stager_module, "BATCH_LATEST", 0.2)
    staged = []
    stager = Stager(backend, staged=lambda t, path, entry: staged.append(path))
    started = time.monotonic()
    i = 0
    while time.monotonic() - started < 1.0:  # never quiet
        stager.put(tree, f"f{i:03d}", entry_of(backend, b"%d" % i))
        i += 1
        time.sleep(0.01)
    assert staged, "nothing written while entries kept coming"
    assert staged == [f"f{k:03d}" for k in range(len(staged))]  # the oldest first
    stager.close()
    assert len(staged) == i


def test_a_failed_batch_waits_and_the_next_flush_reports_then_stages_it(backend, tree, monkeypatch):

    monkeypatch.setattr(stager_module, "BATCH_WINDOW", 30.0)  # only flushes write
    stager = Stager(backend, staged=lambda *args: None)
    stager.put(tree, "a", entry_of(backend, b"old"))
    backend.failures = 1
    with pytest.raises(StorageError):
        stager.flush(tree)
    assert stager.waiting(tree) == 1 and entry_at(backend, "a") is None
    stager.put(tree, "a", entry_of(backend, b"new"))  # written again meanwhile: the newest counts
    stager.put(tree, "b", entry_of(backend, b"b"))
    stager.flush(tree)
    assert stager.waiting(tree) == 0
    assert backend.object_bytes(entry_at(backend, "a")) == b"new"
    assert backend.object_bytes(entry_at(backend, "b")) == b"b"
    assert stager.close() == []


def test_anything_else_staged_goes_after_the_waiting_entries(backend, tree, monkeypatch):

    monkeypatch.setattr(stager_module, "BATCH_WINDOW", 30.0)
    stager = Stager(backend, staged=lambda *args: None)
    stager.put(tree, "gone", entry_of(backend, b"closed, then unlinked"))
    stager.stage_now(tree, [("gone", None)], deleted_exist=True)  # an unlink
    assert entry_at(backend, "gone") is None
    stager.close()
    assert entry_at(backend, "gone") is None  # the older entry never lands after the unlink
