"""``scripts/bench/create_path.py``: the create loop in one process stores what it creates
(through the real core: local storage and SQLite), and the script prints its figures beside
bindfs's."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "bench"))
import create_path  # noqa: E402


def test_the_loop_creates_files_that_the_branch_then_holds(tmp_path):
    path = create_path.CreatePath(tmp_path)
    try:
        figures = path.run("d", 30)
        base = {"lookup+create", "kernel write", "flush+release", "whole loop", "its CPU", "p90", "p99", "over 1 ms %"}
        assert base <= set(figures)
        others = set(figures) - base  # the mount's other threads running at the start (stager, spool reserve)
        assert all(key.endswith(" CPU") and figures[key] >= 0 for key in others)
        figures = path.run("e", 30)  # both threads run by now
        assert {"stager CPU", "spool-reserve CPU"} <= set(figures)
        assert all(figures[k] > 0 for k in ("lookup+create", "kernel write", "flush+release", "whole loop", "its CPU"))
        assert figures["lookup+create"] + figures["flush+release"] <= figures["p90"] * 2
        assert figures["p90"] <= figures["p99"] and 0 <= figures["over 1 ms %"] <= 100
        fs = path.fs
        directory = fs.lookup(path.branch, "d").ino
        attrs = fs.lookup(directory, "f00029")
        assert attrs.size == create_path.FILE_BYTES
        fs.state.stager.flush_all()  # the stager's batches in the database
        assert path.app.catalog.read_object("bench", "main", "d/f00000") == b"x" * create_path.FILE_BYTES
    finally:
        path.close()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("bindfs") is None or not os.path.exists("/dev/fuse"),
                    reason="bindfs's column needs root, bindfs and /dev/fuse")
def test_the_script_prints_lakefuse_beside_bindfs(tmp_path, capsys):
    assert create_path.main(["--files", "20", "--runs", "2", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"median: lookup\+create \d+, kernel write \d+, flush\+release \d+, whole loop \d+", out)
    assert re.search(r"bindfs through the kernel, the whole loop: \d+, \d+; median \d+", out)
    assert re.search(r"lakefuse's own work / bindfs's whole time: \d+\.\d\d", out)
    assert list(tmp_path.iterdir()) == []  # its work directory removed


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        create_path.main(["--files", "0"])
    assert exc.value.code == 2
    assert "--files and --runs must be at least 1" in capsys.readouterr().err
