"""Byte-level encodings of Graveler files, compatible with lakeFS.

Owns, and nothing else does:

- the on-disk value of a record: ``signed-varint(len identity) + identity +
  signed-varint(len data) + data`` (Go's ``binary.PutVarint``: zigzag varints);
- the protobuf wire encoding of lakeFS's catalog ``Entry`` (the data of a range record) and of
  ``RangeData`` (the data of a metarange record), hand-written: no protobuf dependency;
- identities: the identity of an ``Entry`` (lakeFS's, see ``entry_identity``) and the content
  address of a record and a file (``valueRecordID = h(h(key) || h(identity))``,
  ``fileID = hex(h(id1 + ... + idN))``, h = SHA-256);
- key validation (non-empty, UTF-8).

Entry <-> protobuf field mapping (lakeFS ``catalog.Entry``):

====================  ====================================================
 physical_address     1 ``address`` (string)
 mtime                2 ``last_modified`` (Timestamp{seconds=1, nanos=2})
 size                 3 ``size`` (int64)
 checksum             4 ``e_tag`` (string)
 metadata             5 ``metadata`` (map<string, string>)
 address_is_full      6 ``address_type`` (0 BY_PREFIX_DEPRECATED, 1 RELATIVE, 2 FULL)
 content_type         7 ``content_type`` (string)
====================  ====================================================

A range record's identity is 32 raw bytes (SHA-256) like lakeFS's; a metarange record's
identity is the range ID as ASCII hex (64 bytes), as lakeFS writes it.
"""

from __future__ import annotations

import hashlib
import struct
from sys import intern
from dataclasses import dataclass
from typing import Iterable

from lakefuse.errors import CorruptedData, InvalidArgument
from lakefuse.graveler import ident
from lakefuse.graveler.ident import AddressWriter
from lakefuse.graveler.model import Entry, RangeID, RangeInfo, ValueRecord
from lakefuse.graveler.sstable.format import decode_signed_varint, decode_varint

_sha256 = hashlib.sha256

ADDRESS_TYPE_BY_PREFIX_DEPRECATED = 0
ADDRESS_TYPE_RELATIVE = 1
ADDRESS_TYPE_FULL = 2

# Table properties lakeFS writes in every Graveler file.
PROPERTY_TYPE = "type"
PROPERTY_MIN_KEY = "min_key"
PROPERTY_MAX_KEY = "max_key"
PROPERTY_COUNT = "count"
PROPERTY_ESTIMATED_SIZE = "estimated_size_bytes"
TYPE_RANGES = "ranges"
TYPE_METARANGES = "metaranges"


# ---------------------------------------------------------------------------------------------
# varints


def _encode_uvarint_slow(value: int) -> bytes:
    if value < 0:
        value &= (1 << 64) - 1  # protobuf encodes negative int64 as 10-byte two's complement
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_UVARINTS = tuple(_encode_uvarint_slow(i) for i in range(1 << 14))  # every 1- and 2-byte varint
_SVARINTS = tuple(_UVARINTS[i << 1] for i in range(1 << 13))  # zigzag of 0 .. 8191


def encode_uvarint(value: int) -> bytes:
    """Unsigned LEB128 varint (protobuf / Go ``binary.PutUvarint``)."""
    if 0 <= value < 16384:
        return _UVARINTS[value]
    return _encode_uvarint_slow(value)


def encode_svarint(value: int) -> bytes:
    """Signed zigzag varint (Go ``binary.PutVarint``)."""
    if 0 <= value < 8192:
        return _SVARINTS[value]
    return encode_uvarint((value << 1) ^ (value >> 63) if value < 0 else value << 1)


# Decoding is shared with the SSTable layer (the same LEB128 / zigzag varints).
decode_uvarint = decode_varint
decode_svarint = decode_signed_varint


# ---------------------------------------------------------------------------------------------
# record values: identity + data


def encode_value(identity: bytes, data: bytes) -> bytes:
    """The on-disk value of a record (lakeFS ``committed.MarshalValue``)."""
    ilen = len(identity)
    dlen = len(data)
    if ilen < 8192 and dlen < 8192:
        return b"".join((_SVARINTS[ilen], identity, _SVARINTS[dlen], data))
    return encode_svarint(ilen) + identity + encode_svarint(dlen) + data


