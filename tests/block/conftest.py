"""Fixtures of the block adapter tests: a session-wide moto S3 server on loopback."""

from __future__ import annotations

import itertools

import pytest
from s3server import s3_server, s3_test_config

_bucket_numbers = itertools.count()


@pytest.fixture(scope="session")
def s3_endpoint():
    with s3_server() as endpoint_url:
        yield endpoint_url


@pytest.fixture
def s3_config(s3_endpoint):
    return s3_test_config(s3_endpoint)


@pytest.fixture(scope="session")
def s3_admin_client(s3_endpoint):
    """A plain boto3 client on the test server, to set things up behind the adapter's back."""
    from lakefuse.block.s3 import make_s3_client

    client = make_s3_client(s3_test_config(s3_endpoint))
    yield client
    client.close()


@pytest.fixture
def new_bucket(s3_admin_client):
    """Create a fresh, empty bucket and return its name."""

    def make() -> str:
        name = f"test-bucket-{next(_bucket_numbers)}"
        s3_admin_client.create_bucket(Bucket=name)
        return name

    return make
