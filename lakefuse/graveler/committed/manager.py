"""``CommittedManager``: the ``CommittedStore`` of one storage namespace.

Owns reading, comparing and rewriting committed content.  Reads go RAM cache -> disk cache ->
block adapter: a metarange is decoded once into sorted lists, a range into a dict plus a sorted
key list (``loaded``), so a warm point lookup is one ``bisect`` and one dict probe.  Ranges that
scans read (iterations, listings, diffs, ``apply``) go to the RAM cache's probation segment, so a
walk cannot flush the ranges point reads (``get``) keep in its main segment; metaranges always
go to main.

Building blocks for the merge engine (everything is in key order, lazily evaluated):

- ``diff(left, right)`` yields ``(key, left_record, right_record)`` for every key whose
  identity differs, never reading a range whose ID appears on both sides at the same place.
- ``apply(base, changes)`` writes ``base`` + sorted changes (``None`` deletes), reusing every
  unchanged range by ID.
- A three-way merge is ``apply(dest, changes)`` where ``changes`` comes from walking
  ``diff(base, source)`` next to ``diff(base, dest)``: a key changed only in the source is a
  change; changed on both sides to the same identity is nothing to do; changed differently is a
  conflict (or resolved by strategy).  Work is proportional to the differences.
- ``iterate(metarange, from_key)`` and ``list_dir`` (S3-style listing with a delimiter, whole
  subtrees skipped by seeking) for everything else.  A seek into a range not in memory reads
  the blocks of its file it needs, not the whole range, until the scan goes on in that range.
"""

from __future__ import annotations

import threading
import weakref
from bisect import bisect_left
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Iterator, Sequence

from lakefuse.block.base import BlockAdapter
from lakefuse.config import CommittedConfig
from lakefuse.errors import CorruptedData, InvalidArgument
from lakefuse.graveler.committed.encoding import EMPTY_FILE_ID, decode_value, validate_key, value_to_record
from lakefuse.graveler.committed.files import GravelerFiles, check_file_id
from lakefuse.graveler.committed.loaded import LoadedMetaRange, LoadedRange
from lakefuse.graveler.committed.writer import MetaRangeWriter, write_metarange_file
from lakefuse.graveler.model import MetaRangeID, RangeInfo, ValueRecord
from lakefuse.graveler.quick import must_wait, quick

_EMPTY_METARANGE = LoadedMetaRange(EMPTY_FILE_ID, [], verify=True)
#: refresh a weakly reached cache entry's recency once per this many hits (see "loading")
TOUCH_EVERY = 64
#: records an iteration reads after a seek before it reads the range whole (see ``iterate``)
SEEK_RECORDS = 64


