"""Writing ranges and metaranges: streaming records into content-addressed files.

Owns where ranges split, and the per-range record buffering (a range is at most about
``range_max_bytes``, so its ID is known before anything is encoded and an existing file costs
one ``exists`` call).  ``MetaRangeWriter`` takes a strictly increasing stream of records
and cuts it into ranges at content-defined boundaries: once a range holds ``range_min_bytes``
(key + encoded value bytes), it ends after the first key whose hash (first 8 bytes of
``SHA-256(key)``, computed anyway for the record ID) is divisible by ``range_raggedness``; it
always ends once it holds ``range_max_bytes``.  Boundaries depend only on keys and on the
records since the previous boundary, so two writers fed the same records from the same
boundary cut at the same keys: that is what lets ``apply`` reuse every unchanged range by ID and
resynchronize right after a changed one.

A finished range is uploaded on a small thread pool while the next one is being built (a few
in flight at most, so memory stays bounded by a few ``range_max_bytes``).  Files whose ID
already exists are not uploaded again.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Executor, Future
from typing import Iterable

from lakefuse.config import CommittedConfig
from lakefuse.errors import InvalidArgument
from lakefuse.graveler.committed.encoding import (
    PROPERTY_COUNT,
    PROPERTY_ESTIMATED_SIZE,
    PROPERTY_MAX_KEY,
    PROPERTY_MIN_KEY,
    PROPERTY_TYPE,
    TYPE_METARANGES,
    TYPE_RANGES,
    encode_value,
    range_info_to_value,
    validate_key,
    value_record_id,
)
from lakefuse.graveler.committed.files import GravelerFiles
from lakefuse.graveler.model import MetaRangeID, RangeID, RangeInfo, ValueRecord

_sha256 = hashlib.sha256
MAX_UPLOADS_IN_FLIGHT = 4


def file_properties(kind: str, min_key: bytes, max_key: bytes, count: int, estimated_size: int) -> dict[str, bytes]:
    """lakeFS's table properties of a Graveler file."""
    return {
        PROPERTY_TYPE: kind.encode(),
        PROPERTY_MIN_KEY: min_key,
        PROPERTY_MAX_KEY: max_key,
        PROPERTY_COUNT: str(count).encode(),
        PROPERTY_ESTIMATED_SIZE: str(estimated_size).encode(),
    }


def write_range(files: GravelerFiles, records: Iterable[ValueRecord]) -> RangeInfo:
    """Write one range of a sorted record stream as a single file, whatever its size (no
    splitting; ``MetaRangeWriter`` is what commits use).  Records are held in memory."""
    keys: list[bytes] = []
    values: list[bytes] = []
    digest = _sha256()
    size = 0
    for record in records:
        key = record.key
        validate_key(key)
        if keys and key <= keys[-1]:
            problem = "duplicate key" if key == keys[-1] else "keys not sorted:"
            raise InvalidArgument(f"{problem} {key!r} after {keys[-1]!r}")
        raw = encode_value(record.identity, record.value)
        digest.update(value_record_id(key, record.identity))
        keys.append(key)
        values.append(raw)
        size += len(key) + len(raw)
    if not keys:
        raise InvalidArgument("a range needs at least one record")
    info = RangeInfo(RangeID(digest.hexdigest()), keys[0], keys[-1], len(keys), size)
    properties = file_properties(TYPE_RANGES, info.min_key, info.max_key, info.count, info.estimated_size)
    files.write(info.id, list(zip(keys, values)), properties)
    return info