def decode_value(raw: bytes) -> tuple[bytes, bytes]:
    """Split an on-disk value into ``(identity, data)``; CorruptedData if malformed."""
    try:
        first = raw[0]
        if first < 0x80 and not first & 1:
            ilen = first >> 1
            pos = 1
        else:
            ilen, pos = decode_svarint(raw, 0)
        end = pos + ilen
        identity = raw[pos:end]
        second = raw[end]
        if second < 0x80 and not second & 1:
            dlen = second >> 1
            pos = end + 1
        else:
            dlen, pos = decode_svarint(raw, end)
    except IndexError:
        raise CorruptedData("record value truncated") from None
    if ilen < 0 or dlen < 0 or len(identity) != ilen or pos + dlen != len(raw):
        raise CorruptedData(f"record value malformed (identity {ilen} bytes, data {dlen} bytes, total {len(raw)})")
    return identity, raw[pos:]


_new_object = object.__new__
_set_key = ValueRecord.__dict__["key"].__set__
_set_identity = ValueRecord.__dict__["identity"].__set__
_set_value = ValueRecord.__dict__["value"].__set__


def new_value_record(key: bytes, identity: bytes, value: bytes) -> ValueRecord:
    """``ValueRecord(key, identity, value)`` without the frozen dataclass ``__init__`` (which
    costs ~0.5 us more per record; ValueRecord has no ``__post_init__`` to skip)."""
    record = _new_object(ValueRecord)
    _set_key(record, key)
    _set_identity(record, identity)
    _set_value(record, value)
    return record


def value_to_record(key: bytes, raw: bytes) -> ValueRecord:
    """The record of an on-disk value; the common shapes (identity < 64 bytes, data < 8 KiB)
    are split inline, anything else goes through ``decode_value``."""
    try:
        first = raw[0]
        if first < 0x80 and not first & 1:
            end = (first >> 1) + 1
            second = raw[end]
            if second < 0x80:
                if not second & 1 and end + 1 + (second >> 1) == len(raw):
                    return new_value_record(key, raw[1:end], raw[end + 1 :])
            else:
                third = raw[end + 1]
                if third < 0x80:
                    zigzag = (second & 0x7F) | (third << 7)
                    if not zigzag & 1 and end + 2 + (zigzag >> 1) == len(raw):
                        return new_value_record(key, raw[1:end], raw[end + 2 :])
    except IndexError:
        pass
    identity, data = decode_value(raw)
    return new_value_record(key, identity, data)


# ---------------------------------------------------------------------------------------------
# keys


def validate_key(key: bytes) -> None:
    """InvalidArgument unless ``key`` is non-empty UTF-8 bytes."""
    if type(key) is not bytes:
        raise InvalidArgument(f"key must be bytes, got {type(key).__name__}: {key!r}")
    if not key:
        raise InvalidArgument("empty key: b''")
    try:
        key.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument(f"key is not valid UTF-8: {key!r}") from None


# ---------------------------------------------------------------------------------------------
# content addresses


def value_record_id(key: bytes, identity: bytes) -> bytes:
    """``h(h(key) || h(identity))`` (raw 32-byte digest)."""
    return _sha256(_sha256(key).digest() + _sha256(identity).digest()).digest()


def file_id(record_ids: Iterable[bytes]) -> str:
    """``h(id1 + ... + idN)`` as lowercase hex: the name of a Graveler file."""
    digest = _sha256()
    for record_id in record_ids:
        digest.update(record_id)
    return digest.hexdigest()


EMPTY_FILE_ID = file_id(())


# ---------------------------------------------------------------------------------------------
# protobuf wire format (just what Entry and RangeData need)

_VARINT = 0
_LEN = 2


def _tag(field: int, wire_type: int) -> bytes:
    return encode_uvarint((field << 3) | wire_type)


def _pb_bytes(field: int, value: bytes) -> bytes:
    return _tag(field, _LEN) + encode_uvarint(len(value)) + value


