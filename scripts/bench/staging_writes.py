"""Benchmark: staging writes per second on SQLite and PostgreSQL.

Two workloads per database, small ValueRecords (~40-byte identity, ~120-byte value):
- ``set``: one key per call (one transaction each), as a FUSE write-close stages an object;
- ``set_many``: batches of ``--batch-size`` keys per transaction (directory renames, imports).

SQLite runs on a file in a temporary directory (or ``--sqlite-dir``), WAL + synchronous=NORMAL
as lakefuse opens it.  PostgreSQL is ``--pg-url`` if given, else a throwaway durable server
(fsync on) started by ``tests/pgserver.py``; ``--no-pg`` skips it.

    python scripts/bench/staging_writes.py [--singles 3000] [--batch-size 1000] [--batches 20]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lakefuse.db import open_database  # noqa: E402
from lakefuse.db.staging import SqlStagingStore  # noqa: E402
from lakefuse.graveler.model import ValueRecord  # noqa: E402


def record(key: bytes) -> ValueRecord:
    digest = hashlib.sha256(key).digest()
    return ValueRecord(key=key, identity=digest + digest[:8], value=b"\x0a" + digest * 3 + key[-16:])


def bench(url: str, label: str, singles: int, batch_size: int, batches: int) -> list[tuple[str, str, float]]:
    database = open_database(url)
    try:
        staging = SqlStagingStore(database)
        token = f"bench-{time.time_ns()}"
        staging.set(token, b"warm-up", None)

        keys = [f"data/part-{i:07d}.parquet".encode() for i in range(singles)]
        started = time.perf_counter()
        for key in keys:
            staging.set(token, key, record(key))
        single_rate = singles / (time.perf_counter() - started)

        started = time.perf_counter()
        for batch in range(batches):
            items = [
                (key, record(key))
                for key in (f"batch-{batch:04d}/obj-{i:06d}".encode() for i in range(batch_size))
            ]
            staging.set_many(token, items)
        batch_rate = batches * batch_size / (time.perf_counter() - started)

        expected = 1 + singles + batches * batch_size
        count = staging.count(token)
        if count != expected:
            raise SystemExit(f"{label}: staged {count} keys, expected {expected}")
        staging.drop(token)
        return [
            (label, "set (1 key / transaction)", single_rate),
            (label, f"set_many ({batch_size} keys / transaction)", batch_rate),
        ]
    finally:
        database.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--singles", type=int, default=3000, help="keys written one per set() call")
    parser.add_argument("--batch-size", type=int, default=1000, help="keys per set_many() call")
    parser.add_argument("--batches", type=int, default=20, help="number of set_many() calls")
    parser.add_argument("--sqlite-dir", type=Path, help="directory of the SQLite file (default: a temp dir)")
    parser.add_argument("--pg-url", help="PostgreSQL URL (default: start a throwaway server)")
    parser.add_argument("--no-pg", action="store_true", help="SQLite only")
    args = parser.parse_args(argv)

    rows: list[tuple[str, str, float]] = []
    with ExitStack() as stack:
        sqlite_dir = args.sqlite_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lakefuse-bench-")))
        rows += bench(f"sqlite:///{sqlite_dir / 'bench.db'}", "sqlite", args.singles, args.batch_size, args.batches)
        if not args.no_pg:
            if args.pg_url:
                url, label = args.pg_url, "postgresql"
            else:
                from tests.pgserver import postgres_server

                url = stack.enter_context(postgres_server(durable=True))
                label = "postgresql (local, fsync on)"
            rows += bench(url, label, args.singles, args.batch_size, args.batches)

    width = max(len(f"{backend}  {mode}") for backend, mode, _ in rows)
    print(f"{'database  workload':<{width}}  writes/s")
    for backend, mode, rate in rows:
        print(f"{backend + '  ' + mode:<{width}}  {rate:>10,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
