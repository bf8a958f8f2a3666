"""Ranges written by executors and assembled into one metarange by the driver.

Owns:

- ``write_sorted_ranges``: cut one sorted partition of records into ranges with the same
  content-defined rule as ``committed.writer.MetaRangeWriter`` (a range ends, once it holds
  ``range_min_bytes``, after the first key whose hash is divisible by ``range_raggedness``, and
  always at ``range_max_bytes``), starting afresh at the partition's first key, and write them
  (files already present are not uploaded again).  A partition returns only its RangeInfos.
- ``replace_prefix``: the metarange of a branch head whose keys under a prefix are replaced by
  freshly written ranges.  Head ranges wholly outside the prefix are reused by ID; a head range
  that straddles the prefix's edge has its outside records rewritten as a range of their own.

Partitions are cut at bounds that depend only on the set of keys (see ``importer``), so a
re-import of the same listing writes the same ranges and the same metarange.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Iterator

from lakefuse.config import CommittedConfig
from lakefuse.errors import CorruptedData, InvalidArgument
from lakefuse.graveler.committed.encoding import TYPE_RANGES, decode_value
from lakefuse.graveler.committed.files import GravelerFiles
from lakefuse.graveler.committed.manager import prefix_successor
from lakefuse.graveler.committed.writer import file_properties, write_metarange_file, write_range
from lakefuse.graveler.model import MetaRangeID, RangeID, RangeInfo

_sha256 = hashlib.sha256


def write_sorted_ranges(
    files: GravelerFiles, config: CommittedConfig, records: Iterable[tuple[bytes, bytes]]
) -> Iterator[tuple[RangeInfo, bool]]:
    """Write sorted ``(key, encoded value)`` records as ranges; yields ``(info, uploaded)``.
    A range's ID is ``committed.encoding.file_id`` of its records' IDs."""
    min_bytes = config.range_min_bytes
    max_bytes = max(config.range_max_bytes, 1)
    raggedness = max(1, config.range_raggedness)
    keys: list[bytes] = []
    values: list[bytes] = []
    digest = _sha256()
    size = 0
    for key, raw_value in records:
        if keys and key <= keys[-1]:
            if key == keys[-1]:
                raise InvalidArgument(f"duplicate key {key!r} in the records of a range")
            raise InvalidArgument(f"records not sorted: {key!r} after {keys[-1]!r}")
        key_hash = _sha256(key).digest()
        identity, _data = decode_value(raw_value)
        digest.update(_sha256(key_hash + _sha256(identity).digest()).digest())  # value_record_id
        keys.append(key)
        values.append(raw_value)
        size += len(key) + len(raw_value)
        if size >= min_bytes and (size >= max_bytes or int.from_bytes(key_hash[:8], "big") % raggedness == 0):
            yield _flush(files, keys, values, digest, size)
            keys, values, digest, size = [], [], _sha256(), 0
    if keys:
        yield _flush(files, keys, values, digest, size)


def _flush(files: GravelerFiles, keys: list[bytes], values: list[bytes], digest, size: int) -> tuple[RangeInfo, bool]:
    info = RangeInfo(RangeID(digest.hexdigest()), keys[0], keys[-1], len(keys), size)
    properties = file_properties(TYPE_RANGES, info.min_key, info.max_key, info.count, info.estimated_size)
    return info, files.write(info.id, list(zip(keys, values)), properties)


def check_ordered(ranges: list[RangeInfo]) -> None:
    previous = None
    for info in ranges:
        if info.min_key > info.max_key or (previous is not None and info.min_key <= previous):
            raise CorruptedData(f"ranges overlap or are out of order at range {info.id} ({info.min_key!r})")
        previous = info.max_key


def replace_prefix(
    store,
    files: GravelerFiles,
    head_metarange: MetaRangeID,
    prefix: bytes,
    replacement: list[RangeInfo],
) -> MetaRangeID:
    """Write the metarange of ``head_metarange`` with every key under ``prefix`` (all keys if
    empty) replaced by the ranges ``replacement`` (whose keys all start with ``prefix``)."""
    for info in replacement:
        if not (info.min_key.startswith(prefix) and info.max_key.startswith(prefix)):
            raise InvalidArgument(f"range {info.id} holds keys outside the prefix {prefix!r}")
    before: list[RangeInfo] = []
    after: list[RangeInfo] = []
    if prefix:
        upper = prefix_successor(prefix)
        for info in store.ranges(head_metarange):
            if info.max_key < prefix:
                before.append(info)
            elif upper is not None and info.min_key >= upper:
                after.append(info)
            elif info.min_key >= prefix and (upper is None or info.max_key < upper):
                continue  # wholly inside the prefix: replaced
            else:
                low, high = [], []
                for record in store.iterate(head_metarange, info.min_key):
                    if record.key > info.max_key:
                        break
                    if record.key < prefix:
                        low.append(record)
                    elif upper is not None and record.key >= upper:
                        high.append(record)
                if low:
                    before.append(write_range(files, low))
                if high:
                    after.append(write_range(files, high))
    ranges = before + list(replacement) + after
    check_ordered(ranges)
    metarange_id, _written = write_metarange_file(files, ranges)
    return metarange_id
