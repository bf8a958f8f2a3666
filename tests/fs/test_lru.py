"""LRUDict: the bounded least-recently-used mapping of the tree's metadata cache."""

from __future__ import annotations

import pytest

from lakefuse.fs.lru import LRUDict


def test_evicts_the_least_recently_used_entry():
    lru = LRUDict(3)
    for key in "abc":
        lru[key] = key.upper()
    assert lru.get("a") == "A"  # a is now the most recent
    lru["d"] = "D"
    assert "b" not in lru and len(lru) == 3
    assert [lru.get(k) for k in "acd"] == ["A", "C", "D"]


def test_peek_does_not_refresh_and_set_does():
    lru = LRUDict(2)
    lru["a"] = 1
    lru["b"] = 2
    assert lru.peek("a") == 1
    lru["c"] = 3  # a was peeked, not used: it goes
    assert "a" not in lru
    lru["b"] = 20  # overwriting makes b the most recent
    lru["d"] = 4
    assert "c" not in lru and lru.get("b") == 20


def test_missing_keys_pop_and_clear():
    lru = LRUDict(2)
    assert lru.get("x") is None and lru.get("x", 5) == 5 and lru.peek("x", 6) == 6
    lru["x"] = None  # a stored None is a value, not a miss
    assert "x" in lru and lru.get("x", 7) is None
    assert lru.pop("x") is None and lru.pop("x", 8) == 8
    lru["y"] = 1
    lru.clear()
    assert len(lru) == 0


def test_refuses_a_size_below_one():
    with pytest.raises(ValueError):
        LRUDict(0)
