"""Ref expressions (parsing, resolution over merge commits, prefixes, ambiguity), log and the
merge-base search (checked against the definition on random histories)."""

from __future__ import annotations

import random

import pytest

from lakefuse.errors import AmbiguousRef, InvalidArgument, RefNotFound
from lakefuse.graveler.commits import CommitGraph, new_commit
from lakefuse.graveler.model import Commit
from lakefuse.graveler.refexpr import RefKind, parse_ref_expression


@pytest.mark.parametrize(
    "text,base,modifiers",
    [
        ("main", "main", ()),
        ("main~", "main", (("~", 1),)),
        ("main~3", "main", (("~", 3),)),
        ("main^", "main", (("^", 1),)),
        ("main^0", "main", (("^", 0),)),
        ("main~2^2", "main", (("~", 2), ("^", 2))),
        ("v1.0^^~", "v1.0", (("^", 1), ("^", 1), ("~", 1))),
        ("abc123~10", "abc123", (("~", 10),)),
    ],
)
def test_parse_ref_expression(text, base, modifiers):
    parsed = parse_ref_expression(text)
    assert (parsed.base, parsed.modifiers) == (base, modifiers)


@pytest.mark.parametrize("text", ["", "~1", "^", "main~x", "main^-1", "main~1~a", "ma in", "main\n"])
def test_malformed_ref_expressions(text):
    with pytest.raises(InvalidArgument):
        parse_ref_expression(text)


@pytest.fixture
def history(graveler, repo, rec):
    """main: init - c1 - c2 - M(c2, f2) - c3;  feature: c1 - f1 - f2."""
    graveler.set(repo, "main", rec("c1"))
    c1 = graveler.commit(repo, "main", "c1", "t")
    graveler.create_branch(repo, "feature", "main")
    graveler.set(repo, "feature", rec("f1"))
    f1 = graveler.commit(repo, "feature", "f1", "t")
    graveler.set(repo, "feature", rec("f2"))
    f2 = graveler.commit(repo, "feature", "f2", "t")
    graveler.set(repo, "main", rec("c2"))
    c2 = graveler.commit(repo, "main", "c2", "t")
    merge = graveler.merge(repo, "main", "feature", "t")
    graveler.set(repo, "main", rec("c3"))
    c3 = graveler.commit(repo, "main", "c3", "t")
    graveler.create_tag(repo, "v1", "main~1")
    return dict(c1=c1, f1=f1, f2=f2, c2=c2, merge=merge, c3=c3)


def test_resolution_over_merge_commits(graveler, repo, history):
    def commit_of(ref):
        return graveler.resolve(repo, ref).commit.id

    h = history
    assert commit_of("main") == h["c3"].id
    assert commit_of("main~") == commit_of("main^") == commit_of("main^1") == h["merge"].id
    assert commit_of("main~1^2") == h["f2"].id
    assert commit_of("main~2") == commit_of("main^^") == h["c2"].id
    assert commit_of("main~1^2~1") == commit_of("v1^2^") == h["f1"].id
    assert commit_of("main~1^0") == h["merge"].id
    assert commit_of("v1") == h["merge"].id
    assert commit_of(h["merge"].id + "^2") == h["f2"].id
    assert commit_of(h["c3"].id[:10] + "~1^2~1") == h["f1"].id
    with pytest.raises(RefNotFound):
        graveler.resolve(repo, "main~1^3")
    with pytest.raises(RefNotFound):
        graveler.resolve(repo, "main~50")
    graveler.commit(repo, "main", "c4", "t", allow_empty=True)
    assert commit_of("main~2^2") == h["f2"].id
    assert commit_of("main~2^2~1") == commit_of("main~2^2^") == h["f1"].id


def test_resolved_kinds(graveler, repo, history):
    assert graveler.resolve(repo, "main").kind is RefKind.BRANCH
    assert graveler.resolve(repo, "main").writable
    assert graveler.resolve(repo, "main").branch.id == "main"
    for ref, kind in [("v1", RefKind.TAG), (history["c1"].id, RefKind.COMMIT), (history["c1"].id[:8], RefKind.COMMIT),
                      ("main~1", RefKind.EXPRESSION), ("main^0", RefKind.EXPRESSION)]:
        resolved = graveler.resolve(repo, ref)
        assert resolved.kind is kind and not resolved.writable and resolved.branch is None


