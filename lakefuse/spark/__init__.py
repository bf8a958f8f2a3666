"""Bulk data jobs on Spark (PySpark, the optional ``spark`` extra): import, export and garbage
collection.  The only package that imports pyspark - and only when a job runs: importing
``lakefuse.spark`` (or registering its CLI commands) works without PySpark installed.

- ``importer.import_objects``: a local tree / S3 prefix into a branch as one commit, no copy
- ``exporter.export_commit``: every object of a commit to a local directory / S3 prefix
- ``gc.collect_garbage``: unreferenced data objects of a storage namespace, listed or deleted
- ``cli.add_spark_commands``: the ``import``, ``export`` and ``gc`` subcommands
- ``session.spark_session``: a session (``local[*]`` by default), ``require_pyspark``

Executors never receive adapters or database handles: tasks carry URIs and ``JobSettings``
(``settings``) and rebuild what they need (``executor``).  Supporting modules: ``sources``
(listing import sources), ``ranges`` (ranges written by partitions, metarange assembly),
``locations`` (URIs, namespace ownership guard).
"""

from lakefuse.spark.cli import add_spark_commands
from lakefuse.spark.exporter import ExportSummary, export_commit
from lakefuse.spark.gc import GCSummary, collect_garbage
from lakefuse.spark.importer import ImportSummary, import_objects
from lakefuse.spark.session import require_pyspark, spark_session
from lakefuse.spark.settings import JobSettings, settings_from_config

__all__ = [
    "ExportSummary",
    "GCSummary",
    "ImportSummary",
    "JobSettings",
    "add_spark_commands",
    "collect_garbage",
    "export_commit",
    "import_objects",
    "require_pyspark",
    "settings_from_config",
    "spark_session",
]
