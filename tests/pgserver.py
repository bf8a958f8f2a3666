"""A throwaway PostgreSQL server on loopback for tests and benchmarks.

``postgres_server()`` is a context manager yielding a SQLAlchemy URL
(``postgresql+psycopg://postgres@127.0.0.1:PORT/lakefuse``, trust auth):

- if ``LAKEFUSE_TEST_PG_URL`` is set, that URL is yielded as is (no server is started; the
  tests empty the lakefuse tables of that database, so point it at a disposable one);
- else the PostgreSQL binaries (``pg_ctl`` on PATH, else the newest Debian
  ``/usr/lib/postgresql/*/bin``) initdb a cluster in a temporary directory, start it on a free
  port of 127.0.0.1 with its socket in that directory, create the database, and stop and
  remove everything on exit.  Running as root, the server runs as the ``postgres`` OS user.

``PostgresUnavailable`` is raised when there are no binaries (or no ``postgres`` user as root).
``postgres_url_for_tests()`` turns that into a pytest skip - or a failure when ``CI=true``,
so CI can never silently skip the PostgreSQL half of a suite.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ENV_URL = "LAKEFUSE_TEST_PG_URL"
DATABASE = "lakefuse"
START_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server can be started here."""


def find_postgres_bin() -> Path | None:
    """The directory holding initdb and pg_ctl, or None."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: [int(part) if part.isdigit() else 0 for part in Path(p).parent.parent.name.split(".")],
    )
    for candidate in reversed(candidates):
        bin_dir = Path(candidate).parent
        if (bin_dir / "initdb").exists():
            return bin_dir
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Cluster:
    """One initdb'ed cluster in a temp directory, run as the right OS user."""

    def __init__(self, bin_dir: Path, durable: bool):
        self.bin_dir = bin_dir
        self.durable = durable
        self.as_root = os.geteuid() == 0
        if self.as_root:
            try:
                import pwd

                entry = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root and there is no 'postgres' OS user to run the server") from None
            if not shutil.which("runuser"):
                raise PostgresUnavailable("running as root and 'runuser' is missing (needed to run as 'postgres')")
            self.uid, self.gid = entry.pw_uid, entry.pw_gid
        self.root = Path(tempfile.mkdtemp(prefix="lakefuse-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        if self.as_root:
            os.chown(self.root, self.uid, self.gid)

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(
            command,
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def _check(self, result: subprocess.CompletedProcess, what: str) -> None:
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{what} failed ({result.returncode}): {result.stderr.strip()}\n{log}")

    def init(self) -> None:
        self._check(
            self.run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "-N"),
            "initdb",
        )

    def start(self) -> None:
        options = [
            "-c listen_addresses=127.0.0.1",
            f"-k {self.root}",
            "-c shared_buffers=32MB",
            "-c max_connections=60",
        ]
        if not self.durable:  # throwaway test data: skip fsyncs
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        last_error: Exception | None = None
        for _attempt in range(3):  # a free port can be taken between probing and binding
            self.port = _free_port()
            result = self.run(
                "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", str(START_TIMEOUT_S),
                "-o", " ".join([*options, f"-p {self.port}"]), "start",
                timeout=START_TIMEOUT_S + 10,
            )
            try:
                self._check(result, "pg_ctl start")
                return
            except RuntimeError as exc:
                last_error = exc
        raise RuntimeError(f"could not start PostgreSQL: {last_error}")

    def stop(self) -> None:
        if self.data.exists() and (self.data / "postmaster.pid").exists():
            try:
                self.run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", str(STOP_TIMEOUT_S), "stop",
                         timeout=STOP_TIMEOUT_S + 10)
            except subprocess.TimeoutExpired:
                pass
            self._kill_leftover()
        shutil.rmtree(self.root, ignore_errors=True)

    def _kill_leftover(self) -> None:
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return
        try:
            pid = int(pid_file.read_text().splitlines()[0])
            os.kill(pid, signal.SIGQUIT)  # immediate shutdown of the postmaster we started
        except (OSError, ValueError, IndexError):
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except OSError:
                return
            time.sleep(0.1)


def _wait_and_create_database(admin_url: str, database: str) -> None:
    import psycopg

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with psycopg.connect(admin_url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f'CREATE DATABASE "{database}"')
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def postgres_server(database: str = DATABASE, *, durable: bool = False) -> Iterator[str]:
    """Yield the SQLAlchemy URL of a running PostgreSQL database (see the module docstring).

    ``durable=False`` (tests) runs with fsync off; benchmarks pass ``durable=True``.
    """
    env_url = os.environ.get(ENV_URL)
    if env_url:
        yield env_url
        return
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        raise PostgresUnavailable(
            "PostgreSQL binaries not found (no pg_ctl on PATH, no /usr/lib/postgresql/*/bin); "
            f"install the 'postgresql' package or set {ENV_URL}"
        )
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise PostgresUnavailable("psycopg is not installed (pip install 'psycopg[binary]')") from None
    cluster = _Cluster(bin_dir, durable)
    try:
        cluster.init()
        cluster.start()
        _wait_and_create_database(f"postgresql://postgres@127.0.0.1:{cluster.port}/postgres", database)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{cluster.port}/{database}"
    finally:
        cluster.stop()


@contextmanager
def postgres_url_for_tests() -> Iterator[str]:
    """``postgres_server()`` for pytest fixtures: skip when unavailable, fail instead if CI=true."""
    import pytest

    try:
        with postgres_server() as url:
            yield url
    except PostgresUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required on CI (CI=true): {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL unavailable: {exc}")
