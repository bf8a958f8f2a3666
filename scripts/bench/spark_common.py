"""Shared setup of the Spark benchmarks (spark_import.py, spark_gc.py, spark_export.py): an
``App`` over SQLite and local storage in a work directory, and a local Spark session."""

from __future__ import annotations

import os
import time
from pathlib import Path


def make_app(workdir: str):
    from lakefuse.app import App
    from lakefuse.config import CacheConfig, Config

    home = Path(workdir) / "home"
    config = Config(
        home=home,
        database_url=f"sqlite:///{home}/lakefuse.db",
        cache=CacheConfig(dir=home / "cache", disk_bytes=4 * 1024**3, ram_bytes=512 * 1024**2),
    )
    return App.from_config(config)


def start_spark(master: str, conf: dict[str, str] | None = None):
    from lakefuse.spark.session import spark_session

    started = time.perf_counter()
    session = spark_session(master, app_name="lakefuse-bench", conf={"spark.sql.shuffle.partitions": "8", **(conf or {})})
    print(f"spark {master} started in {time.perf_counter() - started:.1f} s (not timed below)")
    return session


def add_common_arguments(parser) -> None:
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--workdir", default=None, help="work directory (default: a temporary one, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")


def tree_bytes(root: str) -> int:
    total = 0
    for directory, _dirs, names in os.walk(root):
        for name in names:
            total += os.path.getsize(os.path.join(directory, name))
    return total
