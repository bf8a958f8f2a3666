"""The S3 adapter against a real S3-compatible HTTP server (moto, loopback): the shared
contract, then what only S3 shows (multipart ETags, prefixes, error mapping)."""

from __future__ import annotations

import hashlib

import boto3
import pytest

from block.contract import CONTRACT_TRANSFER, BlockAdapterContract, keys_of
from lakefuse.block.base import MiB
from lakefuse.block.s3 import S3BlockAdapter
from lakefuse.errors import InvalidArgument, ObjectNotFound, StorageError


class TestS3Contract(BlockAdapterContract):
    @pytest.fixture(params=["", "name/space"], ids=["bucket-root", "under-prefix"])
    def adapter(self, request, new_bucket, s3_config):
        adapter = S3BlockAdapter(new_bucket(), request.param, s3_config=s3_config, transfer=CONTRACT_TRANSFER)
        yield adapter
        adapter.close()


@pytest.fixture
def bucket(new_bucket):
    return new_bucket()


@pytest.fixture
def raw_client(s3_config):
    client = boto3.session.Session(
        aws_access_key_id=s3_config.access_key_id,
        aws_secret_access_key=s3_config.secret_access_key,
        region_name=s3_config.region,
    ).client("s3", endpoint_url=s3_config.endpoint_url)
    yield client
    client.close()


@pytest.fixture
def store(bucket, s3_config):
    adapter = S3BlockAdapter(bucket, "ns", s3_config=s3_config, transfer=CONTRACT_TRANSFER)
    yield adapter
    adapter.close()


def test_uri(bucket, s3_config):
    assert S3BlockAdapter(bucket, "a/b/", s3_config=s3_config).uri == f"s3://{bucket}/a/b"
    assert S3BlockAdapter(bucket, "", s3_config=s3_config).uri == f"s3://{bucket}"


def test_objects_live_under_the_prefix(store, bucket, raw_client):
    store.put("dir/k", b"data")
    body = raw_client.get_object(Bucket=bucket, Key="ns/dir/k")["Body"].read()
    assert body == b"data"
    assert store.full_uri("dir/k") == f"s3://{bucket}/ns/dir/k"


def test_a_prefix_does_not_see_its_neighbours(bucket, s3_config, raw_client):
    raw_client.put_object(Bucket=bucket, Key="ns-other/k", Body=b"x")
    raw_client.put_object(Bucket=bucket, Key="nsk", Body=b"x")
    raw_client.put_object(Bucket=bucket, Key="ns/mine", Body=b"x")
    adapter = S3BlockAdapter(bucket, "ns", s3_config=s3_config)
    assert keys_of(adapter.list()) == ["mine"]
    assert keys_of(adapter.list(start_after="a")) == ["mine"]
    with pytest.raises(ObjectNotFound):
        adapter.get("k")  # that is "ns-other/k", not "ns/k"


def test_single_part_etag_is_the_md5_without_quotes(store):
    stat = store.put("k", b"hello")
    assert stat.etag == hashlib.md5(b"hello").hexdigest()
    assert store.stat("k").etag == stat.etag
    assert [s.etag for s in store.list()] == [stat.etag]


@pytest.mark.parametrize("method", ["put", "put_file", "put_stream"])
def test_objects_above_the_threshold_are_uploaded_in_parts(store, tmp_path, method):
    data = bytes(range(256)) * (11 * MiB // 256)  # 11 MiB: parts of 5 + 5 + 1 MiB
    source = tmp_path / "source"
    source.write_bytes(data)
    if method == "put":
        stat = store.put("k", data)
    elif method == "put_file":
        stat = store.put_file("k", str(source))
    else:
        with open(source, "rb") as f:
            stat = store.put_stream("k", f)
    assert stat.etag.endswith("-3"), stat.etag  # S3's multipart ETag: md5-of-md5s "-<parts>"
    assert stat.size == len(data)
    assert store.get("k") == data


def test_folder_markers_and_unaddressable_keys_are_not_listed(store, bucket, raw_client):
    raw_client.put_object(Bucket=bucket, Key="ns/folder/", Body=b"")
    raw_client.put_object(Bucket=bucket, Key="ns/a//b", Body=b"")
    store.put("folder/file", b"x")
    assert keys_of(store.list()) == ["folder/file"]


def test_missing_bucket_is_a_storage_error(s3_config):
    adapter = S3BlockAdapter("no-such-bucket-here", "p", s3_config=s3_config)
    for operation in (lambda: adapter.put("k", b"x"), lambda: adapter.get("k"), lambda: list(adapter.list())):
        with pytest.raises(StorageError, match="no-such-bucket-here.*does not exist") as caught:
            operation()
        assert "\n" not in str(caught.value)


def test_keys_longer_than_s3_allows(store):
    with pytest.raises(InvalidArgument, match="too long"):
        store.put("k" * 1100, b"x")


def test_a_failed_multipart_upload_is_aborted(store, bucket, raw_client):
    from block.contract import BrokenStream, StreamBroke

    with pytest.raises(StreamBroke):
        store.put_stream("k", BrokenStream(12 * MiB))
    assert raw_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert keys_of(store.list()) == []
