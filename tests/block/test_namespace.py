"""Storage namespace URIs: parsing, normalization, and the adapter factory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lakefuse.block import normalize_namespace, open_namespace, parse_namespace
from lakefuse.block.local import LocalBlockAdapter
from lakefuse.errors import InvalidArgument


@pytest.mark.parametrize(
    "uri,expected",
    [
        ("local:///data/repo", ("local", "/data/repo")),
        ("local:///data/repo/", ("local", "/data/repo")),
        ("local:////data//x/./y/", ("local", "/data/x/y")),
        ("LOCAL:///data", ("local", "/data")),
        ("/data/repo", ("local", "/data/repo")),
        ("s3://bucket", ("s3", "bucket")),
        ("s3://bucket/", ("s3", "bucket")),
        ("s3://my.bucket-1/some/prefix/", ("s3", "my.bucket-1/some/prefix")),
        ("S3://bucket/p", ("s3", "bucket/p")),
    ],
)
def test_parse(uri, expected):
    assert parse_namespace(uri) == expected


def test_a_relative_plain_path_becomes_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse_namespace("repos/one") == ("local", str(tmp_path / "repos" / "one"))
    assert normalize_namespace("repos/one/") == "local://" + str(tmp_path / "repos" / "one")


@pytest.mark.parametrize(
    "uri,message",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("gs://bucket/x", "unknown storage namespace scheme 'gs'"),
        ("file:///tmp/x", "unknown storage namespace scheme 'file'"),
        ("local://relative/path", "three slashes"),
        ("local:/data", "malformed"),
        ("s3:bucket", "malformed"),
        ("s3://", "missing bucket"),
        ("s3:///prefix", "missing bucket"),
        ("s3://ab", "invalid bucket name"),
        ("s3://bad bucket/x", "invalid bucket name"),
        ("s3://bucket:9000/x", "invalid bucket name"),
        ("s3://user@bucket/x", "invalid bucket name"),
        ("s3://bucket/a/../b", "prefix"),
        ("s3://bucket/a//b", "prefix"),
        ("s3://bucket/p?versionId=1", "query"),
        ("/data/\0x", "NUL"),
    ],
)
def test_malformed_namespaces_are_invalid_arguments(uri, message):
    with pytest.raises(InvalidArgument, match=message.replace("?", r"\?")) as caught:
        parse_namespace(uri)
    assert "\n" not in str(caught.value)


def test_open_local(tmp_path):
    adapter = open_namespace(f"local://{tmp_path}/store/")
    assert isinstance(adapter, LocalBlockAdapter)
    assert adapter.uri == f"local://{tmp_path}/store"
    adapter.put("k", b"v")
    assert (tmp_path / "store" / "k").read_bytes() == b"v"
    assert open_namespace(str(tmp_path / "store")).get("k") == b"v"


def test_open_s3(s3_config, new_bucket):
    from lakefuse.block.s3 import S3BlockAdapter

    bucket = new_bucket()
    with open_namespace(f"s3://{bucket}/repos/one/", s3_config) as adapter:
        assert isinstance(adapter, S3BlockAdapter)
        assert adapter.uri == f"s3://{bucket}/repos/one"
        adapter.put("k", b"v")
    with open_namespace(f"s3://{bucket}", s3_config) as root:
        assert [s.key for s in root.list()] == ["repos/one/k"]


def test_open_namespace_rejects_what_parse_rejects():
    with pytest.raises(InvalidArgument):
        open_namespace("ftp://host/x")


def test_boto3_is_imported_only_for_s3(tmp_path):
    code = (
        "import sys, lakefuse.block as b\n"
        f"b.open_namespace({str(tmp_path)!r}).put('k', b'x')\n"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules, 'boto3 imported'\n"
        "b.parse_namespace('s3://bucket/p')\n"
        "assert 'boto3' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
