"""Commit IDs (``lakefuse.graveler.commits``) are lakeFS's: its own test vectors, the identity
stream spelled out by hand, and a commit ID that covers the commit's whole history."""

from __future__ import annotations

import calendar
import hashlib
from dataclasses import dataclass, field

import pytest

from lakefuse.errors import InvalidArgument
from lakefuse.graveler.commits import CANONICAL_COMMIT_FORMAT, commit_id_of, new_commit


def utc(year, month, day, hour=0, minute=0, second=0) -> int:
    return calendar.timegm((year, month, day, hour, minute, second))


# -- lakeFS's own test vectors (pkg/graveler/ref/manager_test.go) -----------------------------


def test_lakefs_consistent_commit_identity():
    """TestConsistentCommitIdentity.  Its creation date is ``time.Date(2021, 1, 24, 15, 10, 11,
    1564956600 ns)``: the nanoseconds carry over into 15:10:12.56, and Unix() is whole seconds."""
    commit_id = commit_id_of(
        metarange_id="123456789987654321",
        parents=("132456987153687sdfsdf", "1324569csfvdkjhcsdkjc"),
        message="I just committed",
        committer="some-committer",
        creation_date=utc(2021, 1, 24, 15, 10, 12),
        metadata={"sdkafjnb": "1234", "sdkjvcnbkjndsc": "asnjkdl"},
    )
    assert commit_id == "f1a106bbeb12d3eb54418d6000f4507501d289d0d0879dcce6f4d31425587df1"


def test_lakefs_add_commit():
    """TestManager_AddCommit.  Its date string "2020-12-01T15:00:00Z00:00" does not parse as
    RFC 3339, so the test's commit carries Go's zero time: year 1, Unix() = -62135596800."""
    commit_id = commit_id_of(
        metarange_id="deadbeef123",
        parents=("deadbeef1", "deadbeef12"),
        message="message1",
        committer="user1",
        creation_date=-62135596800,
        metadata={"foo": "bar"},
    )
    assert commit_id == "2277b5abd2d3ba6b4d35c48a0e358b0c4bcf5cd6d891c67437fb4c4af0d2fd4b"


LAKEFS_LOG_NEWEST_FIRST = [
    "663b7520a2a05aaeed17de6136fa80eb5cd8417982011eb551230571ee412f2f",
    "87856d024fbe092852118edd958717d905019fa4eae40bac18a719e2f869e0f7",
    "25e51c6a8675c52558f8e303757624fca629bbc81f53afffa71a560df1c03948",
    "7653a24da53a43b229a64c7fec4a3259ed2cd3cba8b0021650dd54ea286a06cd",
    "d19e92e3b0717236255b529b35a7f1ec33e716be58af01c0f2fda80f4ded5a7a",
    "ac2f92fbefff7914f82c148a391c4705555aacb4ef9fe2c43c21e88f92e459ec",
    "fecd3e1f97cc1e54df6a06737d98931a8298c7ab1c870042666a10b42f7f7c0a",
    "1d6e9e55a600eceead14e70a903cea94df5a7b74a6ca4de6f8206ab45d60a5bd",
    "1f147e667ad0db53c2e9392d4bd35cb649269762f1da19e9e4d2e7b444dfd875",
    "61d527f08cc67522728f8ffc93bcb91cc789de80beb9c43a41ee225fb9c446b2",
    "32700dc4b5355be186976745fbef029f8ef7533170c0766ed77c9e3f574178c5",
    "4d82f11b02d6cb609d2bc1007620f578733ffff971a749ff4462dc69b834c20a",
    "2b4bb867adb1ac94c2f569dca92b9156a40ba0cd22a4bdc63cac1eb6b21b6f63",
    "72ee57f5cb8dddb264624f9ac7266c6ebc82af509e69f84d592a6732e74af06c",
    "3bbd01827326eba3f2a60e2ec98573cff1d2ead6c53336a5796ccf9d6401b052",
    "8107b1d0a1ce6f75a1848f31ab3261eb86acdfe9b4e84b7eaf329b3904179de9",
    "988c38b9f7d9b5df7242c3e837dac93e91dc0ff73da7dae1e010bcf18e3e0fa6",
    "cb5dca579b23b81f8148fc9153a4c9c733d830c26be1d5f8d12496300c02dd89",
    "ebbd689937253304ae29a541a727bfd11ab59a5659bb293e8ab2ed407c9a74c1",
    "fac53a04432b2e6e7185f3ac8314a874c556b2557adf3aa8d5b1df985cf96566",
]


def test_lakefs_log_of_twenty_chained_commits():
    """TestManager_Log: 20 commits, each on the previous one, one second apart from
    2020-12-01T15:00:00Z; the first has no parents."""
    commits = []
    for i in range(20):
        parents = commits[-1:]
        commits.append(new_commit("deadbeef123", parents, "message1", "user1", utc(2020, 12, 1, 15) + i, {"foo": "bar"}))
    assert [c.id for c in reversed(commits)] == LAKEFS_LOG_NEWEST_FIRST
    assert [c.generation for c in commits] == list(range(1, 21))


# -- the stream, by hand -----------------------------------------------------------------------


