"""A repository whose storage namespace is S3 (moto on loopback), through the mount: reads go
through the block cache with read-ahead, writes upload to S3."""

from __future__ import annotations

import hashlib
import os

import pytest

from lakemount import LakeHome, MountedLake, require_fuse


@pytest.fixture(scope="module")
def s3_lake(tmp_path_factory):
    require_fuse()
    from s3server import FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY, REGION, create_bucket, s3_server

    with s3_server() as endpoint:
        create_bucket(endpoint, "lake")
        config = (f"storage:\n  s3:\n    endpoint_url: {endpoint}\n    region: {REGION}\n"
                  f"    access_key_id: {FAKE_ACCESS_KEY_ID}\n    secret_access_key: {FAKE_SECRET_ACCESS_KEY}\n"
                  f"    max_attempts: 3\n")
        home = LakeHome(tmp_path_factory.mktemp("s3home"), config)
        home.catalog.create_repository("remote", "s3://lake/remote")
        data = os.urandom(9 * 1024 * 1024 + 12345)
        home.catalog.upload_bytes("remote", "main", "big.bin", data)
        home.catalog.commit("remote", "main", "seed", "tests")
        mount = MountedLake(home, tmp_path_factory.mktemp("s3mnt") / "m", "lakefs://remote").start()
        try:
            yield home, mount, data
        finally:
            mount.stop()
            home.close()


def test_sequential_and_random_reads_through_the_block_cache(s3_lake):
    home, mount, data = s3_lake
    path = mount / "main/big.bin"
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(data).digest()
    with open(path, "rb") as f:
        for offset in (7_000_000, 123, 9 * 1024 * 1024):
            f.seek(offset)
            assert f.read(5000) == data[offset:offset + 5000]
    blocks = home.path / "cache" / "blocks"
    cached = [p for p in blocks.rglob("*") if p.is_file() and p.parent.name != "tmp" and "-" in p.name]
    assert len(cached) >= 9  # 1 MiB blocks of the object


def test_writes_upload_to_s3(s3_lake):
    home, mount, _ = s3_lake
    payload = os.urandom(3 * 1024 * 1024)
    with open(mount / "main/written.bin", "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())  # staged now (a close alone stages with the next batch)
    assert home.catalog.read_object("remote", "main", "written.bin") == payload
    assert (mount / "main/written.bin").read_bytes() == payload
    # S3 offers no place where a file becomes an object as it lies: spools stay in the spool
    # directory (see SpoolReserve), and nothing but objects was written to the bucket
    assert home.catalog.in_place_site("remote") is None
    listed = list(home.catalog.repository_block("remote").list("data/"))
    assert {stat.size for stat in listed} >= {len(payload)} and 0 not in {stat.size for stat in listed}
