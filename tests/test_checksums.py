"""Object checksums: what lakefuse stores (BLAKE3) and what it can verify (BLAKE3, SHA-256, MD5)."""

from __future__ import annotations

import hashlib
import os

import blake3
import pytest

from lakefuse.checksums import ContentHasher, content_hasher, is_content_checksum, verifier_hasher


def test_content_checksum_is_prefixed_blake3_of_the_bytes_fed_in_any_chunks():
    data = bytes(range(256)) * 5000
    hasher = content_hasher()
    for start in range(0, len(data), 7777):
        hasher.update(memoryview(data)[start:start + 7777])
    assert hasher.hexdigest() == "blake3:" + blake3.blake3(data).hexdigest()
    assert ContentHasher(data).hexdigest() == hasher.hexdigest()
    assert is_content_checksum(hasher.hexdigest())


def test_copy_continues_independently():
    hasher = content_hasher()
    hasher.update(b"abc")
    twin = hasher.copy()
    twin.update(b"def")
    assert hasher.hexdigest() == ContentHasher(b"abc").hexdigest()
    assert twin.hexdigest() == ContentHasher(b"abcdef").hexdigest()


@pytest.mark.parametrize("checksum", [
    hashlib.sha256(b"x").hexdigest(), "blake3:" + "0" * 63, "blake3:" + "A" * 64, "", None, "etag-2",
])
def test_only_the_stored_form_counts_as_a_content_checksum(checksum):
    assert not is_content_checksum(checksum)


@pytest.mark.parametrize("make", [
    lambda data: ContentHasher(data).hexdigest(),
    lambda data: hashlib.sha256(data).hexdigest(),
    lambda data: hashlib.md5(data).hexdigest(),
])
def test_verifier_recomputes_blake3_sha256_and_md5(make):
    checksum = make(b"payload")
    hasher = verifier_hasher(checksum)
    hasher.update(b"pay")
    hasher.update(b"load")
    assert hasher.hexdigest() == checksum
    other = verifier_hasher(checksum)
    other.update(b"other")
    assert other.hexdigest() != checksum


@pytest.mark.parametrize("checksum", ["", "etag-3", "d41d8cd98f00b204e9800998ecf8427e-2", "abc", "blake3:xyz",
                                      "sha1:" + "0" * 40])
def test_verifier_knows_nothing_of_opaque_checksums(checksum):
    assert verifier_hasher(checksum) is None


@pytest.mark.parametrize("size", [0, 1, 4096, 1024 * 1024 - 1, 3 * 1024 * 1024 + 17])
def test_hashing_a_file_equals_hashing_its_bytes(tmp_path, size):
    data = os.urandom(size)
    (tmp_path / "spool").write_bytes(data + b"not hashed")
    fd = os.open(tmp_path / "spool", os.O_RDONLY)
    try:
        from_file = content_hasher()
        from_file.update_file(fd, size)
    finally:
        os.close(fd)
    from_bytes = content_hasher()
    from_bytes.update(data)
    assert from_file.hexdigest() == from_bytes.hexdigest()
