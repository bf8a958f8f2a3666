"""iter_from and get: every kind of position, inside and across data blocks."""

from __future__ import annotations

import itertools
from bisect import bisect_left

import pytest

from sstable_helpers import random_items

ITEMS = [(b"key%05d" % i, b"value-%d" % i * (i % 7)) for i in range(0, 3000, 3)]
KEYS = [k for k, _ in ITEMS]


def expected_from(items, target, limit=None):
    i = bisect_left([k for k, _ in items], target)
    return items[i:] if limit is None else items[i : i + limit]


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    from lakefuse.graveler.sstable import SSTableReader, write_sstable

    path = tmp_path_factory.mktemp("seek") / "seek.sst"
    write_sstable(str(path), ITEMS, block_size=512)  # ~60 data blocks
    return SSTableReader.open(str(path))


def test_iter_from_before_first(reader):
    assert list(reader.iter_from(b"")) == ITEMS
    assert list(reader.iter_from(b"a")) == ITEMS
    assert list(reader.iter_from(b"key")) == ITEMS


def test_iter_from_after_last(reader):
    assert list(reader.iter_from(b"key99999")) == []
    assert list(reader.iter_from(KEYS[-1] + b"\x00")) == []
    assert list(reader.iter_from(b"\xff")) == []


def test_iter_from_last_key(reader):
    assert list(reader.iter_from(KEYS[-1])) == ITEMS[-1:]


@pytest.mark.parametrize("step", [1, 7, 31])
def test_iter_from_every_exact_and_between_position(reader, step):
    for i in range(0, len(KEYS), step):
        key = KEYS[i]
        assert list(itertools.islice(reader.iter_from(key), 3)) == ITEMS[i : i + 3]
        between = b"key%05d" % (int(key[3:]) + 1)  # not in the table (multiples of 3 only)
        assert list(itertools.islice(reader.iter_from(between), 3)) == ITEMS[i + 1 : i + 4]
        just_after = key + b"\x00"
        assert list(itertools.islice(reader.iter_from(just_after), 2)) == ITEMS[i + 1 : i + 3]


def test_iter_from_runs_to_the_end_across_blocks(reader):
    middle = len(KEYS) // 3
    assert list(reader.iter_from(KEYS[middle])) == ITEMS[middle:]


def test_get_hits(reader):
    for key, value in ITEMS:
        assert reader.get(key) == value


def test_get_misses(reader):
    misses = [b"", b"a", b"key", b"key00001", b"key00002", KEYS[0][:-1], KEYS[-1] + b"\x00",
              b"key99999", b"\xff" * 10]
    misses += [b"key%05d" % (i + 1) for i in range(0, 3000, 90)]
    for key in misses:
        assert reader.get(key) is None, key


def test_seek_in_random_binary_table(tmp_path):
    from lakefuse.graveler.sstable import SSTableReader, write_sstable

    items = random_items(2000, seed=5)
    path = tmp_path / "r.sst"
    write_sstable(str(path), items, block_size=700)
    reader = SSTableReader.open(str(path))
    present = dict(items)
    probes = [k for k, _ in items[::13]] + [k[:-1] for k, _ in items[::17]] + \
             [k + b"\x00" for k, _ in items[::19]] + [bytes([b]) for b in range(256)]
    for probe in probes:
        assert reader.get(probe) == present.get(probe)
        assert list(itertools.islice(reader.iter_from(probe), 4)) == expected_from(items, probe, 4)


def test_iter_from_is_lazy(reader):
    iterator = reader.iter_from(KEYS[10])
    assert next(iterator) == ITEMS[10]
    assert next(iterator) == ITEMS[11]