class MetaRangeWriter:
    """Cut a sorted record stream into ranges and write the metarange that lists them."""

    def __init__(self, files: GravelerFiles, config: CommittedConfig, executor: Executor | None = None):
        self.files = files
        self.min_bytes = config.range_min_bytes
        self.max_bytes = max(config.range_max_bytes, 1)
        self.raggedness = max(1, config.range_raggedness)
        self.executor = executor
        self.ranges: list[RangeInfo] = []
        self.uploaded: list[str] = []  # file IDs actually written (not found already present)
        self._last_key: bytes | None = None
        self._in_flight: list[tuple[RangeInfo, Future]] = []
        self._closed = False
        self._start_range()

    def _start_range(self) -> None:
        # the range being built, kept in plain attributes: add_raw is the hot loop of commits
        self._keys: list[bytes] = []
        self._values: list[bytes] = []
        self._size = 0
        self._hash = _sha256()
        self._hash_update = self._hash.update

    # -- feeding -------------------------------------------------------------------------

    @property
    def at_boundary(self) -> bool:
        """True when no records are buffered: the next range may be copied whole."""
        return not self._keys

    def add_record(self, record: ValueRecord) -> None:
        """Append a record (validated: non-empty UTF-8 key, strictly after the previous)."""
        key = record.key
        identity = record.identity
        value = record.value
        if type(key) is not bytes or not key:
            validate_key(key)  # raises, naming the key
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            validate_key(key)
        if type(identity) is not bytes or type(value) is not bytes:
            raise InvalidArgument(f"record {key!r}: identity and value must be bytes")
        self.add_raw(key, identity, encode_value(identity, value))

    def add_raw(self, key: bytes, identity: bytes, raw_value: bytes) -> None:
        """Append a record already encoded (``raw_value = encode_value(identity, data)``)."""
        last = self._last_key
        if last is not None and key <= last:
            if key == last:
                raise InvalidArgument(f"duplicate key {key!r}")
            raise InvalidArgument(f"keys not sorted: {key!r} after {last!r}")
        self._last_key = key
        key_hash = _sha256(key).digest()
        self._hash_update(_sha256(key_hash + _sha256(identity).digest()).digest())
        self._keys.append(key)
        self._values.append(raw_value)
        size = self._size = self._size + len(key) + len(raw_value)
        if size >= self.min_bytes and (
            size >= self.max_bytes or int.from_bytes(key_hash[:8], "big") % self.raggedness == 0
        ):
            self._flush_range()

    def add_range(self, info: RangeInfo) -> None:
        """Reuse an existing range by ID, unread.  Only at a boundary, in key order."""
        if not self.at_boundary:
            raise InvalidArgument("cannot copy a whole range into a partly written range")
        if self._last_key is not None and info.min_key <= self._last_key:
            raise InvalidArgument(f"range {info.id} starts at {info.min_key!r}, not after {self._last_key!r}")
        self.ranges.append(info)
        self._last_key = info.max_key

    # -- finishing -----------------------------------------------------------------------

    def _flush_range(self) -> None:
        keys = self._keys
        info = RangeInfo(
            id=RangeID(self._hash.hexdigest()),
            min_key=keys[0],
            max_key=keys[-1],
            count=len(keys),
            estimated_size=self._size,
        )
        items = list(zip(keys, self._values))
        self._start_range()
        self.ranges.append(info)
        properties = file_properties(TYPE_RANGES, info.min_key, info.max_key, info.count, info.estimated_size)
        if self.executor is None:
            if self.files.write(info.id, items, properties):
                self.uploaded.append(info.id)
            return
        while len(self._in_flight) >= MAX_UPLOADS_IN_FLIGHT:
            self._wait_oldest()
        self._in_flight.append((info, self.executor.submit(self.files.write, info.id, items, properties)))

    def _wait_oldest(self) -> None:
        info, future = self._in_flight.pop(0)
        if future.result():
            self.uploaded.append(info.id)

    def close(self) -> MetaRangeID:
        """Flush the last range, wait for the uploads, write the metarange; return its ID."""
        if self._closed:
            raise InvalidArgument("metarange writer already closed")
        self._closed = True
        try:
            if self._keys:
                self._flush_range()
            while self._in_flight:
                self._wait_oldest()
        except BaseException:
            self.abort()
            raise
        metarange_id, written = write_metarange_file(self.files, self.ranges)
        if written:
            self.uploaded.append(metarange_id)
        return metarange_id

    def abort(self) -> None:
        """Wait for uploads in flight (their errors are dropped); nothing more is written."""
        self._closed = True
        for _, future in self._in_flight:
            try:
                future.result()
            except Exception:  # noqa: BLE001 - the first error is being raised already
                pass
        self._in_flight.clear()


def metarange_items(ranges: list[RangeInfo]) -> tuple[MetaRangeID, list[tuple[bytes, bytes]]]:
    """The ID and the items of the metarange listing ``ranges``."""
    digest = _sha256()
    items = []
    for info in ranges:
        identity = info.id.encode("ascii")
        digest.update(value_record_id(info.max_key, identity))
        items.append((info.max_key, range_info_to_value(info)))
    return MetaRangeID(digest.hexdigest()), items


def write_metarange_file(files: GravelerFiles, ranges: list[RangeInfo]) -> tuple[MetaRangeID, bool]:
    """Write the metarange listing ``ranges``; returns its ID and whether it was uploaded."""
    metarange_id, items = metarange_items(ranges)
    # like lakeFS: min/max/count/size describe the metarange file's own records
    properties = file_properties(
        TYPE_METARANGES,
        items[0][0] if items else b"",
        items[-1][0] if items else b"",
        len(items),
        sum(len(key) + len(value) for key, value in items),
    )
    return metarange_id, files.write(metarange_id, items, properties)
