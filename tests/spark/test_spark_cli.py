"""The ``import``, ``export`` and ``gc`` commands through ``lakefuse.cli.main``, and what
happens without PySpark."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lakefuse.app import App
from lakefuse.cli.main import main
from lakefuse.config import load_config
from spark_trees import make_tree


@pytest.fixture
def cli_app(lakefuse_home, tmp_path):
    """An App on the configuration the CLI will load (the suite's per-test LAKEFUSE_HOME)."""
    application = App.from_config(load_config())
    application.catalog.create_repository("repo1", f"local://{tmp_path}/storage/repo1")
    yield application
    application.close()


def test_import_export_gc_commands(spark, cli_app, tmp_path, capsys):
    files = make_tree(tmp_path / "src", {"a.txt": b"alpha", "dir/b.txt": b"beta"})
    assert main(["import", "lakefs://repo1/main/landing", "--from", str(tmp_path / "src"), "-m", "cli import"]) == 0
    out, err = capsys.readouterr()
    assert "imported 2 objects" in out and "lakefuse import [" in err  # summary on stdout, progress on stderr
    head = cli_app.catalog.resolve("repo1", "main").commit
    assert head.message == "cli import"
    assert cli_app.catalog.read_object("repo1", "main", "landing/dir/b.txt") == b"beta"

    assert main(["export", "lakefs://repo1/main", "--to", str(tmp_path / "out"), "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert "exported 2 objects" in out and err == ""
    for path, data in files.items():
        assert (tmp_path / "out" / "landing" / path).read_bytes() == data
    assert (tmp_path / "out" / "_SUCCESS").exists()

    garbage = cli_app.catalog.upload_bytes("repo1", "main", "tmp.txt", b"x").physical_address
    cli_app.catalog.delete_object("repo1", "main", "tmp.txt")
    assert main(["gc", "lakefs://repo1", "--dry-run", "--min-age", "0", "--quiet"]) == 0
    out, _err = capsys.readouterr()
    assert f"{garbage}\t1\n" in out and "would be deleted (dry run)" in out
    assert main(["gc", "lakefs://repo1", "--quiet"]) == 0  # default min age: too young to go
    out, _err = capsys.readouterr()
    assert "deleted 0 objects" in out and "1 unreferenced but too young" in out
    assert main(["gc", "lakefs://repo1", "--min-age", "0", "--quiet"]) == 0
    out, _err = capsys.readouterr()
    assert "deleted 1 objects" in out
    assert not (tmp_path / "storage" / "repo1" / garbage).exists()


def test_command_errors(spark, cli_app, tmp_path, capsys):
    assert main(["import", "lakefs://nope/main", "--from", str(tmp_path), "--quiet"]) == 3
    assert "nope" in capsys.readouterr().err
    assert main(["import", "lakefs://repo1/main", "--from", str(tmp_path / "missing"), "--quiet"]) == 3
    assert main(["import", "lakefs://repo1/main/x", "--prefix", "y", "--from", str(tmp_path)]) == 2
    assert main(["export", "lakefs://repo1/main/path", "--to", str(tmp_path / "o")]) == 2
    assert main(["gc", "lakefs://repo1/main"]) == 2
    assert main(["gc", "lakefs://repo1", "--conf", "novalue"]) == 2
    err = capsys.readouterr().err
    assert "--conf expects KEY=VALUE" in err


def test_missing_pyspark_is_a_clear_error(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "pyspark", None)  # "import pyspark" now raises ImportError
    assert main(["gc", "lakefs://repo1", "--dry-run"]) == 2
    assert "pip install 'lakefuse[spark]'" in capsys.readouterr().err


def test_lakefuse_imports_without_pyspark():
    code = (
        "import sys; import lakefuse.spark, lakefuse.spark.cli, lakefuse.cli.main; "
        "assert not any(m == 'pyspark' or m.startswith('pyspark.') for m in sys.modules), 'pyspark imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert result.returncode == 0, result.stderr
