"""Spark local mode writing Parquet through a real kernel mount, with Spark's default
FileOutputCommitter (task/job directories renamed out of ``_temporary``, ``_SUCCESS``, Hadoop's
``.crc`` side files and permission calls), committed through ``.lakefuse/commit`` and read back
through the commit's directory and through a tag made with the CLI.

What lakefuse guarantees for a failed job: a commit holds exactly what the branch has staged when
it is made, and a file created and removed again before a commit leaves no object behind.  A
failed Spark append writes only under ``<path>/_temporary``, which the committer's abort removes,
so no data file of the failed job is staged and no commit can hold partial output (asserted by
``test_a_failed_job_commits_no_partial_output``).  That the branch has no uncommitted change at
all under the path afterwards (``.lakefuse/commit`` then fails with ENODATA) is the stronger
promise, also asserted, together with the committer's clean-up of ``_temporary`` (rmdir of
emptied directories removes their markers) and overwrite jobs.
"""

from __future__ import annotations

import errno
import os
import shutil
import time

import pytest

from lakemount import run_cli

DAYS = ("2024-01-01", "2024-01-02", "2024-01-03")
FAIL_ID = 7  # the row the failing job's UDF raises on

def rows(first_id: int, count: int, tag: str) -> list[tuple[int, str, str, float]]:
    return [(i, DAYS[i % len(DAYS)], f"{tag}-{i}", i * 1.5) for i in range(first_id, first_id + count)]


def events_frame(spark, data):
    return spark.createDataFrame(data, "id INT, day STRING, name STRING, value DOUBLE").repartition(2)


def write_events(spark, directory, data, mode: str = "errorifexists") -> None:
    events_frame(spark, data).write.mode(mode).partitionBy("day").parquet(f"file://{directory}")


def read_sorted(spark, directory) -> list[tuple]:
    df = spark.read.parquet(f"file://{directory}")  # the partition column reads back as a date
    return sorted(tuple(r) for r in df.selectExpr("id", "CAST(day AS STRING)", "name", "value").collect())


def count_of(spark, directory) -> int:
    return spark.read.parquet(f"file://{directory}").count()


def commit_through_control_file(branch_dir, message: str) -> str:
    with open(branch_dir / ".lakefuse/commit", "w") as control:
        control.write(message)
    commit_id = (branch_dir / ".lakefuse/commit").read_text().strip()
    assert len(commit_id) == 64, commit_id
    return commit_id


def status_lines(branch_dir, prefix: str) -> list[str]:
    text = (branch_dir / ".lakefuse/status").read_text()
    return [line for line in text.splitlines() if line.split(" ", 1)[1].startswith(prefix)]


def wait_for_cancelled_tasks(spark, timeout: float = 60.0) -> None:
    """Until Spark runs no stage: the tasks of a failed job go on for a while after it failed."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + timeout
    while tracker.getActiveStageIds() and time.monotonic() < deadline:
        time.sleep(0.1)


def remove_left_directories(path, timeout: float = 30.0) -> None:
    """``rm -r`` of what a failed job left, again while a task it cancelled and that Spark no
    longer reports still makes (and removes) its directories in there (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            shutil.rmtree(path)
            return
        except OSError as exc:  # a directory made, or removed, by that task meanwhile
            if not os.path.lexists(path):
                return
            if exc.errno not in (errno.ENOTEMPTY, errno.ENOENT):
                raise
            if time.monotonic() > deadline:
                left = sorted(os.path.join(d, n) for d, ds, fs in os.walk(path) for n in ds + fs)
                branch = path.parents[2]
                raise AssertionError(f"{exc} for {timeout:.0f} s; listed under it: {left}; "
                                     f"status: {status_lines(branch, '')}") from exc
            time.sleep(0.2)


def objects_in(lines: list[str]) -> list[str]:
    """Status/diff lines naming objects, not directory markers (``key/``)."""
    return [line for line in lines if not line.endswith("/")]


def data_files(directory) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), directory)
            for root, _dirs, names in os.walk(directory) for name in names if name.endswith(".parquet")}


def test_partitioned_write_commit_and_read_back_by_commit_and_tag(spark, branch, lake, lake_home,
                                                                   monkeypatch, capsys):
    events = branch / "tables/events"
    first = rows(0, 60, "first")
    write_events(spark, events, first)

    names = set(os.listdir(events))
    assert {f"day={d}" for d in DAYS} | {"_SUCCESS"} <= names
    parts = data_files(events)
    assert {p.split("/")[0] for p in parts} == {f"day={d}" for d in DAYS}
    assert all(p.split("/")[1].startswith("part-") for p in parts)
    staged = status_lines(branch, "tables/events/")
    assert {f"+ tables/events/{p}" for p in parts} | {"+ tables/events/_SUCCESS"} <= set(staged)
    assert all(line.startswith("+ ") for line in staged)
    assert not objects_in([line for line in staged if "/_temporary/" in line])  # every part file moved out

    commit = commit_through_control_file(branch, "events, first load")
    assert status_lines(branch, "tables/") == []
    by_commit = lake / "sales" / commit / "tables/events"
    assert data_files(by_commit) == parts
    assert count_of(spark, by_commit) == len(first)
    assert read_sorted(spark, by_commit) == sorted(first)

    tag = f"events-{branch.name}"
    out = run_cli(monkeypatch, capsys, lake_home, "tag", "create", f"lakefs://sales/{tag}", f"lakefs://sales/{commit}")
    assert commit in out
    by_tag = lake / "sales" / tag / "tables/events"
    assert count_of(spark, by_tag) == len(first)
    assert read_sorted(spark, by_tag) == sorted(first)
    assert read_sorted(spark, events) == sorted(first)  # the branch itself