def _pb_varint(field: int, value: int) -> bytes:
    return _tag(field, _VARINT) + encode_uvarint(value)


def _pb_fields(buf: bytes):
    """Yield ``(field_number, wire_type, value)``; value is int for varints, bytes otherwise."""
    pos = 0
    end = len(buf)
    while pos < end:
        key, pos = decode_uvarint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, pos = decode_uvarint(buf, pos)
        elif wire_type == _LEN:
            length, pos = decode_uvarint(buf, pos)
            if pos + length > end:
                raise CorruptedData("protobuf field truncated")
            value = buf[pos : pos + length]
            pos += length
        elif wire_type == 1:  # fixed64
            value = int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire_type == 5:  # fixed32
            value = int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise CorruptedData(f"unsupported protobuf wire type {wire_type}")
        if pos > end:
            raise CorruptedData("protobuf message truncated")
        yield field, wire_type, value


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _utf8(value, what: str) -> str:
    if not isinstance(value, bytes):
        raise CorruptedData(f"protobuf field {what}: expected bytes")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptedData(f"protobuf field {what}: not UTF-8") from None


def _pb_string(tag: bytes, text: str) -> bytes:
    raw = text.encode("utf-8")
    n = len(raw)
    return tag + (_UVARINTS[n] if n < 16384 else encode_uvarint(n)) + raw


def encode_entry(entry: Entry) -> bytes:
    """Protobuf wire encoding of lakeFS ``catalog.Entry`` (fields in number order, proto3:
    default values omitted, map entries sorted by key so the encoding is deterministic)."""
    parts = []
    if entry.physical_address:
        parts.append(_pb_string(b"\x0a", entry.physical_address))
    mtime = entry.mtime
    if mtime:  # last_modified is always present (lakeFS always sets it), seconds only
        seconds = encode_uvarint(mtime)
        parts.append(b"\x12" + _UVARINTS[len(seconds) + 1] + b"\x08" + seconds)
    else:
        parts.append(b"\x12\x00")
    if entry.size:
        parts.append(b"\x18" + encode_uvarint(entry.size))
    if entry.checksum:
        parts.append(_pb_string(b"\x22", entry.checksum))
    metadata = entry.metadata
    if metadata:
        for name in sorted(metadata):
            value = metadata[name]
            item = (_pb_string(b"\x0a", name) if name else b"") + (_pb_string(b"\x12", value) if value else b"")
            parts.append(b"\x2a" + encode_uvarint(len(item)) + item)
    parts.append(b"\x30\x02" if entry.address_is_full else b"\x30\x01")
    if entry.content_type:
        parts.append(_pb_string(b"\x3a", entry.content_type))
    return b"".join(parts)


def _timestamp_seconds(buf: bytes, seconds: int) -> int:
    """``seconds`` of a protobuf Timestamp (the last one wins), else ``seconds`` unchanged."""
    for field, wire_type, value in _pb_fields(buf):
        if field == 1 and wire_type == _VARINT:
            seconds = _int64(value)
    return seconds


def _metadata_item(buf: bytes) -> tuple[str, str]:
    """``(key, value)`` of one protobuf map<string, string> entry."""
    name = item_value = ""
    for field, wire_type, value in _pb_fields(buf):
        if field == 1 and wire_type == _LEN:
            name = _utf8(value, "metadata key")
        elif field == 2 and wire_type == _LEN:
            item_value = _utf8(value, "metadata value")
    return name, item_value


def _decode_entry_generic(data: bytes) -> Entry:
    """``decode_entry`` through the generic ``_pb_fields``: the reference that ``decode_entry``
    falls back to for anything its fast path does not take, so they share every error."""
    address = ""
    mtime = 0
    size = 0
    etag = ""
    metadata: dict[str, str] = {}
    address_type = ADDRESS_TYPE_BY_PREFIX_DEPRECATED
    content_type = ""
    for field, wire_type, value in _pb_fields(data):
        if field == 1 and wire_type == _LEN:
            address = _utf8(value, "address")
        elif field == 2 and wire_type == _LEN:
            mtime = _timestamp_seconds(value, mtime)
        elif field == 3 and wire_type == _VARINT:
            size = _int64(value)
        elif field == 4 and wire_type == _LEN:
            etag = _utf8(value, "e_tag")
        elif field == 5 and wire_type == _LEN:
            name, item_value = _metadata_item(value)
            metadata[name] = item_value
        elif field == 6 and wire_type == _VARINT:
            address_type = value
        elif field == 7 and wire_type == _LEN:
            content_type = _utf8(value, "content_type")
    return Entry(
        physical_address=address,
        size=size,
        mtime=mtime,
        checksum=etag,
        content_type=content_type,
        metadata=metadata,
        address_is_full=address_type == ADDRESS_TYPE_FULL,
    )


