"""StagingStore contract: one suite run on MemoryStagingStore, SqlStagingStore/SQLite and /PostgreSQL.

The change feed (``changes_since``) part uses ``other_staging``: a second store on the same
data with its own origin - a second ``Database`` on the same URL (SQL; "another process"),
or ``MemoryStagingStore.peer()``.
"""

from __future__ import annotations

import threading

import pytest

from lakefuse.db import SqlStagingStore, open_database
from lakefuse.errors import InvalidArgument
from lakefuse.graveler.model import Commit, StagingChanges, ValueRecord
from lakefuse.graveler.ports import Branch, Repository


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


def test_iterate_until_stops_below_the_bound(staging):
    staging.page_size = 2
    keys = [b"dir/a", b"dir/b", b"dir/c", b"dir0", b"dir0/x", b"e"]
    staging.set_many("t", [(key, rec(key)) for key in keys])
    assert [k for k, _ in staging.iterate("t", b"dir/", until=b"dir0")] == [b"dir/a", b"dir/b", b"dir/c"]
    assert [k for k, _ in staging.iterate("t", b"dir/b", until=b"dir/c")] == [b"dir/b"]
    assert [k for k, _ in staging.iterate("t", b"dir/c\x00", until=b"dir0")] == []
    assert [k for k, _ in staging.iterate("t", b"dir0", until=None)] == [b"dir0", b"dir0/x", b"e"]


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 6, 7, 10])
def test_iterate_across_page_boundaries(staging, count):
    staging.page_size = 3
    keys = [bytes([0xF0 + i % 16]) * (1 + i // 16) for i in range(count)]
    staging.set_many("t", [(key, rec(key)) for key in keys])
    staging.set("neighbour", b"\x00", rec(b"\x00"))  # other tokens never leak in
    assert [k for k, _ in staging.iterate("t")] == sorted(keys)
    assert [k for k, _ in staging.iterate("t", from_key=b"\xf1")] == sorted(k for k in keys if k >= b"\xf1")


@pytest.mark.parametrize("count", [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 40])
def test_sql_pages_grow_from_a_small_first_one(staging, monkeypatch, count):
    """SQL stores read a small first page, then pages twice as big up to ``page_size``: every
    key is listed once, in order, whatever the count."""
    if not isinstance(staging, SqlStagingStore):
        pytest.skip("paging is the SQL store's")
    import lakefuse.db.staging as sql_staging

    monkeypatch.setattr(sql_staging, "FIRST_PAGE_ROWS", 2)
    staging.page_size = 8  # pages of 2, 4, 8, 8...
    keys = [b"k%03d" % i for i in range(count)]
    staging.set_many("t", [(key, rec(key)) for key in keys])
    assert [k for k, _ in staging.iterate("t")] == keys
    assert [k for k, _ in staging.iterate("t", from_key=b"k003", until=b"k010")] == keys[3:10]


def test_sql_iterate_reads_only_a_first_page_for_the_first_keys(staging, monkeypatch):
    """A listing that wants a few names of a big token reads a small page, not ``page_size``
    rows (a directory learnt in pages of 64 read a thousand rows per page)."""
    if not isinstance(staging, SqlStagingStore):
        pytest.skip("paging is the SQL store's")
    from lakefuse.db.staging import FIRST_PAGE_ROWS

    staging.set_many("t", [(b"k%05d" % i, rec(b"k%05d" % i)) for i in range(3000)])
    fetched = []
    rows = staging._db.rows
    monkeypatch.setattr(staging._db, "rows", lambda *args: fetched.append(len(result := rows(*args))) or result)
    iterator = staging.iterate("t")
    assert [next(iterator)[0] for _ in range(65)][-1] == b"k00064"
    assert sum(fetched) == FIRST_PAGE_ROWS
    assert len(list(iterator)) == 3000 - 65
    assert fetched[1:4] == [2 * FIRST_PAGE_ROWS, 4 * FIRST_PAGE_ROWS, min(8 * FIRST_PAGE_ROWS, staging.page_size)]


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


def test_set_many_rows_spread_over_statements(staging):
    """A batch of a size no statement takes whole (SQLite writes 128, 128, 32, 8, 4 and 1 rows
    per statement): upserts, tombstones, and keys written twice in one statement and in two,
    all as a row-by-row write would leave them."""
    keys = [f"k{i:03d}".encode() for i in range(299)]
    staging.set_many("t", ((key, rec(key, b"old")) for key in keys))
    second = [(key, None if i % 3 == 0 else rec(key, b"new")) for i, key in enumerate(keys)]
    second.insert(6, (keys[5], rec(keys[5], b"twice")))  # the next row of the same statement
    second.append((keys[3], rec(keys[3], b"again")))  # a tombstone written over, in the last statement
    staging.set_many("t", second)
    last = {3: b"again", 5: b"twice"}
    for i, key in enumerate(keys):
        expected = rec(key, last[i]) if i in last else None if i % 3 == 0 else rec(key, b"new")
        assert staging.get("t", key) == expected, key
    assert staging.count("t") == 299  # tombstones are rows too


def test_set_many_large_batch(staging):
    keys = [f"dir/{i:05d}".encode() for i in range(2500)]  # several write chunks
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


# change feed ----------------------------------------------------------------------------------
@pytest.fixture
def other_staging(backend):
    """A second store on the backend's data, as another process would open it."""
    if backend.kind == "memory":
        yield backend.staging.peer()
        return
    database = open_database(backend.url)
    yield SqlStagingStore(database)
    database.close()


def test_versions_count_write_transactions(staging):
    assert staging.changes_since("t", 0) == StagingChanges(version=0, keys=())  # never written
    staging.set("t", b"a", rec(b"a"))
    assert staging.changes_since("t", 0).version == 1
    staging.set_many("t", [(b"b", rec(b"b")), (b"c", None), (b"d", rec(b"d"))])
    assert staging.changes_since("t", 0).version == 2  # one transaction, one version
    staging.set_many("t", [])  # nothing written: no version
    staging.set_many("t", iter(()))
    assert staging.changes_since("t", 0).version == 2
    staging.set("u", b"a", None)  # tokens count apart
    assert staging.changes_since("t", 0).version == 2
    assert staging.changes_since("u", 0).version == 1


def test_changes_are_the_keys_written_after_the_version(staging):
    staging.set("t", b"a", rec(b"a"))  # 1
    staging.set_many("t", [(b"c", rec(b"c")), (b"b", rec(b"b"))])  # 2
    staging.set("t", b"z", rec(b"z"))  # 3
    staging.set("neighbour", b"n", rec(b"n"))
    assert staging.changes_since("t", 0) == StagingChanges(3, (b"a", b"b", b"c", b"z"))  # bytewise order
    assert staging.changes_since("t", 1) == StagingChanges(3, (b"b", b"c", b"z"))
    assert staging.changes_since("t", 2) == StagingChanges(3, (b"z",))
    assert staging.changes_since("t", 3) == StagingChanges(3, ())
    staging.set("t", b"a", rec(b"a", b"2"))  # 4: a key written again is reported again
    assert staging.changes_since("t", 3) == StagingChanges(4, (b"a",))
    assert staging.changes_since("t", 1) == StagingChanges(4, (b"a", b"b", b"c", b"z"))


def test_a_failed_write_leaves_the_version_alone(staging):
    staging.set("t", b"a", rec(b"a"))

    def items():
        for i in range(1500):  # past the first executemany chunk: rows were written, then...
            yield b"k%d" % i, rec(b"k")
        yield "not-bytes", None  # ...the batch fails and is rolled back, version included

    with pytest.raises(InvalidArgument):
        staging.set_many("t", items())
    assert staging.changes_since("t", 0) == StagingChanges(1, (b"a",))
    staging.set("t", b"b", None)
    assert staging.changes_since("t", 1) == StagingChanges(2, (b"b",))


def test_tombstones_are_changes(staging):
    staging.set("t", b"k", rec(b"k"))
    staging.set("t", b"k", None)
    assert staging.changes_since("t", 1) == StagingChanges(2, (b"k",))
    staging.set_many("t", [(b"gone", None)])
    assert staging.changes_since("t", 2) == StagingChanges(3, (b"gone",))


def test_a_feed_followed_version_by_version_misses_nothing(staging):
    seen: list[bytes] = []
    version = 0
    for i in range(5):
        staging.set_many("t", [(b"k%d" % i, rec(b"k")), (b"j%d" % i, None)])
        changes = staging.changes_since("t", version)
        assert changes.version == version + 1
        seen += changes.keys
        version = changes.version
    assert sorted(seen) == sorted([b"k%d" % i for i in range(5)] + [b"j%d" % i for i in range(5)])


def test_exclude_origin_hides_own_writes_only(staging, other_staging):
    assert isinstance(staging.origin, str) and staging.origin
    assert other_staging.origin != staging.origin
    mine = staging.origin
    staging.set("t", b"own", rec(b"own"))  # 1
    other_staging.set("t", b"theirs", rec(b"theirs"))  # 2
    other_staging.set_many("t", [(b"both", rec(b"both")), (b"their-tombstone", None)])  # 3
    assert staging.changes_since("t", 0, exclude_origin=mine) == StagingChanges(3, (b"both", b"their-tombstone", b"theirs"))
    assert staging.changes_since("t", 0) == StagingChanges(3, (b"both", b"own", b"their-tombstone", b"theirs"))
    # both stores read the same feed
    assert other_staging.changes_since("t", 0, exclude_origin=other_staging.origin) == StagingChanges(3, (b"own",))
    staging.set("t", b"both", rec(b"both", b"mine now"))  # 4: the latest write of the key is own
    assert staging.changes_since("t", 0, exclude_origin=mine) == StagingChanges(4, (b"their-tombstone", b"theirs"))
    assert staging.changes_since("t", 3, exclude_origin=mine) == StagingChanges(4, ())
    assert other_staging.changes_since("t", 3, exclude_origin=other_staging.origin) == StagingChanges(4, (b"both",))
    assert staging.changes_since("t", 0, exclude_origin="nobody").keys == (b"both", b"own", b"their-tombstone", b"theirs")


def test_drop_prefix_means_anything_may_have_changed(staging):
    staging.set_many("t", [(b"dir/a", rec(b"a")), (b"b", rec(b"b"))])  # 1
    staging.drop_prefix("t", b"dir/")  # 2
    assert staging.changes_since("t", 0) == StagingChanges(2, None)
    assert staging.changes_since("t", 1) == StagingChanges(2, None)
    assert staging.changes_since("t", 2) == StagingChanges(2, ())  # a reader after it: nothing since
    staging.set("t", b"c", None)  # 3
    assert staging.changes_since("t", 2) == StagingChanges(3, (b"c",))
    assert staging.changes_since("t", 1).keys is None
    staging.drop_prefix("t", b"nothing-here")  # 4: still a reset, whatever it deleted
    assert staging.changes_since("t", 3) == StagingChanges(4, None)


def test_dropped_token_reads_as_never_written(staging, other_staging):
    staging.set_many("t", [(b"a", rec(b"a")), (b"b", None)])
    staging.set("u", b"a", rec(b"a"))
    other_staging.drop("t")
    assert staging.changes_since("t", 1) == StagingChanges(0, None)  # it went back: anything changed
    assert staging.changes_since("t", 0) == StagingChanges(0, ())
    assert staging.changes_since("u", 0) == StagingChanges(1, (b"a",))  # other tokens keep theirs
    staging.drop("never-used")
    assert staging.changes_since("never-used", 0) == StagingChanges(0, ())


def test_more_keys_than_the_limit_is_none(staging):
    staging.set_many("t", [(b"k%d" % i, rec(b"k")) for i in range(5)])
    assert staging.changes_since("t", 0, limit=5) == StagingChanges(1, (b"k0", b"k1", b"k2", b"k3", b"k4"))
    assert staging.changes_since("t", 0, limit=4) == StagingChanges(1, None)
    assert staging.changes_since("t", 0, limit=0) == StagingChanges(1, None)
    assert staging.changes_since("t", 1, limit=0) == StagingChanges(1, ())
    # the limit counts the keys left after excluding own writes
    assert staging.changes_since("t", 0, limit=0, exclude_origin=staging.origin) == StagingChanges(1, ())


@pytest.mark.parametrize("version, limit", [(-1, 10), (0, -1), ("1", 10), (1.5, 10), (None, 10)])
def test_changes_since_invalid_arguments(staging, version, limit):
    with pytest.raises(InvalidArgument):
        staging.changes_since("t", version, limit)


def test_stage_on_branch_writes_are_feed_transactions_of_the_ref_store_origin(backend):
    refs, staging = backend.refs, backend.staging
    head = Branch(id="main", commit_id="c0", staging_token="tok")
    initial = Commit(id="c0", metarange_id="mr", parents=(), message="m", committer="c", creation_date=1)
    refs.create_repository(Repository("repo", "local://ns/repo", "main", 1), initial, head)
    assert refs.origin == staging.origin  # one database (SQL) / its staging store (memory): one origin
    assert refs.stage_on_branch("repo", "main", head, [(b"b", rec(b"b")), (b"a", None)]) is True
    assert refs.stage_on_branch("repo", "main", head, []) is True  # only the check: no version
    assert staging.changes_since("tok", 0) == StagingChanges(1, (b"a", b"b"))
    assert staging.changes_since("tok", 0, exclude_origin=refs.origin) == StagingChanges(1, ())
    refs.delete_branch("repo", "main")  # drops the token, version included
    assert staging.changes_since("tok", 1) == StagingChanges(0, None)


def test_concurrent_writers_get_distinct_versions_and_every_key_is_reported(staging, other_staging):
    """Two writers (two stores: two databases on SQL) x N set() calls, a reader following the
    feed meanwhile: 2N versions, one key each, and the reader sees every key exactly when
    its version is visible."""
    count = 40
    errors: list[BaseException] = []
    done = threading.Event()
    followed: list[bytes] = []

    def writer(store, name: bytes) -> None:
        try:
            for i in range(count):
                key = b"%s/%03d" % (name, i)
                store.set("t", key, rec(key))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def reader() -> None:
        try:
            version = 0
            while True:
                finished = done.is_set()
                changes = staging.changes_since("t", version, limit=10 * count)
                assert changes.keys is not None and changes.version >= version
                followed.extend(changes.keys)
                version = changes.version
                if finished:
                    return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(store, name)) for store, name in ((staging, b"x"), (other_staging, b"y"))]
    follower = threading.Thread(target=reader)
    follower.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    done.set()
    follower.join(timeout=120)
    assert not errors
    everything = sorted(b"%s/%03d" % (name, i) for name in (b"x", b"y") for i in range(count))
    assert staging.changes_since("t", 0, limit=10 * count) == StagingChanges(2 * count, tuple(everything))
    assert sorted(followed) == everything  # each key written once: reported once, none missed
    after = [set(staging.changes_since("t", version, limit=10 * count).keys) for version in range(2 * count + 1)]
    written_by = [after[version - 1] - after[version] for version in range(1, 2 * count + 1)]
    assert all(len(keys) == 1 for keys in written_by)  # one key per version: no version given twice