def test_rmdir_of_an_empty_directory_removes_its_marker(branch):
    """With plain syscalls: the kernel's LOOKUP before mkdir is the first cache miss in the
    branch root, rmdir's stat the second (answered from a directory prefetch)."""
    os.mkdir(branch / "t")
    os.rmdir(branch / "t")
    assert status_lines(branch, "t/") == []


def test_the_committer_leaves_no_temporary_directory(spark, branch):
    events = branch / "tables/events"
    write_events(spark, events, rows(0, 30, "x"))
    assert "_temporary" not in os.listdir(events)
    assert [line for line in status_lines(branch, "tables/events/") if "_temporary" in line] == []


def test_an_overwrite_job_then_commit_shows_only_the_new_rows(spark, branch, lake):
    events = branch / "tables/events"
    first = rows(0, 30, "first")
    write_events(spark, events, first)
    commit1 = commit_through_control_file(branch, "first load")
    second = rows(1000, 25, "second")
    write_events(spark, events, second, mode="overwrite")
    commit2 = commit_through_control_file(branch, "overwritten")
    assert count_of(spark, lake / "sales" / commit2 / "tables/events") == len(second)
    assert read_sorted(spark, lake / "sales" / commit2 / "tables/events") == sorted(second)
    assert read_sorted(spark, lake / "sales" / commit1 / "tables/events") == sorted(first)


def _fail_a_write_job(spark, events) -> None:
    from pyspark.sql import functions as F

    def fail_on_one_row(row_id):  # nested: pickled by value (workers cannot import this module)
        if row_id == FAIL_ID:
            raise ValueError("deliberate failure inside a write task")
        return row_id

    boom = F.udf(fail_on_one_row, "int", useArrow=False)
    # both tasks write files (the other rows of the failing task, the other task's rows) first
    doomed = events_frame(spark, rows(0, 40, "doomed")).withColumn("id", boom("id"))
    with pytest.raises(Exception, match="deliberate failure inside a write task"):
        doomed.write.mode("append").partitionBy("day").parquet(f"file://{events}")


def test_a_failed_job_commits_no_partial_output(spark, branch, lake, lake_home, monkeypatch, capsys):
    events = branch / "tables/events"
    base = rows(0, 30, "base")
    write_events(spark, events, base)
    base_commit = commit_through_control_file(branch, "base")
    base_parts = data_files(events)

    _fail_a_write_job(spark, events)

    assert data_files(events) == base_parts
    assert objects_in(status_lines(branch, "tables/")) == []  # at most directory markers
    diff = run_cli(monkeypatch, capsys, lake_home, "diff", f"lakefs://sales/{branch.name}/tables/").splitlines()
    assert objects_in(diff) == []
    assert read_sorted(spark, events) == sorted(base)

    (branch / "notes.txt").write_text("a commit after the failed job\n")
    after = commit_through_control_file(branch, "after the failed job")
    changed = run_cli(monkeypatch, capsys, lake_home, "diff", f"lakefs://sales/{base_commit}",
                  f"lakefs://sales/{after}").splitlines()
    assert objects_in(changed) == ["+ notes.txt"]
    assert read_sorted(spark, lake / "sales" / after / "tables/events") == sorted(base)


def test_a_failed_job_leaves_no_uncommitted_change_under_its_path(spark, branch, lake_home, monkeypatch, capsys):
    events = branch / "tables/events"
    write_events(spark, events, rows(0, 30, "base"))
    base_commit = commit_through_control_file(branch, "base")

    _fail_a_write_job(spark, events)
    wait_for_cancelled_tasks(spark)

    diff = run_cli(monkeypatch, capsys, lake_home, "diff", f"lakefs://sales/{branch.name}/tables/").splitlines()
    # Spark's abort does not wait for the tasks it cancels: one still running may make its
    # attempt directory, and so its parents, again after the job deleted _temporary/, then
    # delete only the attempt directory, which leaves empty directories behind on a local disk
    # too.  Those are all a failed job may leave; removed, nothing is left to commit.
    assert objects_in(diff) == [] and objects_in(status_lines(branch, "tables/")) == []
    assert all(line.startswith("+ tables/events/_temporary/") for line in diff), diff
    if diff:
        remove_left_directories(events / "_temporary")
    assert status_lines(branch, "tables/") == []
    with pytest.raises(OSError) as exc:
        with open(branch / ".lakefuse/commit", "w") as control:
            control.write("after the failed job")
    assert exc.value.errno == errno.ENODATA
    assert (branch / ".lakefuse/head").read_text().strip() == base_commit