#: Entry's slot descriptors, in field order: ``decode_entry`` sets the fields of a new Entry
#: through them (what the frozen dataclass ``__init__`` does too, through its slower
#: ``object.__setattr__`` calls).  Entry has no ``__post_init__`` to skip (a test checks).
_ENTRY_SLOTS = tuple(Entry.__dict__[name].__set__ for name in Entry.__slots__)
_new_entry = object.__new__


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """``decode_uvarint`` unrolled for varints of up to 5 bytes (mtime seconds, nanos and
    sizes < 32 GiB); longer ones (and errors) go to ``decode_uvarint``."""
    value = data[pos]
    if value < 0x80:
        return value, pos + 1
    byte = data[pos + 1]
    value = (value & 0x7F) | (byte << 7)
    if byte < 0x80:
        return value, pos + 2
    byte = data[pos + 2]
    value = (value & 0x3FFF) | (byte << 14)
    if byte < 0x80:
        return value, pos + 3
    byte = data[pos + 3]
    value = (value & 0x1FFFFF) | (byte << 21)
    if byte < 0x80:
        return value, pos + 4
    byte = data[pos + 4]
    value = (value & 0xFFFFFFF) | (byte << 28)
    if byte < 0x80:
        return value, pos + 5
    return decode_uvarint(data, pos)


# the tags (``field << 3 | wire type``) of the fields decode_entry reads
_ENTRY_TAGS = frozenset((0x0A, 0x12, 0x18, 0x22, 0x2A, 0x30, 0x3A))


class _Unusual(Exception):
    """A shape the fast path of decode_entry leaves to the generic decoder."""


