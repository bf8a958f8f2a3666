"""Write-audit-publish with nothing but the mount: tests/fuse/wap.sh, a bash script of shell
tools and a PySpark local job, against a real kernel mount (no lakefuse command, no database
access in the script).  It branches with mkdir, writes a partitioned dataset with cp and
Spark, commits, is stopped by a rejecting pre-merge webhook on one branch, merges into main
and tags through the control files, reads the release back from the tag's directory; then a
failing run whose merge conflicts (the script exits non-zero on any step that does not behave:
main unchanged) and a reset that leaves the branch as its last commit.  Afterwards this test
checks the outcome through the core, and reads the tag's Parquet back with Spark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lakemount import run_cli

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "actions"))
from actions_helpers import running_hook_server  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from wap_spark_job import expected_sales  # noqa: E402

EVENTS = {"2024-01-01": "id,kind\n1,open\n2,close\n", "2024-01-02": "id,kind\n3,open\n",
          "2024-01-03": "id,kind\n4,open\n5,open\n6,close\n"}


def test_the_write_audit_publish_script_through_the_mount(lake, lake_home, spark, tmp_path, monkeypatch, capsys):
    source = tmp_path / "src"
    source.mkdir()
    for day, text in EVENTS.items():
        (source / f"events-{day}.csv").write_text(text)
    run = f"r{os.getpid()}"
    with running_hook_server() as hooks:
        done = subprocess.run(
            ["bash", str(HERE / "wap.sh")], capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL,
            env=dict(os.environ, LAKE=str(lake.mountpoint), REPO="sales", RUN=run, SRC=str(source),
                     HOOK_URL=hooks.url("/forbidden"), PYTHON=sys.executable, SPARK_JOB=str(HERE / "wap_spark_job.py")))
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{lake.logs()}"
        assert done.stdout.rstrip().endswith(f"== done: release-{run}")
        assert [request.json()["event_type"] for request in hooks.requests] == ["pre-merge"]

    catalog = lake_home.catalog
    release = catalog.get_tag("sales", f"release-{run}")
    merge = catalog.get_commit("sales", release)
    assert merge.message == f"Merge 'etl-{run}' into 'main'"
    assert merge.parents[1] == catalog.get_branch("sales", f"etl-{run}").commit_id
    main_log = [commit.message for commit in catalog.log("sales", "main", 2)]
    assert main_log == ["fix 2024-01-01", f"Merge 'etl-{run}' into 'main'"]  # the bad run never got in
    bad = catalog.get_branch("sales", f"etl-{run}-bad")
    assert catalog.get_commit("sales", bad.commit_id).message == "bad run"
    assert next(iter(catalog.diff_uncommitted("sales", bad.id)), None) is None
    assert run_cli(monkeypatch, capsys, lake_home, "diff", f"lakefs://sales/release-{run}",
                   f"lakefs://sales/etl-{run}") == ""

    tagged = spark.read.parquet(f"file://{lake.mountpoint}/sales/release-{run}/tables/sales")
    rows = sorted(tuple(r) for r in tagged.selectExpr("id", "CAST(day AS STRING)", "store", "amount").collect())
    assert rows == sorted(expected_sales())
