"""The Spark job of the write-audit-publish script (tests/fuse/wap.sh): ``python
wap_spark_job.py DIR`` writes ``SALES_ROWS`` rows of sales as Parquet partitioned by day into
DIR with a local[2] session and Spark's default FileOutputCommitter, as a job that sees only
the mount would.  ``expected_sales()`` is what it writes, for the test to read back."""

from __future__ import annotations

import sys

SALES_ROWS = 120
DAYS = ("2024-01-01", "2024-01-02", "2024-01-03")
SCHEMA = "id INT, day STRING, store STRING, amount DOUBLE"


def expected_sales() -> list[tuple[int, str, str, float]]:
    return [(i, DAYS[i % len(DAYS)], f"store-{i % 5}", i * 2.5) for i in range(SALES_ROWS)]


def main(directory: str) -> None:
    from lakefuse.spark.session import spark_session

    spark = spark_session("local[2]", app_name="wap-job", conf={"spark.sql.shuffle.partitions": "2"})
    try:
        frame = spark.createDataFrame(expected_sales(), SCHEMA).repartition(2)
        frame.write.mode("errorifexists").partitionBy("day").parquet(f"file://{directory}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
