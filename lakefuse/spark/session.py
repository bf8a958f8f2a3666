"""Spark sessions and job progress: the one module that starts Spark.

Owns ``require_pyspark`` (the clear error when the optional extra is missing),
``spark_session`` (``local[*]`` unless a master is given; for local masters a loopback-only
driver and Python workers that run the driver's interpreter unless ``PYSPARK_PYTHON`` says
otherwise; on a cluster the workers need lakefuse installed and ``PYSPARK_PYTHON`` /
``spark.pyspark.python`` pointing at that interpreter), and the progress output of jobs: ``Progress`` prints timestamped lines to stderr
and ``StageProgress`` reports running Spark stages (tasks done / total) while a step runs.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

from lakefuse import errors
from lakefuse.errors import ConfigError, LakefuseError

DEFAULT_MASTER = "local[*]"
PYSPARK_MISSING = (
    "the import, export and gc commands run on Spark, but PySpark is not installed: "
    "install the extra with  pip install 'lakefuse[spark]'  (and Java 17+)"
)


def require_pyspark():
    """The ``pyspark`` module, or ``ConfigError`` saying how to install it."""
    try:
        import pyspark
    except ImportError:
        raise ConfigError(PYSPARK_MISSING) from None
    return pyspark


def spark_session(
    master: str | None = None,
    app_name: str = "lakefuse",
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
):
    """A SparkSession on ``master`` (default ``local[*]``), or the active one if there is one.

    Local masters bind the driver to 127.0.0.1, have no web UI and quiet console progress
    (jobs print their own); ``conf`` entries override everything.  ``log_level``: Spark's own
    logging (the CLI passes FATAL: failures are reported once, as lakefuse errors)."""
    require_pyspark()
    from pyspark.sql import SparkSession

    master = master or DEFAULT_MASTER
    builder = SparkSession.builder.master(master).appName(app_name)
    defaults = {"spark.ui.showConsoleProgress": "false"}
    if master.startswith("local"):
        # local workers must run an interpreter that has lakefuse: by default, the driver's
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, and no warning about it
        defaults.update({
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        })
    for key, value in {**defaults, **dict(conf or {})}.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # JVM missing, bad master URL, ...
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot start Spark on master {master!r}: {first}") from None
    session.sparkContext.setLogLevel(log_level)
    return session


def active_session():
    """The active SparkSession or None (None also when PySpark is missing)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession()


class Progress:
    """Progress lines of one job on stderr (or any ``write`` callable), with elapsed time."""

    def __init__(self, job: str, write: Callable[[str], None] | None = None, enabled: bool = True):
        self.job = job
        self.enabled = enabled
        self._write = write or _stderr_line
        self._start = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start

    def __call__(self, message: str) -> None:
        if self.enabled:
            self._write(f"lakefuse {self.job} [{self.elapsed:7.1f}s] {message}")

    @contextmanager
    def step(self, spark, description: str, interval: float = 2.0) -> Iterator[None]:
        """Announce a step, and while it runs report its Spark stages every ``interval`` s.
        Failures of Spark jobs inside the step are raised as ``lakefuse.errors``
        (``spark_failure``)."""
        self(description)
        reporter = None
        if self.enabled and spark is not None:
            reporter = StageProgress(spark.sparkContext, self, interval)
            spark.sparkContext.setJobDescription(f"lakefuse {self.job}: {description}")
            reporter.start()
        try:
            yield
        except LakefuseError:
            raise
        except Exception as exc:
            translated = spark_failure(exc, f"{self.job}: {description}")
            if translated is None:
                raise
            raise translated from None
        finally:
            if reporter is not None:
                reporter.stop()
                spark.sparkContext.setJobDescription(None)


_PYTHON_ERROR_RE = re.compile(r"^lakefuse\.errors\.([A-Za-z]+): (.*)$", re.MULTILINE)


def spark_failure(exc: BaseException, what: str) -> LakefuseError | None:
    """The ``lakefuse.errors`` exception a failed Spark job stands for, or None if ``exc`` is
    not a Spark failure.  An executor that raised a lakefuse error (its Python traceback is in
    the Spark error's text) gives that error class and message; any other failure of a job
    gives a ``LakefuseError`` naming the step and the cause's last line."""
    module = type(exc).__module__ or ""
    if not (module.startswith("py4j") or module.startswith("pyspark")):
        return None
    text = str(exc)
    found = _PYTHON_ERROR_RE.findall(text)
    if found:
        name, message = found[-1]
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, LakefuseError):
            return cls(message.strip())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cause = next((line for line in reversed(lines) if re.match(r"^[A-Za-z_.]+(Error|Exception)\b", line)), None)
    return LakefuseError(f"Spark job failed ({what}): {cause or (lines[0] if lines else type(exc).__name__)}")


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class StageProgress:
    """A daemon thread printing ``stage N: done/total tasks`` of active stages when it changes."""

    def __init__(self, spark_context, progress: Progress, interval: float = 2.0):
        self._tracker = spark_context.statusTracker()
        self._progress = progress
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lakefuse-spark-progress", daemon=True)
        self._last: dict[int, tuple[int, int]] = {}

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=max(5.0, 2 * self._interval))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                for stage_id in self._tracker.getActiveStageIds():
                    info = self._tracker.getStageInfo(stage_id)
                    if info is None:
                        continue
                    state = (info.numCompletedTasks, info.numTasks)
                    if self._last.get(stage_id) != state:
                        self._last[stage_id] = state
                        self._progress(f"  stage {stage_id}: {state[0]}/{state[1]} tasks done")
            except Exception:  # the context may be stopping; progress is best effort
                return
