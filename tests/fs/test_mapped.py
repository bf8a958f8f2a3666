"""MappedSpools: released files whose spool may still be mapped are looked at soon after their
release, then every POLL_SECONDS until ``settle`` is done with them; unmount stops the looks."""

from __future__ import annotations

import threading
import time

from lakefuse.fs import mapped
from lakefuse.fs.mapped import MappedSpools


class Released:
    """What MappedSpools needs of an open file: its node's path (for its log)."""

    def __init__(self, path: str):
        self.node = type("Node", (), {"path": path})()


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def test_a_file_no_longer_mapped_is_settled_at_the_first_look():
    looks = []
    spools = MappedSpools(lambda of: looks.append((of, time.monotonic())) or True)
    of = Released("out.bin")
    released = time.monotonic()
    spools.watch(of)
    assert wait_for(lambda: spools.watching() == 0)
    assert [who for who, _ in looks] == [of]
    assert looks[0][1] - released < mapped.POLL_SECONDS  # the first look comes early


def test_a_file_still_mapped_is_looked_at_again_until_it_is_not(monkeypatch, caplog):
    monkeypatch.setattr(mapped, "POLL_SECONDS", 0.01)
    mapped_until = 4
    looks = []
    spools = MappedSpools(lambda of: looks.append(of) or len(looks) >= mapped_until)
    of = Released("linked.out")
    with caplog.at_level("INFO", logger="lakefuse.fs.mapped"):
        spools.watch(of)
        assert wait_for(lambda: spools.watching() == 0)
    assert len(looks) == mapped_until
    assert [r.getMessage() for r in caplog.records].count(
        "linked.out was closed while mapped: stored as it is now, and again once unmapped") == 1


def test_a_failing_look_is_tried_again_and_close_stops_the_looks(monkeypatch):
    monkeypatch.setattr(mapped, "POLL_SECONDS", 0.01)
    looks = threading.Semaphore(0)

    def settle(of):
        looks.release()
        raise OSError("storage is gone")

    spools = MappedSpools(settle)
    spools.watch(Released("a"))
    assert looks.acquire(timeout=5) and looks.acquire(timeout=5)  # tried again after the failure
    spools.close()
    assert spools.watching() == 0
    while looks.acquire(blocking=False):
        pass
    time.sleep(0.05)
    assert not looks.acquire(blocking=False)  # no look after close
    spools.watch(Released("b"))  # after unmount: ignored
    assert spools.watching() == 0
