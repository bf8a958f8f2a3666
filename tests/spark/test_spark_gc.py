"""``collect_garbage`` on a real local Spark session, against a repository with known garbage
and known referenced objects: the dry run finds exactly the garbage, the real run deletes
exactly it, everything referenced stays readable, nothing outside ``data/`` is touched."""

from __future__ import annotations

import os
import time

import pytest

from lakefuse.errors import InvalidArgument, RepositoryNotFound
from lakefuse.fs.app_backend import AppBackend
from lakefuse.fs.filesystem import LakeFilesystem
from lakefuse.spark.gc import collect_garbage
from lakefuse.spark.importer import import_objects
from lakefuse.spark.session import Progress
from spark_trees import make_tree

DAY = 86400
LATER = time.time() + 40 * DAY  # "now" for GC: every commit is 40 days old


def run_gc(spark, app, repo="repo1", **options):
    found: dict[str, int] = {}
    options.setdefault("now", LATER)
    options.setdefault("min_age_seconds", 0)
    summary = collect_garbage(
        spark, app, repo, on_object=found.__setitem__, progress=Progress("gc", enabled=False), listing_tasks=3, **options
    )
    return summary, found


def all_files(root) -> dict[str, bytes]:
    out = {}
    for directory, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


class Scenario:
    """A repository whose garbage and live objects are known by physical address."""

    def __init__(self, spark, app, repo, tmp_path):
        c = app.catalog
        self.app = app
        self.repo = repo
        self.root = tmp_path / "storage" / repo
        self.garbage: set[str] = set()
        self.live: dict[tuple[str, str], bytes] = {}  # (ref, path) -> bytes, all must stay readable
        up = lambda branch, path, data: c.upload_bytes(repo, branch, path, data).physical_address  # noqa: E731

        self.history = up("main", "doc.txt", b"v1")  # overwritten later: only an old commit has it
        c.commit(repo, "main", "one", "tester")
        up("main", "doc.txt", b"v2")
        up("main", "tagged.txt", b"tagged")  # deleted later, but a tag keeps it
        c.commit(repo, "main", "two", "tester")
        c.create_tag(repo, "v1", "main")
        c.delete_object(repo, "main", "tagged.txt")
        c.commit(repo, "main", "three", "tester")
        self.garbage.add(self.history)
        self.live[("v1", "tagged.txt")] = b"tagged"
        self.live[("main", "doc.txt")] = b"v2"

        self.garbage.add(up("main", "staged.txt", b"first"))  # overwritten before any commit
        self.live[("main", "staged.txt")] = b"second"
        up("main", "staged.txt", b"second")
        self.garbage.add(up("main", "gone.txt", b"deleted before commit"))
        c.delete_object(repo, "main", "gone.txt")

        c.create_branch(repo, "feature", "main")
        up("feature", "f.txt", b"feature")
        c.commit(repo, "feature", "on feature", "tester")
        self.live[("feature", "f.txt")] = b"feature"
        c.create_branch(repo, "doomed", "main")
        self.garbage.add(up("doomed", "d.txt", b"doomed"))
        c.commit(repo, "doomed", "on doomed", "tester")
        c.delete_branch(repo, "doomed")

        make_tree(tmp_path / "src", {"ext.txt": b"imported, never deleted"})
        import_objects(spark, app, repo, "feature", str(tmp_path / "src"), prefix="ext", progress=Progress("i", enabled=False))
        self.live[("feature", "ext/ext.txt")] = b"imported, never deleted"
        self.source = tmp_path / "src"

        (self.root / "foreign").mkdir()
        (self.root / "foreign" / "file").write_bytes(b"not ours: outside data/")

    def garbage_keys(self) -> set[str]:
        return set(self.garbage)

    def check_live(self) -> None:
        for (ref, path), data in self.live.items():
            assert self.app.catalog.read_object(self.repo, ref, path) == data, (ref, path)


def test_dry_run_then_real_run(spark, app, repo, tmp_path):
    scenario = Scenario(spark, app, repo, tmp_path)
    before = all_files(scenario.root)
    summary, found = run_gc(spark, app, dry_run=True)
    assert set(found) == scenario.garbage_keys()
    assert summary.candidates == len(found) and summary.too_young == 0 and summary.deleted == 0
    assert summary.candidate_bytes == sum(found.values())
    assert all_files(scenario.root) == before  # dry run: nothing deleted

    summary, deleted = run_gc(spark, app)
    assert set(deleted) == scenario.garbage_keys() and summary.deleted == len(deleted)
    after = all_files(scenario.root)
    assert set(before) - set(after) == scenario.garbage_keys()
    assert {k: v for k, v in before.items() if k not in scenario.garbage} == after  # _lakefs/, foreign/ untouched
    scenario.check_live()
    assert (scenario.source / "ext.txt").read_bytes() == b"imported, never deleted"

    summary, found = run_gc(spark, app, dry_run=True)
    assert found == {} and summary.referenced == summary.listed


