"""Sessions and progress: executor failures surface as ``lakefuse.errors``, progress lines."""

from __future__ import annotations

import pytest

from lakefuse.errors import InvalidArgument, LakefuseError, StorageError
from lakefuse.spark.session import Progress, spark_failure


def test_executor_errors_become_lakefuse_errors(spark):
    # nested functions: pickled by value (the workers cannot import this test module)
    def _raise_invalid(_item):
        raise InvalidArgument("bad thing on an executor: x/y.txt")

    def _raise_bug(_item):
        return 1 // 0

    progress = Progress("test", enabled=False)
    rdd = spark.sparkContext.parallelize([1, 2], 2)
    with pytest.raises(InvalidArgument, match="^bad thing on an executor: x/y.txt$"):
        with progress.step(spark, "failing"):
            rdd.map(_raise_invalid).collect()
    with pytest.raises(LakefuseError, match=r"Spark job failed \(test: buggy\): ZeroDivisionError"):
        with progress.step(spark, "buggy"):
            rdd.map(_raise_bug).collect()
    assert spark.sparkContext.parallelize([1, 2, 3]).sum() == 6  # the session survives
    assert spark_failure(ValueError("not spark"), "x") is None
    with pytest.raises(StorageError):  # lakefuse errors raised on the driver pass unchanged
        with progress.step(spark, "driver"):
            raise StorageError("driver side")


def test_progress_lines(spark):
    lines = []
    progress = Progress("job", write=lines.append)
    with progress.step(spark, "a step", interval=0.05):
        spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).collect()
    progress("finished")
    assert lines[0].startswith("lakefuse job [") and lines[0].endswith("] a step")
    assert lines[-1].endswith("] finished")
    silent = []
    Progress("job", write=silent.append, enabled=False)("nothing")
    assert silent == []
