"""The ONE local[2] SparkSession of a test session, shared by tests/spark and tests/fuse.

Both conftests import the ``spark`` fixture from here; pytest then holds two session-scoped
fixture definitions, but they hand out the same session (created once, JVM start-up is slow)
and the last one torn down stops it.  Without PySpark or Java the tests that ask for it skip
(the others, unit tests of lakefuse.spark, still run), except under CI=true, where they fail.
Importing this module does not import PySpark.
"""

from __future__ import annotations

import os
import shutil

import pytest

SPARK_TEST_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.worker.reuse": "true",
}

_shared = {"session": None, "users": 0}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def spark_unavailable_reason() -> str | None:
    try:
        import importlib.util

        if importlib.util.find_spec("pyspark") is None:
            return "PySpark (the 'spark' extra) is not installed"
    except (ImportError, ValueError) as exc:
        return f"PySpark cannot be found: {exc}"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        return "Java is not installed (no java on PATH, no $JAVA_HOME/bin/java)"
    return None


def require_spark() -> None:
    """Skip (fail under CI=true) when PySpark or Java is missing."""
    reason = spark_unavailable_reason()
    if reason:
        if in_ci():
            pytest.fail(f"Spark tests cannot run under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def spark():
    require_spark()
    if _shared["session"] is None:
        from lakefuse.spark.session import spark_session

        _shared["session"] = spark_session("local[2]", app_name="lakefuse-tests", conf=SPARK_TEST_CONF)
    _shared["users"] += 1
    try:
        yield _shared["session"]
    finally:
        _shared["users"] -= 1
        if _shared["users"] == 0:
            session, _shared["session"] = _shared["session"], None
            session.stop()
