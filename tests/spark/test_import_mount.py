"""Import, then read back through the CLI and a real kernel mount: the Spark import job ingests a
local tree (entries point at the source files, nothing is copied), a ``lakefuse mount`` of the
repository serves every file with the source's bytes (through the branch and through the import
commit's directory), and ``lakefuse fs cat`` prints one of them.  Needs FUSE as well as Spark:
skips without either, except under CI=true (see tests/fuse/lakemount.py)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from lakefuse.cli.main import main
from lakefuse.spark.importer import import_objects
from lakefuse.spark.session import Progress
from spark_trees import make_tree, sample_tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuse"))
from lakemount import LakeHome, mounted, require_fuse  # noqa: E402


def _raise(exc: OSError):
    raise exc


def tree_files(root: Path) -> dict[str, Path]:
    """Relative path -> full path of every file under ``root`` (a directory that cannot be
    listed fails the test)."""
    return {os.path.relpath(os.path.join(top, name), root): Path(top) / name
            for top, _dirs, names in os.walk(root, onerror=_raise) for name in names}


def test_import_then_read_back_through_the_mount_and_the_cli(spark, tmp_path, monkeypatch, capsysbinary):
    require_fuse()
    files = make_tree(tmp_path / "src", sample_tree(150))
    os.symlink("../top.txt", tmp_path / "src" / "flat" / "link")  # imported as a link
    os.mkfifo(tmp_path / "src" / "pipe")
    home = LakeHome(tmp_path / "home")
    try:
        home.create_repository("repo1")
        summary = import_objects(spark, home.app, "repo1", "main", str(tmp_path / "src"), prefix="landing",
                                 message="import the tree", records_per_partition=40,
                                 progress=Progress("import", enabled=False))
        assert summary.objects == len(files) + 2 and summary.partitions > 1

        with mounted(home, tmp_path / "mnt", "lakefs://repo1") as mount:
            for ref in ("main", summary.commit_id):
                landing = mount / ref / "landing"  # lakefs://repo1 mounted: its refs at the root
                served = tree_files(landing)
                assert os.readlink(served.pop("flat/link")) == "../top.txt"
                assert stat.S_ISFIFO(served.pop("pipe").lstat().st_mode)
                assert sorted(served) == sorted(files), f"listing through {ref}"
                for path, data in files.items():
                    assert served[path].read_bytes() == data, f"{ref}/landing/{path}"
                    assert served[path].stat().st_size == len(data)
            source_mtime = int(os.stat(tmp_path / "src" / "top.txt").st_mtime)
            assert int((mount / "main/landing/top.txt").stat().st_mtime) == source_mtime
            assert (mount / "main/.lakefuse/head").read_text().strip() == summary.commit_id
    finally:
        home.close()

    monkeypatch.setenv("LAKEFUSE_HOME", str(home.path))
    capsysbinary.readouterr()
    assert main(["fs", "cat", "lakefs://repo1/main/landing/d3/sub1/file-0010.dat"]) == 0
    assert capsysbinary.readouterr().out == files["d3/sub1/file-0010.dat"]
    assert main(["fs", "cat", f"lakefs://repo1/{summary.commit_id}/landing/flat/f007"]) == 0
    assert capsysbinary.readouterr().out == bytes([7]) * 7