def test_commit_prefixes_and_ambiguity(graveler, graveler_stores, repo, history):
    c1 = history["c1"]
    assert graveler.resolve(repo, c1.id[:12]).commit.id == c1.id
    with pytest.raises(RefNotFound):
        graveler.resolve(repo, "0123456789abcdef" * 4)  # full ID that does not exist
    with pytest.raises(RefNotFound):
        graveler.resolve(repo, "abc")  # too short to be a prefix
    # two commits sharing a prefix
    twins = [
        Commit(id="beef" + suffix * 60, metarange_id=c1.metarange_id, parents=(c1.id,), message=suffix,
               committer="t", creation_date=1, metadata={}, generation=3)
        for suffix in "01"
    ]
    for twin in twins:
        graveler_stores.refs.add_commit(repo, twin)
    with pytest.raises(AmbiguousRef) as info:
        graveler.resolve(repo, "beef")
    assert sorted(info.value.candidates) == sorted(t.id for t in twins)
    assert graveler.resolve(repo, "beef0").commit.id == twins[0].id
    assert graveler.resolve(repo, "beef1~1").commit.id == c1.id


def test_log(graveler, repo, history):
    h = history
    first_parent = [c.message for c in graveler.log(repo, "main")]
    assert first_parent == ["c3", "Merge 'feature' into 'main'", "c2", "c1", "Repository created"]
    assert [c.id for c in graveler.log(repo, "main", amount=2)] == [h["c3"].id, h["merge"].id]
    everything = [c.message for c in graveler.log(repo, "main", all_parents=True)]
    assert sorted(everything) == sorted(["c3", "Merge 'feature' into 'main'", "c2", "f2", "f1", "c1", "Repository created"])
    assert everything[0] == "c3" and everything[-1] == "Repository created"
    position = {message: i for i, message in enumerate(everything)}
    assert position["f2"] < position["f1"] < position["c1"]
    assert [c.message for c in graveler.log(repo, "feature")] == ["f2", "f1", "c1", "Repository created"]
    assert graveler.get_commit(repo, h["merge"].id).generation == 5


# -- merge base against the definition -------------------------------------------------------


class _FakeRefs:
    def __init__(self):
        self.commits = {}

    def get_commit(self, _repo, commit_id):
        return self.commits[commit_id]


def _random_history(rng: random.Random, size: int) -> tuple[_FakeRefs, list[Commit]]:
    refs = _FakeRefs()
    commits = [new_commit("m" * 64, [], "root", "t", 0)]
    refs.commits[commits[0].id] = commits[0]
    for i in range(1, size):
        parents = [rng.choice(commits[max(0, i - 6):])]
        if rng.random() < 0.35:
            other = rng.choice(commits)
            if other.id != parents[0].id:
                parents.append(other)
        commit = new_commit("m" * 64, parents, f"c{i}", "t", rng.randrange(0, 50))
        commits.append(commit)
        refs.commits[commit.id] = commit
    return refs, commits


def _ancestors(refs, commit):
    seen = {commit.id}
    stack = [commit]
    while stack:
        for parent in stack.pop().parents:
            if parent not in seen:
                seen.add(parent)
                stack.append(refs.commits[parent])
    return seen


@pytest.mark.parametrize("seed", range(12))
def test_merge_bases_match_the_definition(seed):
    rng = random.Random(seed)
    refs, commits = _random_history(rng, 40)
    graph = CommitGraph(refs)
    ancestors = {c.id: _ancestors(refs, c) for c in commits}
    for _ in range(25):
        left, right = rng.choice(commits), rng.choice(commits)
        common = ancestors[left.id] & ancestors[right.id]
        best = {c for c in common if not any(c != o and c in ancestors[o] for o in common)}
        found = graph.merge_bases("r", left, right)
        assert {c.id for c in found} == best
        chosen = graph.merge_base("r", left, right)
        assert chosen == graph.merge_base("r", right, left)
        assert graph.is_ancestor("r", chosen, left) and graph.is_ancestor("r", chosen, right)
