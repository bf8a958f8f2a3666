"""``import_objects`` on a real local Spark session: read back through the catalog, same
metarange on re-import, prefix replacement, staged changes, bad input before any write."""

from __future__ import annotations

import os
import re

import pytest

from lakefuse.errors import (
    DirtyBranch,
    InvalidArgument,
    NotFound,
    ReadOnly,
    RefNotFound,
    RepositoryNotFound,
    StorageError,
)
from lakefuse.spark.importer import import_objects
from lakefuse.spark.session import Progress
from spark_trees import make_tree, sample_tree

QUIET = Progress("import", enabled=False)


def run_import(spark, app, source, prefix="", branch="main", repo="repo1", **options):
    options.setdefault("records_per_partition", 60)  # several partitions even for a small tree
    return import_objects(spark, app, repo, branch, str(source), prefix=prefix, progress=QUIET, **options)


def storage_files(app, repo="repo1") -> list[str]:
    block = app.block_for_repository(repo)
    return sorted(stat.key for stat in block.list(""))


def test_import_then_read_back(spark, app, repo, tmp_path):
    files = make_tree(tmp_path / "src", sample_tree())
    summary = run_import(spark, app, tmp_path / "src")
    assert summary.objects == len(files) and summary.bytes == sum(map(len, files.values()))
    assert summary.partitions > 1 and summary.ranges > summary.partitions and summary.changed
    catalog = app.catalog
    listed = {item.path: item.entry for item in catalog.iter_objects(repo, "main")}
    assert sorted(listed) == sorted(files)
    for path, data in files.items():
        assert catalog.read_object(repo, "main", path) == data
    entry = listed["top.txt"]
    assert entry.address_is_full and entry.physical_address == f"local://{tmp_path}/src/top.txt"
    assert not re.fullmatch(r"[0-9a-f]{32}", entry.checksum)
    assert entry.mtime == int(os.stat(tmp_path / "src" / "top.txt").st_mtime)
    commit = catalog.get_commit(repo, summary.commit_id)
    assert commit.metadata["lakefuse.import.source"] == f"local://{tmp_path}/src"
    assert catalog.resolve(repo, "main").commit.id == summary.commit_id
    # nothing was copied: the namespace holds only Graveler files
    assert all(key.startswith("_lakefs/") for key in storage_files(app))


def test_reimport_of_unchanged_source_gives_the_same_metarange(spark, app, repo, tmp_path):
    make_tree(tmp_path / "src", sample_tree(120))
    first = run_import(spark, app, tmp_path / "src")
    second = run_import(spark, app, tmp_path / "src")
    assert second.metarange_id == first.metarange_id and not second.changed
    assert second.ranges_uploaded == 0 and second.commit_id != first.commit_id
    # another repository, a fresh namespace: same content, same metarange
    app.catalog.create_repository("repo2", f"local://{tmp_path}/storage/repo2")
    third = run_import(spark, app, tmp_path / "src", repo="repo2")
    assert third.metarange_id == first.metarange_id
    with open(tmp_path / "src" / "top.txt", "ab") as handle:
        handle.write(b" changed")
    fourth = run_import(spark, app, tmp_path / "src")
    assert fourth.metarange_id != first.metarange_id and fourth.changed
    assert app.catalog.read_object(repo, "main", "top.txt") == b"top level changed"


def test_import_replaces_only_its_prefix_and_keeps_staged_changes_elsewhere(spark, app, repo, tmp_path):
    catalog = app.catalog
    for path in ("a/keep.txt", "imp/old.txt", "imp2/keep.txt", "z/keep.txt"):
        catalog.upload_bytes(repo, "main", path, path.encode())
    catalog.commit(repo, "main", "before", "tester")
    catalog.upload_bytes(repo, "main", "staged/elsewhere.txt", b"staged")
    make_tree(tmp_path / "src", {"new1.txt": b"1", "sub/new2.txt": b"22"})
    summary = run_import(spark, app, tmp_path / "src", prefix="imp", message="bring data")
    assert summary.prefix == "imp/" and summary.objects == 2
    committed = sorted(item.path for item in catalog.iter_objects(repo, summary.commit_id))
    assert committed == ["a/keep.txt", "imp/new1.txt", "imp/sub/new2.txt", "imp2/keep.txt", "z/keep.txt"]
    assert catalog.get_commit(repo, summary.commit_id).message == "bring data"
    assert catalog.read_object(repo, "main", "imp/sub/new2.txt") == b"22"
    assert catalog.read_object(repo, "main", "staged/elsewhere.txt") == b"staged"  # still staged
    assert [d.path for d in catalog.diff_uncommitted(repo, "main")] == ["staged/elsewhere.txt"]

    catalog.upload_bytes(repo, "main", "imp/dirty.txt", b"x")
    head = catalog.resolve(repo, "main").commit.id
    with pytest.raises(DirtyBranch, match="imp/"):
        run_import(spark, app, tmp_path / "src", prefix="imp")
    assert catalog.resolve(repo, "main").commit.id == head


def test_bad_input_fails_before_any_write(spark, app, repo, tmp_path):
    catalog = app.catalog
    make_tree(tmp_path / "src", {"f": b"data"})
    catalog.create_tag(repo, "v1", "main")
    (tmp_path / "empty").mkdir()
    before = storage_files(app)
    head = catalog.resolve(repo, "main").commit.id
    with pytest.raises(RepositoryNotFound):
        run_import(spark, app, tmp_path / "src", repo="no-such-repo")
    with pytest.raises(RefNotFound):
        run_import(spark, app, tmp_path / "src", branch="nope")
    with pytest.raises(ReadOnly):
        run_import(spark, app, tmp_path / "src", branch="v1")
    with pytest.raises(NotFound, match="does not exist"):
        run_import(spark, app, tmp_path / "missing")
    with pytest.raises(InvalidArgument, match="storage namespace"):
        run_import(spark, app, tmp_path / "storage" / "repo1")
    with pytest.raises(InvalidArgument, match="no objects"):
        run_import(spark, app, tmp_path / "empty")
    with pytest.raises(InvalidArgument, match="prefix"):
        run_import(spark, app, tmp_path / "src", prefix="../up")
    with pytest.raises(StorageError, match="cannot be listed"):
        run_import(spark, app, "s3://bucket/prefix", settings=_unreachable_s3_settings())
    assert storage_files(app) == before
    assert catalog.resolve(repo, "main").commit.id == head


def _unreachable_s3_settings():
    from lakefuse.config import S3Config
    from lakefuse.spark.settings import JobSettings

    # a closed loopback port: connection refused at once, one attempt
    return JobSettings(S3Config(endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="k",
                                secret_access_key="s", max_attempts=1))
