"""Graveler files decoded for fast lookups: what the RAM cache holds.

- ``LoadedMetaRange``: the ranges of a metarange as two parallel sorted lists (``max_keys``
  for ``bisect``, ``infos``), decoded once.
- ``LoadedRange``: a range as a dict ``key -> value`` plus the sorted key list for seeks.
  Values stay in their on-disk form until a point read asks for one; the identity/data split
  is then done once and the ``ValueRecord`` replaces the raw bytes in the dict (a lock-free
  memo: two threads racing store equal records).  Scans (``record_at``: listings, iterations,
  diffs) split each value they pass and keep nothing: a listing decodes each record once, and
  a kept split costs ~120 bytes more than the raw value for every entry a big listing passes.

Each carries ``size``, an estimate of its RAM footprint for the cache's byte budget.
"""

from __future__ import annotations

from bisect import bisect_left

from lakefuse.errors import CorruptedData
from lakefuse.graveler.committed.encoding import file_id, value_record_id, value_to_range_info, value_to_record
from lakefuse.graveler.model import RangeInfo, ValueRecord

# CPython cost per decoded record beyond its key and value bytes (measured with tracemalloc on
# realistic records, all materialized: ~1.9x the raw bytes): object headers of the key, the
# ValueRecord and its identity and data slices, a dict slot and a list slot.
_PER_RECORD_OVERHEAD = 200
_PER_RANGE_OVERHEAD = 400


class LoadedRange:
    __slots__ = ("id", "keys", "values", "size", "__weakref__")

    def __init__(self, range_id: str, items: list[tuple[bytes, bytes]]):
        self.id = range_id
        self.values: dict[bytes, bytes | ValueRecord] = dict(items)
        self.keys: list[bytes] = list(self.values)
        if len(self.keys) != len(items):
            raise CorruptedData(f"range {range_id}: duplicate keys")
        self.size = sum(map(len, self.keys)) + sum(map(len, self.values.values())) + _PER_RECORD_OVERHEAD * len(self.keys)

    def __len__(self) -> int:
        return len(self.keys)

    def get(self, key: bytes) -> ValueRecord | None:
        value = self.values.get(key)
        if value is None or type(value) is ValueRecord:
            return value
        return self.materialize(key, value)

    def materialize(self, key: bytes, raw: bytes) -> ValueRecord:
        """Split a raw value into its record, once: the record replaces it in the dict."""
        record = value_to_record(key, raw)
        self.values[key] = record
        return record

    def record_at(self, index: int) -> ValueRecord:
        """The record at ``index`` for a scan: split, not kept (see the module docstring)."""
        key = self.keys[index]
        value = self.values[key]
        if type(value) is ValueRecord:
            return value
        return value_to_record(key, value)

    def index_of(self, key: bytes, lo: int = 0) -> int:
        """Position of the first key >= ``key``."""
        return bisect_left(self.keys, key, lo)

    def check(self, info: RangeInfo) -> None:
        """Cheap consistency check against what the metarange says of this range."""
        keys = self.keys
        if len(keys) != info.count or not keys or keys[0] != info.min_key or keys[-1] != info.max_key:
            raise CorruptedData(
                f"range {info.id}: holds {len(keys)} keys "
                f"[{keys[0] if keys else b''!r}..{keys[-1] if keys else b''!r}], metarange says {info.count} "
                f"[{info.min_key!r}..{info.max_key!r}]"
            )


class LoadedMetaRange:
    """``range_refs[i]`` is a weak reference to the decoded range ``i`` while the RAM cache (or
    anyone) keeps it alive: lookups reach a warm range without taking the cache's lock."""

    __slots__ = ("id", "max_keys", "min_keys", "infos", "cache_keys", "range_refs", "size", "__weakref__")

    def __init__(self, metarange_id: str, items: list[tuple[bytes, bytes]], verify: bool = True):
        self.id = metarange_id
        infos = [value_to_range_info(key, raw) for key, raw in items]
        if verify:
            actual = file_id(value_record_id(info.max_key, info.id.encode("ascii")) for info in infos)
            if actual != metarange_id:
                raise CorruptedData(f"metarange {metarange_id}: content hashes to {actual}")
        previous = None
        for info in infos:
            if info.min_key > info.max_key or (previous is not None and info.min_key <= previous):
                raise CorruptedData(f"metarange {metarange_id}: ranges overlap or are out of order at {info.min_key!r}")
            previous = info.max_key
        self.infos: tuple[RangeInfo, ...] = tuple(infos)
        self.max_keys: list[bytes] = [info.max_key for info in infos]
        self.min_keys: list[bytes] = [info.min_key for info in infos]
        self.range_refs: list = [None] * len(infos)
        self.cache_keys: list[str] = ["range:" + info.id for info in infos]
        self.size = _PER_RANGE_OVERHEAD * (len(infos) + 1) + 3 * sum(len(k) for k in self.max_keys)

    def __len__(self) -> int:
        return len(self.infos)

    def range_index(self, key: bytes) -> int:
        """Index of the range that would hold ``key`` (== len when past the last range)."""
        return bisect_left(self.max_keys, key)