def test_retention_and_min_age_keep_objects(spark, app, repo, tmp_path):
    scenario = Scenario(spark, app, repo, tmp_path)
    _summary, found = run_gc(spark, app, dry_run=True, retention_days=60)  # history within retention
    assert set(found) == scenario.garbage_keys() - {scenario.history}
    # retention 0 at the real time: every commit but the heads and tags expired, but all is young
    summary, deleted = run_gc(spark, app, now=time.time(), retention_days=0, min_age_seconds=3600)
    assert deleted == {} and summary.too_young == len(scenario.garbage) and summary.candidates == 0
    scenario.check_live()
    assert all(os.path.exists(scenario.root / key) for key in scenario.garbage)


def test_nested_namespace_of_another_repository_is_never_listed(spark, app, repo, tmp_path):
    catalog = app.catalog
    nested_ns = tmp_path / "storage" / repo / "data" / "inner"
    catalog.create_repository("inner", f"local://{nested_ns}")
    inner_old = catalog.upload_bytes("inner", "main", "x", b"old").physical_address
    catalog.commit("inner", "main", "one", "tester")
    catalog.upload_bytes("inner", "main", "x", b"new")
    catalog.commit("inner", "main", "two", "tester")
    mine = catalog.upload_bytes(repo, "main", "y", b"y").physical_address
    catalog.delete_object(repo, "main", "y")
    _summary, found = run_gc(spark, app, dry_run=True)
    assert set(found) == {mine}
    run_gc(spark, app)
    assert (nested_ns / inner_old).exists()
    assert catalog.read_object("inner", "main", "x") == b"new"
    _summary, found = run_gc(spark, app, repo="inner", dry_run=True)
    assert set(found) == {inner_old}


def test_bad_input(spark, app, repo):
    with pytest.raises(RepositoryNotFound):
        run_gc(spark, app, repo="no-such-repo")
    with pytest.raises(InvalidArgument):
        run_gc(spark, app, retention_days=-1)
    with pytest.raises(InvalidArgument):
        run_gc(spark, app, min_age_seconds=-5)


def test_a_file_a_mount_is_writing_survives_a_gc(spark, app, repo, tmp_path):
    """A mount makes a new file's spool in ``data/`` where it becomes an object (see
    ``SpoolReserve``, in place): unreferenced while the file is written.  A gc with an hour's
    ``--min-age`` keeps it (too young); one with none deletes it, and the mount, which still
    holds the spool open, stores the file's bytes as a copy at its close: nothing is lost."""
    fs = LakeFilesystem(AppBackend(app), spool_dir=str(tmp_path / "spool"))
    try:
        branch = fs.lookup(fs.lookup(1, repo).ino, "main").ino

        def write(name: str, data: bytes) -> None:
            result, _ = fs.create(branch, name, 0o100644, os.O_WRONLY | os.O_CREAT)
            fs.write(result.fh, 0, data)
            fs.release(result.fh)

        write("closed.txt", b"stored before")
        fs.state.stager.flush_all()
        result, _ = fs.create(branch, "open.bin", 0o100644, os.O_WRONLY | os.O_CREAT)
        payload = os.urandom(100_000)
        fs.write(result.fh, 0, payload)
        spool = fs.state.handles.get(result.fh).open_file.spool
        assert spool.address is not None and os.path.dirname(spool.path) == str(tmp_path / "storage" / repo / "data")

        summary, deleted = run_gc(spark, app, now=time.time(), min_age_seconds=3600)
        assert deleted == {} and summary.too_young > 0 and os.path.exists(spool.path)
        summary, deleted = run_gc(spark, app, now=time.time() + 1, min_age_seconds=0)
        assert spool.address in deleted and not os.path.exists(spool.path)

        fs.release(result.fh)  # stored from the descriptor the mount holds
        write("after.txt", b"a spool made after the gc")  # the reserve's deleted files are skipped
        fs.state.stager.flush_all()
        assert app.catalog.read_object(repo, "main", "open.bin") == payload
        assert app.catalog.read_object(repo, "main", "closed.txt") == b"stored before"
        assert app.catalog.read_object(repo, "main", "after.txt") == b"a spool made after the gc"
    finally:
        fs.close()