def test_commit_id_is_the_digest_of_lakefs_commit_stream_spelled_out():
    def int64(value):
        return b"\x02\x08" + value.to_bytes(8, "big", signed=True)

    def string(text):
        raw = text.encode()
        return b"\x01" + int64(len(raw)) + raw

    parents = ("p1", "p2")
    parents_identity = hashlib.sha256(b"\x03" + int64(2) + string("p1") + string("p2")).digest()
    stream = (
        string("commit:v1")
        + string("alice")
        + string("fix: é")
        + string("m" * 64)
        + int64(1_700_000_000)
        + b"\x04" + int64(2) + string("a") + string("1") + string("b") + string("2")
        + b"\x05" + b"\x00" + int64(32) + parents_identity
    )
    commit_id = commit_id_of("m" * 64, parents, "fix: é", "alice", 1_700_000_000, {"b": "2", "a": "1"})
    assert CANONICAL_COMMIT_FORMAT == "commit:v1"
    assert commit_id == hashlib.sha256(stream).hexdigest()
    # a root commit embeds the identity of the empty slice
    root_stream = stream.replace(b"\x05\x00" + int64(32) + parents_identity,
                                 b"\x05\x00" + int64(32) + hashlib.sha256(b"\x03" + int64(0)).digest())
    assert commit_id_of("m" * 64, (), "fix: é", "alice", 1_700_000_000, {"a": "1", "b": "2"}) == hashlib.sha256(root_stream).hexdigest()


def test_parent_order_is_part_of_the_id():
    """lakeFS's current commit version: a merge's first parent is the destination; swapping the
    parents is another commit."""
    args = dict(metarange_id="m", message="merge", committer="c", creation_date=1, metadata={})
    assert commit_id_of(parents=("dest", "src"), **args) != commit_id_of(parents=("src", "dest"), **args)


def test_fields_are_not_confused_with_each_other():
    """Every value is typed and length-prefixed: moving text between fields changes the ID."""
    args = dict(metarange_id="m", parents=("p",), creation_date=1, metadata={})
    assert commit_id_of(message="ab", committer="", **args) != commit_id_of(message="", committer="ab", **args)
    assert commit_id_of(message="a", committer="b", **args) != commit_id_of(message="b", committer="a", **args)
    ids = {
        commit_id_of("m", ("p",), "x", "y", 1, {"ab": "c"}),
        commit_id_of("m", ("p",), "x", "y", 1, {"a": "bc"}),
        commit_id_of("m", ("p,q",), "x", "y", 1, {}),
        commit_id_of("m", ("p", "q"), "x", "y", 1, {}),
    }
    assert len(ids) == 4


@pytest.mark.parametrize("date", [1 << 63, -(1 << 63) - 1])
def test_creation_date_outside_int64_is_rejected(date):
    with pytest.raises(InvalidArgument):
        commit_id_of("m", (), "x", "y", date, {})


# -- a commit ID covers its whole history --------------------------------------------------------


@dataclass
class Spec:
    parents: tuple[str, ...]
    message: str
    committer: str = "tester"
    metarange: str = "a" * 64
    date: int = 1_700_000_000
    metadata: dict = field(default_factory=dict)


# root - a - b ------- merge - tip
#    \               /
#     side1 - side2 -
HISTORY = {
    "root": Spec((), "Repository created"),
    "a": Spec(("root",), "a"),
    "b": Spec(("a",), "b"),
    "side1": Spec(("root",), "side1"),
    "side2": Spec(("side1",), "side2"),
    "merge": Spec(("b", "side2"), "Merge 'side' into 'main'"),
    "tip": Spec(("merge",), "tip"),
}
DESCENDANTS = {
    "root": {"a", "b", "side1", "side2", "merge", "tip"},
    "side1": {"side2", "merge", "tip"},
    "b": {"merge", "tip"},
    "merge": {"tip"},
}


def build(history: dict[str, Spec]) -> dict[str, str]:
    commits = {}
    for name, spec in history.items():  # parents come first in the dict
        commits[name] = new_commit(spec.metarange, [commits[p] for p in spec.parents], spec.message,
                                   spec.committer, spec.date, spec.metadata)
    return {name: commit.id for name, commit in commits.items()}


CHANGES = {
    "message": dict(message="changed"),
    "committer": dict(committer="someone else"),
    "metarange": dict(metarange="b" * 64),
    "date": dict(date=1_700_000_001),
    "metadata added": dict(metadata={"k": "v"}),
}


@pytest.mark.parametrize("ancestor", sorted(DESCENDANTS))
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_changing_an_ancestor_changes_every_descendant_and_nothing_else(ancestor, change):
    original = build(HISTORY)
    changed_history = dict(HISTORY)
    changed_history[ancestor] = Spec(**{**HISTORY[ancestor].__dict__, **CHANGES[change]})
    changed = build(changed_history)
    affected = {name for name in original if original[name] != changed[name]}
    assert affected == {ancestor} | DESCENDANTS[ancestor]


def test_changing_a_merge_parent_order_changes_the_merge_and_its_descendants():
    original = build(HISTORY)
    swapped = dict(HISTORY)
    swapped["merge"] = Spec(("side2", "b"), HISTORY["merge"].message)
    changed = build(swapped)
    assert {name for name in original if original[name] != changed[name]} == {"merge", "tip"}


def test_graveler_merge_commit_has_destination_first_and_lakefs_id(graveler, repo, rec):
    graveler.create_branch(repo, "side", "main")
    graveler.set(repo, "side", rec("s"))
    side = graveler.commit(repo, "side", "side work", "tester")
    graveler.set(repo, "main", rec("m"))
    main = graveler.commit(repo, "main", "main work", "tester")
    merge = graveler.merge(repo, "main", "side", "merger", message="merge side")
    assert merge.parents == (main.id, side.id)
    for commit in (side, main, merge):
        stored = graveler.get_commit(repo, commit.id)
        assert stored.id == commit_id_of(stored.metarange_id, stored.parents, stored.message, stored.committer,
                                         stored.creation_date, stored.metadata)
