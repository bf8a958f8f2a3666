"""apply (range reuse by ID) and diff (equal ranges skipped unread)."""

from __future__ import annotations

import random

import pytest

from lakefuse.errors import InvalidArgument
from lakefuse.graveler.committed import CommittedManager
from lakefuse.graveler.model import ValueRecord

from committed_helpers import SMALL_RANGES, CountingMemoryBlock, make_record, object_keys

N_KEYS = 50_000


@pytest.fixture(scope="module")
def big():
    """50k keys in ~1500 small ranges, written once for the module."""
    block = CountingMemoryBlock()
    manager = CommittedManager(block, None, None, SMALL_RANGES)
    keys = object_keys(N_KEYS)
    metarange = manager.write_metarange(make_record(k) for k in keys)
    manager.close()
    return block, keys, metarange


def fresh(block) -> CommittedManager:
    """A manager with cold RAM: every range it needs is a block get."""
    return CommittedManager(block, None, None, SMALL_RANGES)


def apply_and_count(block, base, changes):
    manager = fresh(block)
    files_before = block.file_ids()
    gets_before = block.calls["get"]
    result = manager.apply(base, changes)
    new_files = block.file_ids() - files_before
    gets = block.calls["get"] - gets_before
    assert set(manager.last_written) == new_files
    manager.close()
    return result, new_files, gets


@pytest.mark.parametrize("where", [0.0, 0.37, 0.5, 0.999])
def test_changing_one_key_rewrites_one_range_and_the_metarange(big, where):
    block, keys, base = big
    key = keys[int(where * (N_KEYS - 1))]
    result, new_files, gets = apply_and_count(block, base, [(key, make_record(key, version=1))])
    assert result != base
    assert len(fresh(block).ranges(base)) > 1000
    assert result in new_files and len(new_files) == 2  # exactly 1 range + the metarange
    assert gets == 2  # the base metarange and the one changed range: nothing else is read
    changed = [r for r in fresh(block).ranges(result) if r.id in new_files]
    assert len(changed) == 1 and changed[0].min_key <= key <= changed[0].max_key
    assert fresh(block).get(result, key) == make_record(key, version=1)


def test_no_changes_gives_the_same_metarange_unread(big):
    block, _keys, base = big
    result, new_files, gets = apply_and_count(block, base, [])
    assert result == base and new_files == set() and gets == 1


def test_apply_equals_writing_the_result_from_scratch(big):
    """Boundaries depend only on content: apply() and a full rewrite give the same IDs."""
    block, keys, base = big
    rng = random.Random(7)
    model = {k: make_record(k) for k in keys}
    changes = {}
    for key in rng.sample(keys, 40):
        changes[key] = None if rng.random() < 0.5 else make_record(key, version=2)
    for i in range(30):
        key = b"tables/t%02d/new-%03d" % (rng.randrange(6), i)
        changes[key] = make_record(key)
    changes[b"a-before-everything"] = make_record(b"a-before-everything")
    changes[b"zz-after-everything"] = make_record(b"zz-after-everything")
    changes[keys[0]] = None
    changes[keys[-1]] = None
    changes[b"tables/never-existed"] = None
    result, new_files, _gets = apply_and_count(block, base, sorted(changes.items()))
    for key, value in changes.items():
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    expected = [model[k] for k in sorted(model)]
    manager = fresh(block)
    assert list(manager.iterate(result)) == expected
    scratch = CommittedManager(CountingMemoryBlock(), None, None, SMALL_RANGES)
    assert scratch.write_metarange(expected) == result
    assert len(new_files) < 40 + 30 + 10 < len(manager.ranges(result))


