"""What Spark executors need to reach storage, as plain picklable values.

Owns ``JobSettings``: the S3 configuration, the range-splitting configuration and the optional
local cache directory of Graveler files.  Executors rebuild block adapters, Graveler file
access and disk caches from these (``lakefuse.spark.executor``); nothing with an open socket,
file or database connection is ever shipped to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lakefuse.config import CommittedConfig, S3Config

#: default byte bound of an executor's disk cache of Graveler files (when a cache dir is set)
DEFAULT_EXECUTOR_CACHE_BYTES = 2 * 1024**3


@dataclass(frozen=True)
class JobSettings:
    """Picklable settings shared by the driver and the executors of a job.

    ``cache_dir``: a local directory executors may use as a disk cache of Graveler files
    (ranges, metaranges) - the same layout as the application's cache, so on one machine the
    jobs and the mount warm each other.  ``None``: executors read files straight from storage.
    """

    s3: S3Config = field(default_factory=S3Config)
    committed: CommittedConfig = field(default_factory=CommittedConfig)
    cache_dir: str | None = None
    cache_bytes: int = DEFAULT_EXECUTOR_CACHE_BYTES


def settings_from_config(config) -> JobSettings:
    """The job settings of a ``lakefuse.config.Config`` (the application's configuration):
    its S3 and committed sections, and ``<cache.dir>/graveler`` as the executors' cache."""
    cache = getattr(config, "cache", None)
    cache_dir = None
    cache_bytes = DEFAULT_EXECUTOR_CACHE_BYTES
    if cache is not None and getattr(cache, "dir", None):
        cache_dir = str(cache.dir) + "/graveler"
        cache_bytes = int(getattr(cache, "disk_bytes", cache_bytes) or cache_bytes)
    return JobSettings(
        s3=getattr(config, "s3", None) or S3Config(),
        committed=getattr(config, "committed", None) or CommittedConfig(),
        cache_dir=cache_dir,
        cache_bytes=cache_bytes,
    )
