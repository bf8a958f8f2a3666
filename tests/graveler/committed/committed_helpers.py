"""Helpers of the committed-store tests: an in-memory block adapter that counts its calls,
small range sizes (many ranges from few keys), and record factories."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Iterator

from lakefuse.block.base import BlockAdapter, ObjectStat
from lakefuse.config import CommittedConfig
from lakefuse.errors import ObjectNotFound
from lakefuse.graveler.committed.encoding import entry_to_record
from lakefuse.graveler.model import Entry


class CountingMemoryBlock(BlockAdapter):
    """Objects in a dict; ``calls`` counts operations per (op, kind of key)."""

    uri = "mem://test"

    def __init__(self):
        self.objects: dict[str, bytes] = {}
        self.calls: Counter = Counter()

    def _stat(self, key: str) -> ObjectStat:
        return ObjectStat(key=key, size=len(self.objects[key]), mtime=0.0)

    def put(self, key, data):
        self.calls["put"] += 1
        self.objects[key] = bytes(data)
        return self._stat(key)

    def put_file(self, key, path):
        self.calls["put"] += 1
        with open(path, "rb") as f:
            self.objects[key] = f.read()
        return self._stat(key)

    def put_stream(self, key, stream):
        self.calls["put"] += 1
        self.objects[key] = stream.read()
        return self._stat(key)

    def _get(self, key):
        self.calls["get"] += 1
        try:
            return self.objects[key]
        except KeyError:
            raise ObjectNotFound(f"no object {key}") from None

    def get(self, key):
        return self._get(key)

    def get_range(self, key, offset, length):
        return self._get(key)[offset : offset + length]

    def get_to_file(self, key, path):
        data = self._get(key)
        with open(path, "wb") as f:
            f.write(data)
        return self._stat(key)

    def stat(self, key):
        self.calls["stat"] += 1
        if key not in self.objects:
            raise ObjectNotFound(f"no object {key}")
        return self._stat(key)

    def delete(self, key):
        self.objects.pop(key, None)

    def list(self, prefix="", start_after="", page_size=1000) -> Iterator[ObjectStat]:
        for key in sorted(self.objects):
            if key.startswith(prefix) and key > start_after:
                yield self._stat(key)

    def file_ids(self) -> set[str]:
        return {key.removeprefix("_lakefs/") for key in self.objects if key.startswith("_lakefs/")}


#: ranges of roughly 20-40 records of ~150 bytes: 50k keys make well over 1000 ranges
SMALL_RANGES = CommittedConfig(range_min_bytes=3000, range_max_bytes=12000, range_raggedness=16)


def make_entry(key: bytes, version: int = 0, **overrides) -> Entry:
    checksum = hashlib.md5(key + b"%d" % version).hexdigest()
    fields = dict(
        physical_address="data/" + checksum,
        size=len(key) * 10 + version,
        mtime=1_700_000_000 + version,
        checksum=checksum,
        content_type="application/octet-stream",
        metadata={},
    )
    fields.update(overrides)
    return Entry(**fields)


def make_record(key: bytes, version: int = 0):
    return entry_to_record(key, make_entry(key, version))


def object_keys(n: int) -> list[bytes]:
    """``n`` sorted realistic keys: tables / dates / parts."""
    keys = [
        b"tables/t%02d/date=2024-01-%02d/part-%05d.parquet" % (i // 10000, (i // 500) % 20 + 1, i % 500)
        for i in range(n)
    ]
    keys.sort()
    return keys