def test_delete_whole_ranges_and_everything(manager):
    keys = object_keys(2000)
    base = manager.write_metarange(make_record(k) for k in keys)
    first = manager.ranges(base)[0]
    doomed = [k for k in keys if first.min_key <= k <= first.max_key]
    result = manager.apply(base, [(k, None) for k in doomed])
    assert [r.key for r in manager.iterate(result)] == keys[len(doomed):]
    assert manager.ranges(result)[0].id == manager.ranges(base)[1].id
    assert manager.apply(base, [(k, None) for k in keys]) == manager.empty_metarange()


def test_apply_onto_empty_is_write(manager):
    keys = object_keys(500)
    written = manager.write_metarange(make_record(k) for k in keys)
    assert manager.apply(manager.empty_metarange(), [(k, make_record(k)) for k in keys]) == written


@pytest.mark.parametrize(
    "changes, message",
    [
        ([(b"b", None), (b"a", None)], "not sorted"),
        ([(b"a", None), (b"a", None)], "duplicate"),
        ([(b"\xff", None)], r"b'\\xff'"),
        ([(b"", None)], "empty key"),
        ([(b"a", ValueRecord(b"b", b"i", b"v"))], "carries a record"),
    ],
)
def test_apply_bad_changes(manager, changes, message):
    base = manager.write_metarange([make_record(b"m")])
    with pytest.raises(InvalidArgument, match=message):
        manager.apply(base, changes)


# -- diff ----------------------------------------------------------------------------------


def test_diff_reads_only_ranges_that_differ(big):
    block, keys, base = big
    key = keys[N_KEYS // 3]
    changed, _new, _gets = apply_and_count(block, base, [(key, make_record(key, version=5))])
    manager = fresh(block)
    gets_before = block.calls["get"]
    assert list(manager.diff(base, changed)) == [(key, make_record(key), make_record(key, version=5))]
    assert block.calls["get"] - gets_before == 2 + 2  # two metaranges, one range on each side
    assert list(manager.diff(base, base)) == []


def reference_diff(left: dict, right: dict):
    out = []
    for key in sorted(set(left) | set(right)):
        lv, rv = left.get(key), right.get(key)
        if lv is None or rv is None or lv.identity != rv.identity:
            out.append((key, lv, rv))
    return out


def test_diff_matches_reference(manager):
    rng = random.Random(3)
    keys = object_keys(3000)
    left = {k: make_record(k) for k in keys}
    right = dict(left)
    for key in rng.sample(keys, 60):
        if rng.random() < 0.5:
            del right[key]
        else:
            right[key] = make_record(key, version=1)
    for key in rng.sample(keys, 20):
        left.pop(key, None)
    for i in range(25):
        right[b"tables/t00/inserted-%02d" % i] = make_record(b"tables/t00/inserted-%02d" % i)
    right[b"0-first"] = make_record(b"0-first")
    left[b"zz-last"] = make_record(b"zz-last")
    left_id = manager.write_metarange(left[k] for k in sorted(left))
    right_id = manager.write_metarange(right[k] for k in sorted(right))
    assert list(manager.diff(left_id, right_id)) == reference_diff(left, right)
    assert list(manager.diff(right_id, left_id)) == reference_diff(right, left)
    empty = manager.empty_metarange()
    assert list(manager.diff(empty, right_id)) == reference_diff({}, right)
    assert list(manager.diff(left_id, empty)) == reference_diff(left, {})


def test_diff_same_content_different_boundaries(block):
    """Metaranges of the same records cut differently (another config) have no diff."""
    from lakefuse.config import CommittedConfig

    keys = object_keys(1500)
    small = CommittedManager(block, None, None, SMALL_RANGES)
    other = CommittedManager(block, None, None, CommittedConfig(5000, 20000, 7))
    a = small.write_metarange(make_record(k) for k in keys)
    b = other.write_metarange(make_record(k) for k in keys)
    assert a != b
    assert list(small.diff(a, b)) == []
    b2 = other.apply(b, [(keys[700], make_record(keys[700], version=1))])
    assert list(small.diff(a, b2)) == [(keys[700], make_record(keys[700]), make_record(keys[700], version=1))]