def prefix_successor(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix`` (None: no such key)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes((stripped[-1] + 1,))


class _PrivateRamCache:
    """Stand-in when no RamCache is given: keeps only the last few decoded files (``scan`` is
    accepted and ignored)."""

    def __init__(self, max_items: int = 8):
        self._items: dict = {}
        self._max_items = max_items
        self._lock = threading.Lock()

    def get(self, key, default=None):
        return self._items.get(key, default)

    def put(self, key, value, size: int) -> None:
        with self._lock:
            while len(self._items) >= self._max_items:
                self._items.pop(next(iter(self._items)))
            self._items[key] = value

    def get_or_load(self, key, loader, scan: bool = False):
        value = self._items.get(key)
        if value is not None:
            return value
        value, size = loader()
        self.put(key, value, size)
        return value


class CommittedManager:
    """Ranges and metaranges of one storage namespace (see module docstring)."""

    def __init__(
        self,
        block: BlockAdapter,
        disk_cache=None,
        ram_cache=None,
        config: CommittedConfig | None = None,
        *,
        upload_threads: int = 2,
        verify_metaranges: bool = True,
    ):
        self.config = config or CommittedConfig()
        self.files = GravelerFiles(block, disk_cache)
        self._ram = ram_cache if ram_cache is not None else _PrivateRamCache()
        self._verify_metaranges = verify_metaranges
        self._upload_threads = upload_threads
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        #: file IDs (ranges, then the metarange) uploaded by the last write_metarange / apply:
        #: files found already present are not in it
        self.last_written: list[str] = []
        self._empty_written = False
        self._metarange_refs: dict[str, weakref.ref] = {}
        self._last_range_reader: tuple[str, object] | None = None  # see _range_reader
        self._hits = 0

    def close(self) -> None:
        with self._executor_lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    # -- loading -------------------------------------------------------------------------
    #
    # The RAM cache owns decoded files (it alone decides what stays in memory).  Lookups reach
    # a file the cache still holds through a weak reference, without the cache's lock; every
    # TOUCH_EVERY-th such hit also refreshes the entry's recency in the cache (and puts it
    # back if the cache dropped it while someone still held it), so LRU order stays roughly
    # right at a negligible cost per lookup.  ``scan`` says who reads a range: a scan loads
    # and touches it in the cache's probation segment (a range a scan reached stays there), a
    # point read promotes it to the main segment.

    def _metarange(self, metarange_id: MetaRangeID) -> LoadedMetaRange:
        ref = self._metarange_refs.get(metarange_id)
        if ref is not None:
            meta = ref()
            if meta is not None:
                self._hits += 1
                if not self._hits % TOUCH_EVERY:
                    self._touch("metarange:" + metarange_id, meta, scan=False)
                return meta
        if metarange_id == EMPTY_FILE_ID:
            return _EMPTY_METARANGE
        check_file_id(metarange_id, "metarange")
        if quick():  # decoded in the cache, or NotQuick (it never waits for a load in flight)
            meta = self._ram.get("metarange:" + metarange_id)
            if meta is None:
                must_wait(f"metarange {metarange_id}")
        else:
            meta = self._ram.get_or_load("metarange:" + metarange_id, lambda: self._load_metarange(metarange_id))
        refs = self._metarange_refs

        def forget(dead_ref, metarange_id=metarange_id):
            if refs.get(metarange_id) is dead_ref:
                refs.pop(metarange_id, None)

        refs[metarange_id] = weakref.ref(meta, forget)
        return meta

    def _load_metarange(self, metarange_id: MetaRangeID):
        items, _file_size = self.files.read_items(metarange_id, "metarange")
        loaded = LoadedMetaRange(metarange_id, items, verify=self._verify_metaranges)
        return loaded, loaded.size

    def _range(self, meta: LoadedMetaRange, index: int, scan: bool) -> LoadedRange:
        ref = meta.range_refs[index]
        if ref is not None:
            loaded = ref()
            if loaded is not None:
                self._hits += 1
                if not self._hits % TOUCH_EVERY:
                    self._touch(meta.cache_keys[index], loaded, scan)
                return loaded
        if quick():
            loaded = self._ram.get(meta.cache_keys[index])
            if loaded is None:
                must_wait(f"range {meta.infos[index].id}")
        else:
            loaded = self._ram.get_or_load(
                meta.cache_keys[index], lambda: self._load_range(meta.infos[index]), scan=scan
            )
        meta.range_refs[index] = weakref.ref(loaded)
        return loaded

    def _load_range(self, info: RangeInfo):
        check_file_id(info.id, "range")
        items, _file_size = self.files.read_items(info.id, "range")
        loaded = LoadedRange(info.id, items)
        loaded.check(info)
        return loaded, loaded.size

    def _touch(self, cache_key: str, value, scan: bool) -> None:
        """Refresh ``value``'s recency in the cache, putting it back if it was dropped: into
        probation for a scan (which never promotes), into main for a point read."""
        self._ram.get_or_load(cache_key, lambda: (value, value.size), scan=scan)

    # -- writing -------------------------------------------------------------------------

    def _new_writer(self) -> MetaRangeWriter:
        executor = None
        if self._upload_threads > 0:
            with self._executor_lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(self._upload_threads, thread_name_prefix="lakefuse-range-upload")
                executor = self._executor
        return MetaRangeWriter(self.files, self.config, executor)

    def _finish(self, writer: MetaRangeWriter) -> MetaRangeID:
        metarange_id = writer.close()
        self.last_written = list(writer.uploaded)
        return metarange_id

    def empty_metarange(self) -> MetaRangeID:
        """The ID of the metarange with no ranges.  Its (empty) file is stored like any other
        for tools reading ``_lakefs/``; lakefuse itself never needs to read it."""
        if not self._empty_written:
            write_metarange_file(self.files, [])
            self._empty_written = True
        return MetaRangeID(EMPTY_FILE_ID)

    def write_metarange(self, records: Iterable[ValueRecord]) -> MetaRangeID:
        writer = self._new_writer()
        try:
            add = writer.add_record
            for record in records:
                add(record)
        except BaseException:
            writer.abort()
            raise
        return self._finish(writer)

    def apply(self, base: MetaRangeID, changes: Iterable[tuple[bytes, ValueRecord | None]]) -> MetaRangeID:
        """``base`` with sorted ``changes`` applied (``None`` deletes).  A base range with no
        change is copied by ID, unread, whenever the writer is at a range boundary; otherwise
        its records stream through the writer so boundaries resynchronize after a change."""
        meta = self._metarange(base)
        writer = self._new_writer()
        try:
            self._apply_into(writer, meta, _checked_changes(changes))
        except BaseException:
            writer.abort()
            raise
        return self._finish(writer)

    def _apply_into(self, writer: MetaRangeWriter, meta: LoadedMetaRange, changes: Iterator) -> None:
        pending = next(changes, None)
        add_record = writer.add_record
        add_raw = writer.add_raw
        for index, info in enumerate(meta.infos):
            if (pending is None or pending[0] > info.max_key) and writer.at_boundary:
                writer.add_range(info)
                continue
            loaded = self._range(meta, index, scan=True)
            values = loaded.values
            for key in loaded.keys:
                while pending is not None and pending[0] < key:
                    if pending[1] is not None:
                        add_record(pending[1])
                    pending = next(changes, None)
                if pending is not None and pending[0] == key:
                    if pending[1] is not None:
                        add_record(pending[1])
                    pending = next(changes, None)
                    continue
                value = values[key]
                if type(value) is ValueRecord:
                    add_record(value)
                else:
                    identity, _data = decode_value(value)
                    add_raw(key, identity, value)
        while pending is not None:
            if pending[1] is not None:
                add_record(pending[1])
            pending = next(changes, None)

    # -- reading -------------------------------------------------------------------------

    def get(self, metarange: MetaRangeID, key: bytes) -> ValueRecord | None:
        # the hot path of every lookup: _metarange and _range inlined for their common case
        ref = self._metarange_refs.get(metarange)
        meta = ref() if ref is not None else None
        if meta is None:
            meta = self._metarange(metarange)
        max_keys = meta.max_keys
        index = bisect_left(max_keys, key)
        if index == len(max_keys):
            return None
        ref = meta.range_refs[index]
        loaded = ref() if ref is not None else None
        if loaded is None:
            if key < meta.min_keys[index]:
                return None  # in the gap before the range: no need to load it
            loaded = self._range(meta, index, scan=False)
        else:
            self._hits += 1
            if not self._hits % TOUCH_EVERY:
                self._touch(meta.cache_keys[index], loaded, scan=False)
                self._touch("metarange:" + metarange, meta, scan=False)
        value = loaded.values.get(key)
        if value is None or type(value) is ValueRecord:
            return value
        return loaded.materialize(key, value)

    def ranges(self, metarange: MetaRangeID) -> Sequence[RangeInfo]:
        return self._metarange(metarange).infos

    def iterate(self, metarange: MetaRangeID, from_key: bytes = b"") -> Iterator[ValueRecord]:
        """Records with key >= ``from_key`` in key order, loading ranges as it goes.

        A seek (``from_key``) into a range not in memory reads its first records from the
        blocks of its file that hold them, and the range whole only once the iteration goes on
        past ``SEEK_RECORDS``: a branch's listing seeks past every subtree it skips, and reads
        a few records after each seek (see ``_peek``)."""
        meta = self._metarange(metarange)
        index = meta.range_index(from_key)
        budget = SEEK_RECORDS if from_key else 0  # records left to read from blocks
        while budget and index < len(meta.infos) and not self._resident(meta, index):
            must_wait("blocks of a range file")
            for key, raw in self._range_reader(meta.infos[index]).iter_from(from_key):
                if not budget:
                    from_key = key  # the rest of this range from the range itself
                    break
                budget -= 1
                yield value_to_record(key, raw)
            else:
                index += 1  # read to its end: on with the next one
                from_key = b""
                continue
            break
        position = None
        while index < len(meta.infos):
            loaded = self._range(meta, index, scan=True)
            position = loaded.index_of(from_key) if position is None else 0
            record_at = loaded.record_at
            for i in range(position, len(loaded.keys)):
                yield record_at(i)
            index += 1
            position = 0

    def list_dir(
        self, metarange: MetaRangeID, prefix: bytes, delimiter: bytes = b"/", after: bytes = b"",
        markers: bool = False,
    ) -> Iterator[tuple[bytes, ValueRecord | None]]:
        """Like S3 ListObjects with a delimiter: ``(key, record)`` for objects directly under
        ``prefix`` and ``(common_prefix, None)`` once per deeper "directory", in key order,
        all strictly after ``after`` (a common prefix equal to or containing ``after`` is
        considered listed).  Subtrees are skipped by seeking past them, unread.  ``markers``: a
        common prefix comes with the record of the object named exactly like it (a directory
        marker, the first key of its subtree) instead of None, when there is one.  A range
        reached by such a seek is read whole only if it holds an object to list (``_peek``).
        What ``RefView.list`` answers for a commit, in one loop over the ranges' keys."""
        meta = self._metarange(metarange)
        plen = len(prefix)
        start = prefix
        jumped = False  # start is just past a subtree skipped (see _peek)
        if after and after >= prefix:
            if not after.startswith(prefix):
                return
            rest = after[plen:]
            cut = rest.find(delimiter) if delimiter else -1
            if cut >= 0:
                start = prefix_successor(prefix + rest[: cut + len(delimiter)])
                if start is None:
                    return
                jumped = True
            else:
                start = after + b"\x00"
        infos = meta.infos
        count = len(infos)
        index = meta.range_index(start)
        while index < count:
            if jumped and not self._resident(meta, index):
                key, raw = self._peek(meta, index, start)
                if not key.startswith(prefix):
                    return
                cut = key.find(delimiter, plen) if delimiter else -1
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    yield common, (value_to_record(key, raw) if markers and key == common else None)
                    start = prefix_successor(common)
                    if start is None:
                        return
                    index = meta.range_index(start)
                    continue
                # an object right under prefix: its range is read whole
            jumped = False
            loaded = self._range(meta, index, scan=True)
            keys = loaded.keys
            position = loaded.index_of(start)
            while position < len(keys):
                key = keys[position]
                if not key.startswith(prefix):
                    return
                cut = key.find(delimiter, plen) if delimiter else -1
                if cut < 0:
                    yield key, loaded.record_at(position)
                    position += 1
                    continue
                common = key[: cut + len(delimiter)]
                yield common, (loaded.record_at(position) if markers and key == common else None)
                start = prefix_successor(common)
                if start is None:
                    return
                if start > loaded.keys[-1]:
                    break
                position = loaded.index_of(start, position)
            else:
                index += 1
                continue
            index = meta.range_index(start)  # jumped past this range: find where start lives
            jumped = True

    def _range_reader(self, info: RangeInfo):
        """The file of a range as an ``SSTableReader``, for seeks that read a block or two of
        it.  The last one opened is kept: consecutive seeks (the directories of a listing)
        often land in the same range, and each would read the file again."""
        last = self._last_range_reader
        if last is not None and last[0] == info.id:
            return last[1]
        check_file_id(info.id, "range")
        reader = self.files.reader(info.id, "range")
        self._last_range_reader = (info.id, reader)  # one assignment: safe to share across threads
        return reader

    def _resident(self, meta: LoadedMetaRange, index: int) -> bool:
        """Whether range ``index`` is decoded in memory."""
        ref = meta.range_refs[index]
        return ref is not None and ref() is not None

    def _peek(self, meta: LoadedMetaRange, index: int, key: bytes) -> tuple[bytes, bytes]:
        """The first ``(key, raw value)`` at or after ``key`` in range ``index`` (which holds
        one: its max key is not below ``key``), from the one block of its file that holds it.

        A listing that skips a subtree needs one key of the range after it: the first name of
        the next directory.  The root of a big tree is mostly such jumps, one into nearly every
        range, and decoding each range whole for it would cost as much as listing every file,
        and fill the RAM cache with ranges the walk reads again later."""
        info = meta.infos[index]
        must_wait("a block of a range file")
        for item in self._range_reader(info).iter_from(key):
            return item
        raise CorruptedData(f"range {info.id}: nothing at or after {key!r}, metarange says it ends at {info.max_key!r}")

    def diff(
        self, left: MetaRangeID, right: MetaRangeID
    ) -> Iterator[tuple[bytes, ValueRecord | None, ValueRecord | None]]:
        return _diff(self, self._metarange(left), self._metarange(right))


def _checked_changes(changes: Iterable[tuple[bytes, ValueRecord | None]]) -> Iterator:
    last = None
    for change in changes:
        key, record = change
        validate_key(key)
        if last is not None and key <= last:
            if key == last:
                raise InvalidArgument(f"duplicate change for key {key!r}")
            raise InvalidArgument(f"changes not sorted: {key!r} after {last!r}")
        if record is not None and record.key != key:
            raise InvalidArgument(f"change for key {key!r} carries a record of key {record.key!r}")
        last = key
        yield change


class _Side:
    """One side of a side-by-side walk: positioned on an unopened range or on a record."""

    __slots__ = ("manager", "meta", "index", "loaded", "position")

    def __init__(self, manager: CommittedManager, meta: LoadedMetaRange):
        self.manager = manager
        self.meta = meta
        self.index = 0
        self.loaded: LoadedRange | None = None  # None: on range ``index``, unopened
        self.position = 0

    @property
    def done(self) -> bool:
        return self.index >= len(self.meta.infos)

    @property
    def info(self) -> RangeInfo:
        return self.meta.infos[self.index]

    def low_key(self) -> bytes:
        """The smallest key not yet passed on this side."""
        if self.loaded is None:
            return self.meta.infos[self.index].min_key
        return self.loaded.keys[self.position]

    def open(self) -> None:
        self.loaded = self.manager._range(self.meta, self.index, scan=True)
        self.position = 0

    def skip_range(self) -> None:
        self.index += 1
        self.loaded = None

    def advance(self) -> None:
        self.position += 1
        if self.position >= len(self.loaded.keys):
            self.skip_range()

    def rest_of_range(self) -> Iterator[ValueRecord]:
        if self.loaded is None:
            self.open()
        loaded = self.loaded
        for i in range(self.position, len(loaded.keys)):
            yield loaded.record_at(i)
        self.skip_range()


def _diff(manager: CommittedManager, left_meta: LoadedMetaRange, right_meta: LoadedMetaRange):
    left = _Side(manager, left_meta)
    right = _Side(manager, right_meta)
    while True:
        if left.done:
            while not right.done:
                for record in right.rest_of_range():
                    yield record.key, None, record
            return
        if right.done:
            while not left.done:
                for record in left.rest_of_range():
                    yield record.key, record, None
            return
        if left.loaded is None and right.loaded is None and left.info.id == right.info.id:
            left.skip_range()
            right.skip_range()
            continue
        left_low = left.low_key()
        right_low = right.low_key()
        if left.loaded is None:
            if left.info.max_key < right_low:  # every remaining right key is past this range
                for record in left.rest_of_range():
                    yield record.key, record, None
                continue
            if right.loaded is None:
                if right.info.max_key < left_low:
                    for record in right.rest_of_range():
                        yield record.key, None, record
                    continue
                left.open()
                right.open()
                continue
            if right_low < left_low:  # right's record comes before anything left still has
                yield right_low, None, right.loaded.record_at(right.position)
                right.advance()
                continue
            left.open()
            continue
        if right.loaded is None:
            if right.info.max_key < left_low:
                for record in right.rest_of_range():
                    yield record.key, None, record
                continue
            if left_low < right_low:
                yield left_low, left.loaded.record_at(left.position), None
                left.advance()
                continue
            right.open()
            continue
        yield from _diff_open_ranges(left, right)


def _diff_open_ranges(left: _Side, right: _Side):
    """Walk two opened ranges side by side until either is exhausted (the hot loop of a diff).

    Values are compared in their on-disk form first: equal bytes mean equal identities, so
    only keys whose bytes differ are split into records (most keys of two ranges that differ
    in one object are byte-identical)."""
    left_range, right_range = left.loaded, right.loaded
    left_keys, right_keys = left_range.keys, right_range.keys
    left_values, right_values = left_range.values, right_range.values
    i, j = left.position, right.position
    left_end, right_end = len(left_keys), len(right_keys)
    while i < left_end and j < right_end:
        left_key = left_keys[i]
        right_key = right_keys[j]
        if left_key == right_key:
            left_value = left_values[left_key]
            right_value = right_values[right_key]
            if left_value is not right_value and left_value != right_value:
                left_record = left_range.record_at(i)
                right_record = right_range.record_at(j)
                if left_record.identity != right_record.identity:
                    yield left_key, left_record, right_record
            i += 1
            j += 1
        elif left_key < right_key:
            yield left_key, left_range.record_at(i), None
            i += 1
        else:
            yield right_key, None, right_range.record_at(j)
            j += 1
    left.position, right.position = i, j
    if i >= left_end:
        left.skip_range()
    if j >= right_end:
        right.skip_range()