def decode_entry(data: bytes) -> Entry:
    """Decode lakeFS ``catalog.Entry`` protobuf bytes (unknown fields are ignored).

    Hand-inlined because it runs once per entry of every directory listing (through the
    generic ``_pb_fields`` generator it took ~5 us): one loop that dispatches on the one-byte
    tag (``field << 3 | wire type``), reads the length of a string (or the value of an
    integer) right after it, and sets Entry's slots directly instead of calling its ``__init__``.  Whatever the fast path does not
    take - malformed or truncated bytes, bad UTF-8, nested messages in a shape lakeFS does not
    write, an argument that is not ``bytes`` - goes to ``_decode_entry_generic``, so results
    and errors (CorruptedData) are always the generic decoder's."""
    if data.__class__ is not bytes:
        return _decode_entry_generic(data)
    uvarint = _uvarint
    address = etag = content_type = ""
    mtime = size = address_type = 0
    metadata: dict[str, str] = {}
    pos = 0
    end = len(data)
    try:
        while pos < end:
            key = data[pos]
            length = data[pos + 1]  # the length of a LEN field, the value of a VARINT field
            if length < 0x80:
                start = pos + 2
            else:
                length, start = uvarint(data, pos + 1)
            if key == 0x0A:
                pos = start + length  # a field running past the end is caught after the loop
                address = data[start:pos].decode()
            elif key == 0x22:
                pos = start + length
                etag = data[start:pos].decode()
            elif key == 0x3A:
                pos = start + length
                content_type = intern(data[start:pos].decode())  # a few values: one string each
            elif key == 0x18:
                pos = start
                size = length - (1 << 64) if length >= 1 << 63 else length
            elif key == 0x12:  # last_modified: Timestamp {1 seconds, 2 nanos}
                pos = start + length
                i = start
                while i < pos:
                    tag = data[i]
                    value, i = uvarint(data, i + 1)
                    if tag == 0x08:
                        mtime = value - (1 << 64) if value >= 1 << 63 else value
                    elif tag != 0x10:
                        raise _Unusual
                if i != pos:
                    raise _Unusual
            elif key == 0x2A:  # a metadata item: {1 key, 2 value}, each absent if empty
                pos = start + length
                name = item_value = ""
                i = start
                if i < pos and data[i] == 0x0A:
                    n = data[i + 1]
                    if n < 0x80:
                        i += 2
                    else:
                        n, i = uvarint(data, i + 1)
                    name = data[i : i + n].decode()
                    i += n
                if i < pos and data[i] == 0x12:
                    n = data[i + 1]
                    if n < 0x80:
                        i += 2
                    else:
                        n, i = uvarint(data, i + 1)
                    item_value = data[i : i + n].decode()
                    i += n
                if i != pos:
                    raise _Unusual
                metadata[name] = item_value
            elif key == 0x30:
                pos = start
                address_type = length
            else:  # an unknown field (or a tag of more than one byte): skip it
                key, pos = decode_uvarint(data, pos)
                if key in _ENTRY_TAGS:  # a known field's tag in more bytes than needed
                    raise _Unusual
                wire_type = key & 7
                if wire_type == _VARINT:
                    pos = decode_uvarint(data, pos)[1]
                elif wire_type == _LEN:
                    length, pos = decode_uvarint(data, pos)
                    pos += length
                elif wire_type == 1:  # fixed64
                    pos += 8
                elif wire_type == 5:  # fixed32
                    pos += 4
                else:
                    raise _Unusual
    except (IndexError, UnicodeDecodeError, CorruptedData, _Unusual):
        pass
    else:
        if pos == end:  # else the last field ran past the end
            entry = _new_entry(Entry)
            (set_address, set_size, set_mtime, set_checksum, set_content_type, set_metadata,
             set_address_is_full) = _ENTRY_SLOTS
            set_address(entry, address)
            set_size(entry, size)
            set_mtime(entry, mtime)
            set_checksum(entry, etag)
            set_content_type(entry, content_type)
            set_metadata(entry, metadata)
            set_address_is_full(entry, address_type == ADDRESS_TYPE_FULL)
            return entry
    return _decode_entry_generic(data)  # the result, or the error (outside the except block)


# ---------------------------------------------------------------------------------------------
# entries <-> records


def entry_identity_reference(entry: Entry) -> bytes:
    """``entry_identity`` through ``AddressWriter``, value by value, as lakeFS's
    ``catalog.EntryToValue`` writes it.  The reference: a test holds ``entry_identity`` equal
    to it, and ``entry_identity`` falls back to it for anything it does not take, so the two
    share every error."""
    return (
        AddressWriter()
        .int64(entry.size)
        .string(entry.checksum)
        .string_map(entry.metadata)
        .string_opt(entry.content_type)
        .identity()
    )


_SIZE_AND_CHECKSUM_LENGTH = struct.Struct(">2sq3sq")  # int64 size, then a string's header
_STRING_HEADER = struct.Struct(">3sq")
_INT64_VALUE = struct.Struct(">q")
_INT64_PREFIX = bytes((ident.TYPE_INT64, 8))
_STRING_PREFIX = bytes((ident.TYPE_STRING,)) + _INT64_PREFIX
_MAP_PREFIX = bytes((ident.TYPE_STRING_MAP,)) + _INT64_PREFIX
_EMPTY_MAP = _MAP_PREFIX + bytes(8)


