"""StagingStore contract: one suite run on MemoryStagingStore, SqlStagingStore/SQLite and /PostgreSQL."""

from __future__ import annotations

import pytest

from lakefuse.errors import InvalidArgument
from lakefuse.graveler.model import ValueRecord


def rec(key: bytes, tag: bytes = b"") -> ValueRecord:
    return ValueRecord(key=key, identity=b"id:" + key + tag, value=b"\x00value\xff" + key + tag)


def test_set_get_and_missing(staging):
    staging.set("t", b"a/b.txt", rec(b"a/b.txt"))
    assert staging.get("t", b"a/b.txt") == rec(b"a/b.txt")
    assert staging.get("t", b"a/c.txt") is ...
    assert staging.get("other-token", b"a/b.txt") is ...


def test_set_is_an_upsert(staging):
    staging.set("t", b"k", rec(b"k", b"1"))
    staging.set("t", b"k", rec(b"k", b"2"))
    assert staging.get("t", b"k") == rec(b"k", b"2")
    assert staging.count("t") == 1


def test_tombstones(staging):
    staging.set("t", b"gone", None)
    assert staging.get("t", b"gone") is None
    staging.set("t", b"gone", rec(b"gone"))  # a tombstone can be overwritten by a value...
    assert staging.get("t", b"gone") == rec(b"gone")
    staging.set("t", b"gone", None)  # ...and back
    assert staging.get("t", b"gone") is None
    assert list(staging.iterate("t")) == [(b"gone", None)]


def test_empty_identity_and_value_are_not_tombstones(staging):
    empty = ValueRecord(key=b"e", identity=b"", value=b"")
    staging.set("t", b"e", empty)
    assert staging.get("t", b"e") == empty


def test_iterate_orders_keys_bytewise(staging):
    keys = [b"\xff", b"a", b"\x00", b"a\x00", b"ab", b"B", b"\xc3\xa9", b"a/", b"a0", b"\xff\xff", b"\x7f"]
    staging.set_many("t", [(key, rec(key)) for key in keys])
    staging.set("t", b"a0", None)
    got = list(staging.iterate("t"))
    assert [key for key, _ in got] == sorted(keys)
    assert dict(got) == {key: (None if key == b"a0" else rec(key)) for key in keys}


