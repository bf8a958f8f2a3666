"""The S3 adapter when the server misbehaves: throttling and 5xx are retried with backoff,
broken-off downloads are resumed, and what can't be recovered is one clear StorageError."""

from __future__ import annotations

import os
import socket
import time

import pytest
from s3server import s3_test_config

from block.faulty_proxy import Fault, FaultyProxy
from lakefuse.block.s3 import S3BlockAdapter
from lakefuse.errors import StorageError

DATA = bytes(range(256)) * 4096  # 1 MiB


@pytest.fixture
def proxy(s3_endpoint):
    with FaultyProxy(s3_endpoint) as proxy:
        yield proxy


@pytest.fixture
def bucket(new_bucket):
    return new_bucket()


def adapter_via(proxy, bucket, max_attempts=4):
    return S3BlockAdapter(bucket, "ns", s3_config=s3_test_config(proxy.url, max_attempts=max_attempts))


def faults_seen(proxy):
    return [fault for _, _, _, fault in proxy.log]


def test_throttling_and_server_errors_are_retried(proxy, bucket):
    adapter = adapter_via(proxy, bucket)
    proxy.script(Fault.error(503, "SlowDown"), Fault.error(500, "InternalError"))
    started = time.monotonic()
    adapter.put("k", b"payload")
    assert faults_seen(proxy) == ["SlowDown", "InternalError", None]
    proxy.script(Fault.error(503, "SlowDown", method="GET"))
    assert adapter.get("k") == b"payload"
    assert faults_seen(proxy)[3:] == ["SlowDown", None]
    assert time.monotonic() - started < 15  # backoff is bounded (jittered, 1 s scale for throttling)


def test_giving_up_is_one_storage_error(proxy, bucket):
    adapter = adapter_via(proxy, bucket, max_attempts=2)
    proxy.script(*[Fault.error(503, "SlowDown")] * 3)
    with pytest.raises(StorageError, match="SlowDown") as caught:
        adapter.put("k", b"payload")
    assert "\n" not in str(caught.value)
    assert faults_seen(proxy) == ["SlowDown", "SlowDown"]  # max_attempts requests, then no more


def test_access_denied_is_not_retried(proxy, bucket):
    adapter = adapter_via(proxy, bucket)
    proxy.script(Fault.error(403, "AccessDenied"))
    with pytest.raises(StorageError, match="AccessDenied"):
        adapter.get("k")
    assert faults_seen(proxy) == ["AccessDenied"]


def test_a_broken_off_body_is_read_again(proxy, bucket):
    adapter = adapter_via(proxy, bucket)
    adapter.put("k", DATA)
    proxy.script(Fault.truncate(1000))
    assert adapter.get("k") == DATA
    proxy.script(Fault.truncate(10))
    assert adapter.get_range("k", 100, 50_000) == DATA[100:50_100]
    assert faults_seen(proxy) == [None, "truncated", None, "truncated", None]


def test_a_broken_off_download_resumes_where_it_stopped(proxy, bucket, tmp_path):
    adapter = adapter_via(proxy, bucket)
    stat = adapter.put("k", DATA)
    proxy.script(Fault.truncate(300_000))
    destination = tmp_path / "out"
    downloaded = adapter.get_to_file("k", str(destination))
    assert destination.read_bytes() == DATA
    assert (downloaded.size, downloaded.etag) == (len(DATA), stat.etag)
    gets = [(range_header, fault) for method, _, range_header, fault in proxy.log if method == "GET"]
    assert gets[0] == (None, "truncated")
    assert gets[1][0] is not None and gets[1][0].startswith("bytes=") and gets[1][0].endswith("-")
    assert int(gets[1][0][len("bytes=") : -1]) > 0  # resumed, not restarted
    assert len(gets) == 2


def test_a_download_that_keeps_breaking_fails_cleanly(proxy, bucket, tmp_path):
    adapter = adapter_via(proxy, bucket)
    adapter.put("k", DATA)
    proxy.script(*[Fault.truncate(1000)] * 10)
    with pytest.raises(StorageError) as caught:
        adapter.get_to_file("k", str(tmp_path / "out"))
    assert "\n" not in str(caught.value)
    assert os.listdir(tmp_path) == []  # no partial file left


def test_nothing_listening_is_a_storage_error(bucket):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    adapter = S3BlockAdapter(bucket, "", s3_config=s3_test_config(f"http://127.0.0.1:{port}", max_attempts=2))
    with pytest.raises(StorageError, match="127.0.0.1") as caught:
        adapter.stat("k")
    assert "\n" not in str(caught.value)
