"""The jobs against S3 (moto's server on loopback): import from an S3 prefix, export to an S3
prefix, garbage collection of a repository whose storage namespace is on S3."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest

from lakefuse.app import App
from lakefuse.spark import sources
from lakefuse.spark.exporter import SUCCESS_MARKER, export_commit
from lakefuse.spark.gc import collect_garbage
from lakefuse.spark.importer import import_objects
from lakefuse.spark.session import Progress

QUIET = Progress("s3", enabled=False)


@pytest.fixture(scope="module")
def s3_endpoint():
    from s3server import create_bucket, s3_server

    with s3_server() as endpoint:
        for bucket in ("src-bucket", "dest-bucket", "lake-bucket"):
            create_bucket(endpoint, bucket)
        yield endpoint


@pytest.fixture
def s3_app(app_config, s3_endpoint):
    from s3server import s3_test_config

    application = App.from_config(replace(app_config, s3=s3_test_config(s3_endpoint)))
    yield application
    application.close()


def test_import_from_s3_and_export_to_s3(spark, s3_app, tmp_path, monkeypatch):
    app = s3_app
    monkeypatch.setattr(sources, "FILES_PER_TASK", 4)  # several tasks per S3 level
    source = app.block_for_namespace("s3://src-bucket/landing")
    files = {f"{d}/{i}.json": f"{d}{i}".encode() * 3 for d in ("x", "y/z") for i in range(6)}
    files.update({f"top{i}": b"t" * i for i in range(9)})
    for key, data in files.items():
        source.put(key, data)
    app.catalog.create_repository("repo1", f"local://{tmp_path}/storage/repo1")
    summary = import_objects(spark, app, "repo1", "main", "s3://src-bucket/landing", prefix="raw",
                             records_per_partition=10, progress=QUIET)
    assert summary.objects == len(files) and summary.listing_tasks > 3 and summary.partitions > 1
    listed = {item.path: item.entry for item in app.catalog.iter_objects("repo1", "main")}
    assert sorted(listed) == sorted("raw/" + key for key in files)
    assert listed["raw/x/1.json"].physical_address == "s3://src-bucket/landing/x/1.json"
    assert re.fullmatch(r"[0-9a-f]{32}", listed["raw/x/1.json"].checksum)  # the ETag (MD5)
    for key, data in files.items():
        assert app.catalog.read_object("repo1", "main", "raw/" + key) == data
    again = import_objects(spark, app, "repo1", "main", "s3://src-bucket/landing", prefix="raw",
                           records_per_partition=10, progress=QUIET)
    assert again.metarange_id == summary.metarange_id

    app.catalog.upload_bytes("repo1", "main", "local.txt", b"from the local namespace")
    app.catalog.commit("repo1", "main", "more", "tester")
    exported = export_commit(spark, app, "repo1", "main", "s3://dest-bucket/out", progress=QUIET)
    assert exported.copied == len(files) + 1
    dest = app.block_for_namespace("s3://dest-bucket/out")
    for key, data in files.items():
        assert dest.get("raw/" + key) == data
    assert dest.get("local.txt") == b"from the local namespace"
    assert b"commit_id" in dest.get(SUCCESS_MARKER)
    resumed = export_commit(spark, app, "repo1", "main", "s3://dest-bucket/out", progress=QUIET)
    assert resumed.skipped == len(files) + 1 and resumed.copied == 0


def test_gc_of_a_namespace_on_s3(spark, s3_app):
    app = s3_app
    catalog = app.catalog
    catalog.create_repository("lake", "s3://lake-bucket/repos/lake")
    old = catalog.upload_bytes("lake", "main", "a", b"old").physical_address
    catalog.commit("lake", "main", "one", "tester")
    catalog.upload_bytes("lake", "main", "a", b"new")
    catalog.commit("lake", "main", "two", "tester")
    staged_over = catalog.upload_bytes("lake", "main", "b", b"first").physical_address
    catalog.upload_bytes("lake", "main", "b", b"second")
    found = {}
    summary = collect_garbage(spark, app, "lake", dry_run=True, min_age_seconds=0, now=time.time() + 40 * 86400,
                              on_object=found.__setitem__, listing_tasks=4, progress=QUIET)
    assert set(found) == {old, staged_over} and summary.listed == 4
    collect_garbage(spark, app, "lake", min_age_seconds=0, now=time.time() + 40 * 86400, progress=QUIET)
    namespace = app.block_for_namespace("s3://lake-bucket/repos/lake")
    assert not namespace.exists(old) and not namespace.exists(staged_over)
    assert catalog.read_object("lake", "main", "a") == b"new" and catalog.read_object("lake", "main", "b") == b"second"
    assert any(stat.key.startswith("_lakefs/") for stat in namespace.list("_lakefs/"))