def test_iterate_from_key(staging):
    keys = [b"a", b"b", b"c", b"d", b"\xff"]
    staging.set_many("t", [(key, rec(key)) for key in keys])
    assert [k for k, _ in staging.iterate("t", from_key=b"c")] == [b"c", b"d", b"\xff"]  # inclusive
    assert [k for k, _ in staging.iterate("t", from_key=b"bb")] == [b"c", b"d", b"\xff"]
    assert [k for k, _ in staging.iterate("t", from_key=b"\xff")] == [b"\xff"]
    assert [k for k, _ in staging.iterate("t", from_key=b"\xff\x00")] == []
    assert list(staging.iterate("empty-token")) == []


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 6, 7, 10])
def test_iterate_across_page_boundaries(staging, count):
    staging.page_size = 3
    keys = [bytes([0xF0 + i % 16]) * (1 + i // 16) for i in range(count)]
    staging.set_many("t", [(key, rec(key)) for key in keys])
    staging.set("neighbour", b"\x00", rec(b"\x00"))  # other tokens never leak in
    assert [k for k, _ in staging.iterate("t")] == sorted(keys)
    assert [k for k, _ in staging.iterate("t", from_key=b"\xf1")] == sorted(k for k in keys if k >= b"\xf1")


def test_iterate_is_lazy_and_sees_later_pages_live(staging):
    staging.page_size = 2
    staging.set_many("t", [(key, rec(key)) for key in (b"a", b"b", b"c", b"d")])
    iterator = staging.iterate("t")
    assert next(iterator)[0] == b"a"
    staging.set("t", b"z", rec(b"z"))  # lands beyond the current page: seen
    staging.set("t", b"c", None)  # next page not read yet: the tombstone is seen
    assert [(k, v) for k, v in iterator] == [(b"b", rec(b"b")), (b"c", None), (b"d", rec(b"d")), (b"z", rec(b"z"))]


def test_set_many_last_value_wins_and_empty_batch(staging):
    staging.set_many("t", [(b"k", rec(b"k", b"1")), (b"j", None), (b"k", rec(b"k", b"2"))])
    assert staging.get("t", b"k") == rec(b"k", b"2")
    assert staging.get("t", b"j") is None
    staging.set_many("t", [])
    staging.set_many("t", iter(()))
    assert staging.count("t") == 2


def test_set_many_is_all_or_nothing(staging):
    staging.set("t", b"keep", rec(b"keep"))

    def items():
        yield b"new1", rec(b"new1")
        yield b"keep", None
        yield "not-bytes", rec(b"x")  # invalid key: the whole batch must be refused

    with pytest.raises(InvalidArgument):
        staging.set_many("t", items())
    assert staging.get("t", b"new1") is ...
    assert staging.get("t", b"keep") == rec(b"keep")


def test_set_many_large_batch(staging):
    keys = [f"dir/{i:05d}".encode() for i in range(2500)]  # several executemany chunks
    staging.set_many("t", ((key, rec(key)) for key in keys))
    assert staging.count("t") == 2500
    assert [k for k, _ in staging.iterate("t", from_key=b"dir/02498")] == [b"dir/02498", b"dir/02499"]


def test_invalid_arguments(staging):
    with pytest.raises(InvalidArgument):
        staging.set("t", "str-key", rec(b"x"))
    with pytest.raises(InvalidArgument):
        staging.set("t", b"k", b"raw bytes are not a ValueRecord")
    with pytest.raises(InvalidArgument):
        staging.get("t", "str-key")
    assert staging.count("t") == 0


def test_drop(staging):
    staging.set_many("t", [(b"a", rec(b"a")), (b"b", None)])
    staging.set("u", b"a", rec(b"a"))
    staging.drop("t")
    staging.drop("never-used")
    assert staging.count("t") == 0
    assert list(staging.iterate("t")) == []
    assert staging.get("u", b"a") == rec(b"a")


def test_drop_prefix(staging):
    keys = [b"a", b"dir", b"dir/", b"dir/x", b"dir/y/z", b"dir0", b"dis", b"\xff", b"\xff\xff", b"\xff\x00", b"\xfe\xff"]
    staging.set_many("t", [(key, rec(key)) for key in keys])
    staging.set("u", b"dir/x", rec(b"dir/x"))

    staging.drop_prefix("t", b"dir/")
    assert [k for k, _ in staging.iterate("t")] == sorted(set(keys) - {b"dir/", b"dir/x", b"dir/y/z"})
    staging.drop_prefix("t", b"\xff")  # prefix with no successor byte: up to the end
    assert [k for k, _ in staging.iterate("t")] == [b"a", b"dir", b"dir0", b"dis", b"\xfe\xff"]
    staging.drop_prefix("t", b"\xfe")  # successor of b"\xfe" is b"\xff"
    assert [k for k, _ in staging.iterate("t")] == [b"a", b"dir", b"dir0", b"dis"]
    staging.drop_prefix("t", b"nothing-here")
    staging.drop_prefix("never-used", b"a")
    assert staging.count("t") == 4
    assert staging.get("u", b"dir/x") == rec(b"dir/x")  # other tokens untouched
    staging.drop_prefix("t", b"")  # empty prefix: everything of the token
    assert staging.count("t") == 0


def test_count(staging):
    assert staging.count("t") == 0
    staging.set_many("t", [(bytes([i]), rec(bytes([i]))) for i in range(256)])
    staging.set("t", b"\x05", None)
    staging.set("t2", b"x", None)
    assert staging.count("t") == 256  # tombstones count
    assert staging.count("t2") == 1
