"""``export_commit`` on a real local Spark session: bytes equal, ``_SUCCESS`` last, resume,
refs other than branch heads, bad input."""

from __future__ import annotations

import json
import stat
import os

import pytest

from lakefuse.errors import InvalidArgument, RefNotFound, RepositoryNotFound, StorageError
from lakefuse.spark.exporter import SUCCESS_MARKER, export_commit
from lakefuse.spark.importer import import_objects
from lakefuse.spark.session import Progress
from spark_trees import make_tree, sample_tree

QUIET = Progress("export", enabled=False)


def run_export(spark, app, destination, ref="main", repo="repo1", **options):
    options.setdefault("objects_per_task", 40)
    return export_commit(spark, app, repo, ref, str(destination), progress=QUIET, **options)


def tree_of(root) -> dict[str, bytes]:
    out = {}
    for directory, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


@pytest.fixture
def filled(spark, app, repo, tmp_path) -> dict[str, bytes]:
    """main: imported objects under imp/ plus uploaded ones (with a 3 MB one)."""
    catalog = app.catalog
    imported = make_tree(tmp_path / "src", sample_tree(150))
    import_objects(spark, app, repo, "main", str(tmp_path / "src"), prefix="imp", progress=Progress("i", enabled=False))
    uploaded = {f"up/{i}.txt": f"uploaded {i}".encode() * (i + 1) for i in range(30)}
    uploaded["up/big.bin"] = os.urandom(3 * 1024 * 1024)
    for path, data in uploaded.items():
        catalog.upload_bytes(repo, "main", path, data)
    catalog.commit(repo, "main", "uploads", "tester")
    return {**{"imp/" + path: data for path, data in imported.items()}, **uploaded}


def test_export_then_compare_bytes(spark, app, repo, filled, tmp_path):
    out = tmp_path / "out"
    summary = run_export(spark, app, out)
    assert summary.objects == summary.copied == len(filled) and summary.skipped == summary.failed == 0
    assert summary.bytes_copied == sum(map(len, filled.values()))
    exported = tree_of(out)
    marker = json.loads(exported.pop(SUCCESS_MARKER))
    assert exported == filled
    assert marker["commit_id"] == app.catalog.resolve(repo, "main").commit.id and marker["objects"] == len(filled)
    # the marker is written after every object
    assert os.stat(out / SUCCESS_MARKER).st_mtime_ns >= max(os.stat(out / p).st_mtime_ns for p in filled)


def test_rerun_resumes(spark, app, repo, filled, tmp_path):
    out = tmp_path / "out"
    run_export(spark, app, out)
    os.unlink(out / "imp" / "top.txt")
    os.unlink(out / "up" / "3.txt")
    (out / "up" / "4.txt").write_bytes(b"short")  # wrong size: copied again
    os.unlink(out / SUCCESS_MARKER)
    summary = run_export(spark, app, out)
    assert (summary.copied, summary.skipped) == (3, len(filled) - 3)
    exported = tree_of(out)
    exported.pop(SUCCESS_MARKER)
    assert exported == filled


def test_export_of_a_tag_and_a_commit_ignores_later_and_staged_changes(spark, app, repo, filled, tmp_path):
    catalog = app.catalog
    catalog.create_tag(repo, "v1", "main")
    commit_id = catalog.resolve(repo, "main").commit.id
    catalog.upload_bytes(repo, "main", "later.txt", b"later")
    catalog.commit(repo, "main", "later", "tester")
    catalog.upload_bytes(repo, "main", "staged.txt", b"staged")
    for ref in ("v1", commit_id[:16]):
        run_export(spark, app, tmp_path / ref, ref=ref)
        exported = tree_of(tmp_path / ref)
        exported.pop(SUCCESS_MARKER)
        assert exported == filled
    run_export(spark, app, tmp_path / "head")
    head = tree_of(tmp_path / "head")
    assert head["later.txt"] == b"later" and "staged.txt" not in head


def test_failures_leave_no_marker_and_bad_input_fails_early(spark, app, repo, filled, tmp_path):
    out = tmp_path / "out"
    (out / "up" / "5.txt").mkdir(parents=True)  # a directory where an object must go
    with pytest.raises(StorageError, match="1 of .* failed.*up/5.txt") as failure:
        run_export(spark, app, out)
    assert failure.value.details["summary"].copied == len(filled) - 1
    assert not (out / SUCCESS_MARKER).exists()
    with pytest.raises(InvalidArgument, match="storage namespace"):
        run_export(spark, app, tmp_path / "storage" / "repo1" / "export")
    with pytest.raises(RefNotFound):
        run_export(spark, app, tmp_path / "x", ref="no-such-branch")
    with pytest.raises(RepositoryNotFound):
        run_export(spark, app, tmp_path / "x", repo="no-such-repo")
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StorageError, match="cannot create"):
        run_export(spark, app, tmp_path / "file" / "sub")
    assert not (tmp_path / "x").exists()


def test_symbolic_links_and_fifos_survive_import_and_export(spark, app, repo, tmp_path):
    """A local tree's links (relative, absolute, dangling) and FIFOs are imported as entries of
    their own and exported as links and FIFOs again; a re-import gives the same metarange."""
    src = tmp_path / "src"
    make_tree(src, {"a/file.txt": b"data", "b/other": b"x"})
    os.symlink("../a/file.txt", src / "b" / "relative")
    os.symlink("/etc/hostname", src / "absolute")
    os.symlink("nowhere", src / "a" / "dangling")
    os.mkfifo(src / "a" / "pipe")
    os.chmod(src / "a" / "pipe", 0o666)
    os.utime(src / "a" / "dangling", ns=(1_600_000_000_123_456_789,) * 2, follow_symlinks=False)
    first = import_objects(spark, app, repo, "main", str(src), progress=Progress("i", enabled=False))
    assert first.objects == 6 and first.skipped == 0
    catalog = app.catalog
    entries = {item.path: item.entry for item in catalog.iter_objects(repo, "main")}
    link = entries["b/relative"]
    assert link.metadata["lakefuse-type"] == "symlink" and link.metadata["lakefuse-target"] == "../a/file.txt"
    assert catalog.read_object(repo, "main", "b/relative") == b"../a/file.txt" and link.size == 13
    assert entries["a/dangling"].metadata["lakefuse-mtime-ns"] == "1600000000123456789"
    assert entries["a/pipe"].metadata["lakefuse-type"] == "fifo" and entries["a/pipe"].metadata["lakefuse-mode"] == "666"
    assert entries["a/file.txt"].metadata == {}  # regular files: as before
    again = import_objects(spark, app, repo, "main", str(src), progress=Progress("i", enabled=False))
    assert again.metarange_id == first.metarange_id
    out = tmp_path / "out"
    for attempt in range(2):  # the second run finds everything in place
        summary = run_export(spark, app, out)
        assert summary.failed == 0 and (summary.copied, summary.skipped) == ((6, 0) if attempt == 0 else (0, 6))
    assert os.readlink(out / "b" / "relative") == "../a/file.txt" and (out / "b" / "relative").read_bytes() == b"data"
    assert os.readlink(out / "absolute") == "/etc/hostname" and os.readlink(out / "a" / "dangling") == "nowhere"
    pipe = os.lstat(out / "a" / "pipe")
    assert stat.S_ISFIFO(pipe.st_mode) and stat.S_IMODE(pipe.st_mode) == 0o666
    assert (out / "a" / "file.txt").read_bytes() == b"data"
