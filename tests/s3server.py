"""A real S3-compatible HTTP server for tests: moto's standalone server on 127.0.0.1.

Usage (any test package; tests/ is on sys.path)::

    from s3server import create_bucket, s3_server, s3_test_config

    @pytest.fixture(scope="session")
    def s3_endpoint():
        with s3_server() as endpoint_url:      # "http://127.0.0.1:<port>"
            yield endpoint_url

    config = s3_test_config(endpoint_url)       # S3Config with fake keys, us-east-1
    create_bucket(endpoint_url, "my-bucket")

The server runs in a child process (``ThreadedMotoServer`` on a port the OS picks), so it
doesn't compete with the tests for the GIL and memory measurements see only the client.  The
child exits when its stdin closes: when the context ends, or if the test process dies.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Iterator

FAKE_ACCESS_KEY_ID = "lakefuse-test-key"
FAKE_SECRET_ACCESS_KEY = "lakefuse-test-secret"
REGION = "us-east-1"
STARTUP_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 10.0


@contextmanager
def s3_server(startup_timeout: float = STARTUP_TIMEOUT_SECONDS) -> Iterator[str]:
    """Start moto's S3 server on loopback; yield its endpoint URL; stop it."""
    with tempfile.TemporaryFile() as server_log:
        process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=server_log,
        )
        try:
            port = _read_port(process, startup_timeout, server_log)
            yield f"http://127.0.0.1:{port}"
        finally:
            _stop(process)


def s3_test_config(endpoint_url: str, max_attempts: int = 3):
    """An ``S3Config`` for the test server: fake static keys, region us-east-1."""
    from lakefuse.config import S3Config

    return S3Config(
        endpoint_url=endpoint_url,
        region=REGION,
        access_key_id=FAKE_ACCESS_KEY_ID,
        secret_access_key=FAKE_SECRET_ACCESS_KEY,
        max_attempts=max_attempts,
    )


def create_bucket(endpoint_url: str, bucket: str) -> None:
    import boto3

    client = boto3.session.Session(
        aws_access_key_id=FAKE_ACCESS_KEY_ID, aws_secret_access_key=FAKE_SECRET_ACCESS_KEY, region_name=REGION
    ).client("s3", endpoint_url=endpoint_url)
    try:
        client.create_bucket(Bucket=bucket)
    finally:
        client.close()


def _read_port(process: subprocess.Popen, timeout: float, server_log) -> int:
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or process.poll() is not None:
            server_log.seek(0)
            log = server_log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"moto S3 server did not start within {timeout:.0f} s (exit code {process.poll()}):\n{log}")
        ready, _, _ = select.select([process.stdout], [], [], min(remaining, 0.5))
        if ready:
            byte = os.read(process.stdout.fileno(), 1)
            if not byte:
                continue  # EOF: poll() will tell on the next turn
            line += byte
    return int(line.decode().strip())


def _stop(process: subprocess.Popen) -> None:
    try:
        process.stdin.close()
    except OSError:
        pass
    try:
        process.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_SECONDS)
    process.stdout.close()


def _serve() -> None:
    """Child process: run the server until stdin closes."""
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    print(server.get_host_and_port()[1], flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
    else:
        sys.exit("usage: s3server.py --serve  (tests use the s3_server() context manager)")
