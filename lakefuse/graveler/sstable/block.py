"""Decoding the contents of one (uncompressed) block: entries, restart points, seeking.

Owns the block entry format::

    entry   := shared varint32 | non_shared varint32 | value_len varint32 | key delta | value
    block   := entry* | restart offsets (fixed32 each) | num_restarts (fixed32)

Keys are prefix-compressed against the previous key; restart points (every N entries) store
a full key (shared == 0) and are what binary search runs on.  Blocks are passed as
``(buffer, start, end)`` so uncompressed blocks are decoded in place inside the file bytes.

The hot function is :func:`append_data_items`; it is written for CPython speed (locals only,
one-byte varint fast path, bytes slicing) and is what ``SSTableReader.items()`` spends its
time in.  Malformed input raises CorruptedData (the reader also converts the odd
IndexError / struct.error that slips through into CorruptedData).
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from typing import Callable

from lakefuse.errors import CorruptedData
from lakefuse.graveler.sstable.format import (
    VALUE_TYPE_DELETION,
    VALUE_TYPE_SINGLE_DELETION,
    VALUE_TYPE_VALUE,
    BLOCK_TRAILER_SIZE,
    decode_signed_varint,
    decode_varint,
)

_UNPACK_U32 = struct.Struct("<I").unpack_from
_UNPACK_U16 = struct.Struct("<H").unpack_from
_HASH_INDEX_BIT = 1 << 31


def restart_layout(buf: bytes, start: int, end: int) -> tuple[int, int]:
    """Return ``(entries_end, num_restarts)`` of the block ``buf[start:end]``.

    ``entries_end`` is where the entries stop and the restart array begins.  Handles the
    data-block hash index of RocksDB (top bit of the packed footer).
    """
    if end - start < 4:
        raise CorruptedData(f"sstable: block at {start} is {end - start} bytes, too short")
    (packed,) = _UNPACK_U32(buf, end - 4)
    restarts_end = end - 4
    num_restarts = packed
    if packed & _HASH_INDEX_BIT:
        num_restarts = packed & ~_HASH_INDEX_BIT
        if restarts_end - 2 < start:
            raise CorruptedData(f"sstable: block at {start} has a truncated hash index")
        (num_buckets,) = _UNPACK_U16(buf, restarts_end - 2)
        restarts_end -= 2 + num_buckets
    entries_end = restarts_end - 4 * num_restarts
    if entries_end < start:
        raise CorruptedData(
            f"sstable: block at {start} claims {num_restarts} restarts, more than it can hold"
        )
    return entries_end, num_restarts


def _entry_header(buf: bytes, p: int) -> tuple[int, int, int, int]:
    """Slow path: decode the three varints of an entry header of any width."""
    shared, p = decode_varint(buf, p)
    non_shared, p = decode_varint(buf, p)
    value_len, p = decode_varint(buf, p)
    return shared, non_shared, value_len, p


def _truncated(start: int, where: int) -> CorruptedData:
    return CorruptedData(f"sstable: malformed entry at offset {where} in block at {start}")


def append_data_items(
    buf: bytes, p: int, limit: int, out_append: Callable[[tuple[bytes, bytes]], None]
) -> None:
    """Decode the data-block entries in ``buf[p:limit]`` and append ``(user_key, value)``.

    ``p`` must be a restart point (the first entry's key is not prefix-compressed).  Keys are
    internal keys; their 8-byte trailer is dropped and *not* inspected: the caller uses this
    only for tables without deletions/merges (see :func:`decode_data_entries`).
    """
    start = p
    key = b""
    try:
        while p < limit:
            shared = buf[p]
            non_shared = buf[p + 1]
            value_len = buf[p + 2]
            if shared | non_shared < 128:
                if value_len < 128:
                    p += 3
                else:
                    # two-byte value length: values of 128..16383 bytes (lakeFS records)
                    high = buf[p + 3]
                    if high < 128:
                        value_len = (value_len & 127) | (high << 7)
                        p += 4
                    else:
                        shared, non_shared, value_len, p = _entry_header(buf, p)
            else:
                shared, non_shared, value_len, p = _entry_header(buf, p)
            key_end = p + non_shared
            key = key[:shared] + buf[p:key_end] if shared else buf[p:key_end]
            p = key_end + value_len
            out_append((key[:-8], buf[key_end:p]))
    except IndexError:
        raise _truncated(start, p) from None
    if p != limit:
        raise _truncated(start, p)


def decode_data_entries(buf: bytes, p: int, limit: int) -> list[tuple[bytes, int, bytes]]:
    """Decode data-block entries keeping the value type: ``(user_key, type, value)``.

    The careful path, for tables that may hold deletions or several versions of a key.
    """
    out = []
    start = p
    key = b""
    try:
        while p < limit:
            shared, non_shared, value_len, p = _entry_header(buf, p)
            key_end = p + non_shared
            key = key[:shared] + buf[p:key_end]
            p = key_end + value_len
            if len(key) < 8:
                raise _truncated(start, p)
            out.append((key[:-8], key[-8], buf[key_end:p]))
    except IndexError:
        raise _truncated(start, p) from None
    if p != limit:
        raise _truncated(start, p)
    return out


def live_items(
    entries: list[tuple[bytes, int, bytes]], previous_key: bytes | None = None
) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """Reduce ``(user_key, type, value)`` entries (newest version first per key) to live items.

    Keeps the first (newest) entry of each user key, drops deletions.  ``previous_key`` is
    the last user key seen in the preceding block so a key spanning blocks is handled.
    Returns the items and the last user key seen.
    """
    out = []
    for user_key, kind, value in entries:
        if user_key == previous_key:
            continue
        previous_key = user_key
        if kind == VALUE_TYPE_VALUE:
            out.append((user_key, value))
        elif kind in (VALUE_TYPE_DELETION, VALUE_TYPE_SINGLE_DELETION):
            continue
        else:
            raise CorruptedData(f"sstable: unsupported entry type {kind} for key {user_key!r}")
    return out, previous_key


def decode_plain_entries(buf: bytes, start: int, end: int) -> list[tuple[bytes, bytes]]:
    """All ``(key, value)`` of a block whose keys are plain (meta blocks, old index blocks)."""
    entries_end, _ = restart_layout(buf, start, end)
    out = []
    p = start
    key = b""
    try:
        while p < entries_end:
            shared, non_shared, value_len, p = _entry_header(buf, p)
            key_end = p + non_shared
            key = key[:shared] + buf[p:key_end]
            p = key_end + value_len
            out.append((key, buf[key_end:p]))
    except IndexError:
        raise _truncated(start, p) from None
    if p != entries_end:
        raise _truncated(start, p)
    return out


def _varint_at(buf: bytes, p: int) -> tuple[int, int]:
    """Inline-friendly unsigned varint decode (one-byte fast path)."""
    byte = buf[p]
    if byte < 128:
        return byte, p + 1
    return decode_varint(buf, p)


def decode_index_entries(
    buf: bytes, start: int, end: int, *, keys_are_internal: bool, values_delta_encoded: bool
) -> tuple[list[bytes], list[tuple[int, int]]]:
    """Decode an index block into parallel lists ``(separator user keys, (offset, size))``.

    Without delta encoding an entry's value is a BlockHandle (offset varint64, size varint64).
    With ``values_delta_encoded`` (format_version >= 4) see
    :func:`_decode_delta_index_entries`.
    """
    if values_delta_encoded:
        return _decode_delta_index_entries(buf, start, end, keys_are_internal)
    entries_end, _ = restart_layout(buf, start, end)
    keys: list[bytes] = []
    handles: list[tuple[int, int]] = []
    keys_append = keys.append
    handles_append = handles.append
    cut = -8 if keys_are_internal else None
    p = start
    key = b""
    try:
        while p < entries_end:
            shared = buf[p]
            non_shared = buf[p + 1]
            value_len = buf[p + 2]
            if shared | non_shared | value_len < 128:
                p += 3
            else:
                shared, non_shared, value_len, p = _entry_header(buf, p)
            key_end = p + non_shared
            key = key[:shared] + buf[p:key_end] if shared else buf[p:key_end]
            keys_append(key[:cut])
            p = key_end + value_len
            # BlockHandle: two varint64, decoded inline (offsets take 3-4 bytes)
            q = key_end
            offset = 0
            shift = 0
            while True:
                byte = buf[q]
                q += 1
                offset |= (byte & 127) << shift
                if byte < 128:
                    break
                shift += 7
            size = 0
            shift = 0
            while True:
                byte = buf[q]
                q += 1
                size |= (byte & 127) << shift
                if byte < 128:
                    break
                shift += 7
            if q != p:
                raise _truncated(start, q)
            handles_append((offset, size))
    except IndexError:
        raise _truncated(start, p) from None
    if p != entries_end:
        raise _truncated(start, p)
    return keys, handles


def _decode_delta_index_entries(
    buf: bytes, start: int, end: int, keys_are_internal: bool
) -> tuple[list[bytes], list[tuple[int, int]]]:
    """Index block of format_version >= 4: no value length, values delta encoded.

    RocksDB delta-encodes a value exactly when its key shares a prefix with the previous key
    (``shared != 0``): such an entry holds only the signed size delta, its block starting
    right after the previous one and its trailer.  Other entries hold a full handle.
    """
    entries_end, _ = restart_layout(buf, start, end)
    keys: list[bytes] = []
    handles: list[tuple[int, int]] = []
    cut = -8 if keys_are_internal else None
    p = start
    key = b""
    offset = size = -1
    try:
        while p < entries_end:
            shared, p = _varint_at(buf, p)
            non_shared, p = _varint_at(buf, p)
            key_end = p + non_shared
            key = key[:shared] + buf[p:key_end] if shared else buf[p:key_end]
            p = key_end
            if shared == 0:
                offset, p = _varint_at(buf, p)
                size, p = _varint_at(buf, p)
            elif offset < 0:
                raise _truncated(start, p)
            else:
                delta, p = decode_signed_varint(buf, p)
                offset += size + BLOCK_TRAILER_SIZE
                size += delta
            keys.append(key[:cut])
            handles.append((offset, size))
    except IndexError:
        raise _truncated(start, p) from None
    if p != entries_end:
        raise _truncated(start, p)
    return keys, handles


def _restart_user_key(buf: bytes, p: int) -> bytes:
    """The user key of the (unshared) entry at restart point ``p`` of a data block."""
    _shared, non_shared, _value_len, p = _entry_header(buf, p)
    return buf[p : p + non_shared - 8]


def seek_segment(buf: bytes, start: int, end: int, target: bytes) -> tuple[int, int, int, bool]:
    """Binary-search the restart points of a data block for ``target`` (a user key).

    Returns ``(segment_start, segment_end, entries_end, found)`` where the segment is the
    restart interval whose first key is the greatest one <= target: the first key >= target
    lies in it or is the first key of the next segment.  ``found`` is False when every key
    of the block is > target; the segment is then the first one.
    """
    entries_end, num_restarts = restart_layout(buf, start, end)
    if num_restarts == 0 or entries_end == start:
        return start, start, entries_end, False
    unpack = _UNPACK_U32
    lo, hi = 0, num_restarts
    try:
        while lo < hi:  # first restart whose key > target
            mid = (lo + hi) >> 1
            restart = start + unpack(buf, entries_end + 4 * mid)[0]
            if restart >= entries_end:
                raise _truncated(start, restart)
            if _restart_user_key(buf, restart) <= target:
                lo = mid + 1
            else:
                hi = mid
    except IndexError:
        raise _truncated(start, start) from None
    found = lo > 0
    segment = lo - 1 if found else 0
    segment_start = start + unpack(buf, entries_end + 4 * segment)[0]
    if segment + 1 < num_restarts:
        segment_end = start + unpack(buf, entries_end + 4 * (segment + 1))[0]
    else:
        segment_end = entries_end
    return segment_start, segment_end, entries_end, found


def first_at_or_after(items: list[tuple[bytes, bytes]], target: bytes) -> int:
    """Index of the first item whose key is >= target in a sorted item list."""
    return bisect_left(items, (target,))
