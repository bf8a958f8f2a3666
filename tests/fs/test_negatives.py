"""``NegativeEntries``: which negative entries the kernel was given, given back by name or by
tree, expired, and bounded (the oldest given up early, for the next poll to take back)."""

from __future__ import annotations

import time

from lakefuse.fs.negatives import NegativeEntries


def test_names_given_back_once_and_only_while_the_kernel_trusts_them():
    negatives = NegativeEntries()
    assert negatives.handed_out("t1", 5, "a", ttl=60)
    assert negatives.handed_out("t1", 5, "b", ttl=0.01)
    time.sleep(0.02)
    out = []
    negatives.invalidate_names([(5, "a"), (5, "b"), (6, "a")], out)
    assert out == [(5, b"a")]  # b expired: the kernel asks again anyway
    negatives.invalidate_names([(5, "a")], out)
    assert out == [(5, b"a")] and len(negatives) == 0


def test_a_tree_changed_as_a_whole_gives_back_its_own_names():
    negatives = NegativeEntries()
    negatives.handed_out("t1", 5, "a", ttl=60)
    negatives.handed_out("t2", 7, "b", ttl=60)
    out = []
    negatives.invalidate_tree("t1", out)
    assert out == [(5, b"a")] and len(negatives) == 1


def test_the_oldest_is_given_up_early_at_the_bound_and_named_at_the_next_poll():
    negatives = NegativeEntries(most=2)
    for name in ("a", "b", "c"):
        assert negatives.handed_out("t", 1, name, ttl=60)
    assert len(negatives) == 2
    out = []
    negatives.take_evicted(out)
    assert out == [(1, b"a")]
    negatives.take_evicted(out)
    assert out == [(1, b"a")]  # once


def test_no_more_records_while_no_poll_takes_the_given_up_ones():
    negatives = NegativeEntries(most=1)
    assert negatives.handed_out("t", 1, "a", ttl=60)
    assert negatives.handed_out("t", 1, "b", ttl=60)  # a given up early
    assert not negatives.handed_out("t", 1, "c", ttl=60)  # a not taken yet: answer ENOENT
    negatives.take_evicted([])
    assert negatives.handed_out("t", 1, "c", ttl=60)