def entry_identity(entry: Entry) -> bytes:
    """The identity of an object's range record, as lakeFS computes it (``catalog``
    ``EntryToValue``): the SHA-256 (32 raw bytes) of the ``lakefuse.graveler.ident`` stream of
    the size (int64), the checksum (lakeFS's ETag, string), the user metadata (string map) and
    the content type (string), the content type only if not empty.  The physical address and
    the mtime are not part of it, so uploading identical bytes again is not a change.

    Hand-inlined (one ``struct`` call for size and checksum header, one ``sha256`` call) because
    it runs once per record written; anything unusual (a size outside int64, text that is not
    valid Unicode, a field of the wrong type) goes to ``entry_identity_reference``."""
    try:
        checksum = entry.checksum.encode()
        head = _SIZE_AND_CHECKSUM_LENGTH.pack(_INT64_PREFIX, entry.size, _STRING_PREFIX, len(checksum))
        metadata = entry.metadata
        content_type = entry.content_type
        if not metadata:
            if content_type:
                raw = content_type.encode()
                return _sha256(b"".join((
                    head, checksum, _EMPTY_MAP, _STRING_HEADER.pack(_STRING_PREFIX, len(raw)), raw
                ))).digest()
            return _sha256(head + checksum + _EMPTY_MAP).digest()
        parts = [head, checksum, _MAP_PREFIX, _INT64_VALUE.pack(len(metadata))]
        append = parts.append
        string_header = _STRING_HEADER.pack
        for name in sorted(metadata):
            raw_name = name.encode()
            raw_value = metadata[name].encode()
            append(string_header(_STRING_PREFIX, len(raw_name)))
            append(raw_name)
            append(string_header(_STRING_PREFIX, len(raw_value)))
            append(raw_value)
        if content_type:
            raw = content_type.encode()
            append(string_header(_STRING_PREFIX, len(raw)))
            append(raw)
        return _sha256(b"".join(parts)).digest()
    except (struct.error, UnicodeEncodeError, AttributeError, TypeError):
        return entry_identity_reference(entry)


def entry_to_record(key: bytes, entry: Entry) -> ValueRecord:
    """The range record of an object: identity = ``entry_identity``, value = protobuf Entry."""
    validate_key(key)
    return ValueRecord(key, entry_identity(entry), encode_entry(entry))


def record_to_entry(record: ValueRecord) -> Entry:
    """Decode the Entry of a range record (lookups return records; decode only when needed)."""
    return decode_entry(record.value)


# ---------------------------------------------------------------------------------------------
# metarange records


@dataclass(frozen=True, slots=True)
class RangeData:
    min_key: bytes
    max_key: bytes
    estimated_size: int
    count: int


def encode_range_data(info: RangeInfo) -> bytes:
    """Protobuf ``RangeData`` (min_key=1 bytes, max_key=2 bytes, estimated_size=3 uint64,
    count=4 uint64)."""
    parts = []
    if info.min_key:
        parts.append(_pb_bytes(1, info.min_key))
    if info.max_key:
        parts.append(_pb_bytes(2, info.max_key))
    if info.estimated_size:
        parts.append(_pb_varint(3, info.estimated_size))
    if info.count:
        parts.append(_pb_varint(4, info.count))
    return b"".join(parts)


def decode_range_data(data: bytes) -> RangeData:
    min_key = max_key = b""
    estimated_size = count = 0
    for field, wire_type, value in _pb_fields(data):
        if field == 1 and wire_type == _LEN:
            min_key = value
        elif field == 2 and wire_type == _LEN:
            max_key = value
        elif field == 3 and wire_type == _VARINT:
            estimated_size = value
        elif field == 4 and wire_type == _VARINT:
            count = value
    return RangeData(min_key, max_key, estimated_size, count)


def range_info_to_value(info: RangeInfo) -> bytes:
    """The on-disk value of the metarange record of a range (its key is ``info.max_key``)."""
    return encode_value(info.id.encode("ascii"), encode_range_data(info))


def value_to_range_info(key: bytes, raw: bytes) -> RangeInfo:
    identity, data = decode_value(raw)
    try:
        range_id = identity.decode("ascii")
    except UnicodeDecodeError:
        raise CorruptedData(f"metarange record {key!r}: range ID is not ASCII hex") from None
    decoded = decode_range_data(data)
    if decoded.max_key != key:
        raise CorruptedData(f"metarange record {key!r}: max_key {decoded.max_key!r} differs from its key")
    return RangeInfo(
        id=RangeID(range_id),
        min_key=decoded.min_key,
        max_key=decoded.max_key,
        count=decoded.count,
        estimated_size=decoded.estimated_size,
    )
