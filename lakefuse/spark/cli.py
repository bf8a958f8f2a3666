"""The ``import``, ``export`` and ``gc`` subcommands, for the lakefuse CLI to register.

``add_spark_commands(subparsers, app_factory)`` adds the three parsers to an argparse
subparsers object.  Each sets ``func``: ``args.func(args) -> int`` runs the job and returns the
exit code; errors are raised as ``lakefuse.errors`` exceptions for the CLI to report (a missing
PySpark is a ``ConfigError`` saying how to install it).  ``app_factory()`` is called once per
command (after the arguments were checked) and must return an ``App``-like object
(``graveler``, ``catalog``, ``config``).

Progress goes to stderr; the summary (and, for ``gc --dry-run``, one ``key<TAB>size`` line per
object that would be deleted) to stdout.  Importing this module does not import PySpark.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from lakefuse.errors import InvalidArgument
from lakefuse.uri import parse_uri


def add_spark_commands(subparsers, app_factory: Callable[[], object]) -> None:
    """Register ``import``, ``export`` and ``gc`` on ``subparsers``."""
    from lakefuse.spark.gc import DEFAULT_MIN_AGE_SECONDS, DEFAULT_RETENTION_DAYS

    def spark_options(parser) -> None:
        group = parser.add_argument_group("Spark")
        group.add_argument("--master", default=None, help="Spark master URL (default: local[*])")
        group.add_argument(
            "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration (repeatable)"
        )
        group.add_argument("--quiet", action="store_true", help="no progress lines on stderr")

    parser = subparsers.add_parser(
        "import",
        help="import a local directory or S3 prefix into a branch, without copying data (Spark)",
        description="Ingest an existing local directory tree or S3 prefix into a branch as one commit; "
        "the entries point at the existing objects.",
    )
    parser.add_argument("target", metavar="lakefs://REPO/BRANCH[/PREFIX]")
    parser.add_argument("--from", dest="source", required=True, metavar="URI", help="a local directory or s3://bucket/prefix")
    parser.add_argument("--prefix", default=None, help="key prefix of the imported objects (replaces that prefix)")
    parser.add_argument("--message", "-m", default=None, help="commit message")
    parser.add_argument("--records-per-partition", type=int, default=None, help=argparse.SUPPRESS)
    spark_options(parser)
    parser.set_defaults(func=lambda args: run_import(args, app_factory))

    parser = subparsers.add_parser(
        "export",
        help="copy every object of a commit to a local directory or S3 prefix (Spark)",
        description="Copy every object of a commit to a plain local directory or S3 prefix, in parallel, "
        "with a _SUCCESS marker last; re-running resumes.",
    )
    parser.add_argument("source", metavar="lakefs://REPO/REF")
    parser.add_argument("--to", dest="destination", required=True, metavar="URI", help="a local directory or s3://bucket/prefix")
    spark_options(parser)
    parser.set_defaults(func=lambda args: run_export(args, app_factory))

    parser = subparsers.add_parser(
        "gc",
        help="delete data objects no retained commit, branch, tag or staging area references (Spark)",
        description="Find the objects of a repository's storage namespace that nothing within retention "
        "references; list them (--dry-run) or delete them.",
    )
    parser.add_argument("repository", metavar="lakefs://REPO")
    parser.add_argument(
        "--retention-days",
        type=float,
        default=DEFAULT_RETENTION_DAYS,
        metavar="N",
        help=f"keep commits reachable from a branch created in the last N days (default {DEFAULT_RETENTION_DAYS})",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    parser.add_argument(
        "--min-age",
        type=float,
        default=DEFAULT_MIN_AGE_SECONDS,
        metavar="SECONDS",
        help=f"never delete objects younger than this (default {DEFAULT_MIN_AGE_SECONDS}; 0 collects everything unreferenced)",
    )
    spark_options(parser)
    parser.set_defaults(func=lambda args: run_gc(args, app_factory))


def _conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"--conf expects KEY=VALUE, got {pair!r}")
        conf[key.strip()] = value
    return conf


class _Spark:
    """The Spark session of one command: the active one if any, else a new one stopped at the end."""

    def __init__(self, args):
        from lakefuse.spark.session import active_session, require_pyspark, spark_session

        require_pyspark()
        conf = _conf(args.conf)
        self.session = active_session()
        self.owned = self.session is None
        if self.owned:
            log_level = "WARN" if os.environ.get("LAKEFUSE_DEBUG") == "1" else "FATAL"
            self.session = spark_session(
                args.master, app_name=f"lakefuse {args.command_name}", conf=conf, log_level=log_level
            )

    def __enter__(self):
        return self.session

    def __exit__(self, *exc_info) -> None:
        if self.owned:
            self.session.stop()


def _progress(args, job: str):
    from lakefuse.spark.session import Progress

    return Progress(job, enabled=not args.quiet)


def _print(lines) -> None:
    for line in lines:
        print(line, flush=True)


def run_import(args, app_factory) -> int:
    from lakefuse.spark.importer import DEFAULT_RECORDS_PER_PARTITION, import_objects
    from lakefuse.spark.session import require_pyspark

    require_pyspark()
    target = parse_uri(args.target).require_ref()
    if target.path and args.prefix:
        raise InvalidArgument("give the import prefix either in the lakefs:// URI or with --prefix, not both")
    prefix = target.path or args.prefix or ""
    args.command_name = "import"
    app = app_factory()
    with _Spark(args) as spark:
        summary = import_objects(
            spark,
            app,
            target.repository,
            target.ref,
            args.source,
            prefix=prefix,
            message=args.message,
            records_per_partition=args.records_per_partition or DEFAULT_RECORDS_PER_PARTITION,
            progress=_progress(args, "import"),
        )
    _print(summary.lines())
    return 0


def run_export(args, app_factory) -> int:
    from lakefuse.spark.exporter import export_commit
    from lakefuse.spark.session import require_pyspark

    require_pyspark()
    source = parse_uri(args.source).require_ref()
    if source.path:
        raise InvalidArgument(f"{args.source}: export copies a whole commit; give lakefs://REPO/REF without a path")
    args.command_name = "export"
    app = app_factory()
    with _Spark(args) as spark:
        summary = export_commit(spark, app, source.repository, source.ref, args.destination, progress=_progress(args, "export"))
    _print(summary.lines())
    return 0


def run_gc(args, app_factory) -> int:
    from lakefuse.spark.gc import collect_garbage
    from lakefuse.spark.session import require_pyspark

    require_pyspark()
    repository = parse_uri(args.repository).require_repository_only()
    args.command_name = "gc"
    app = app_factory()

    def show(key: str, size: int) -> None:
        sys.stdout.write(f"{key}\t{size}\n")

    with _Spark(args) as spark:
        summary = collect_garbage(
            spark,
            app,
            repository.repository,
            retention_days=args.retention_days,
            min_age_seconds=args.min_age,
            dry_run=args.dry_run,
            on_object=show if args.dry_run else None,
            progress=_progress(args, "gc"),
        )
    sys.stdout.flush()
    _print(summary.lines())
    return 0
