"""Encodings and identities of Graveler records, checked against values computed by hand."""

from __future__ import annotations

import dataclasses
import hashlib
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakefuse.errors import CorruptedData, InvalidArgument
from lakefuse.graveler.committed import encoding
from lakefuse.graveler.committed.encoding import (
    EMPTY_FILE_ID,
    decode_entry,
    decode_range_data,
    decode_svarint,
    decode_value,
    encode_entry,
    encode_range_data,
    encode_svarint,
    encode_value,
    entry_identity,
    entry_to_record,
    file_id,
    range_info_to_value,
    record_to_entry,
    validate_key,
    value_record_id,
    value_to_range_info,
)
from lakefuse.graveler.model import Entry, RangeInfo


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# -- varints and values --------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, encoded",
    [(0, b"\x00"), (1, b"\x02"), (-1, b"\x01"), (32, b"\x40"), (63, b"\x7e"), (64, b"\x80\x01"), (86, b"\xac\x01"),
     (-65, b"\x81\x01"), (2**40, b"\x80\x80\x80\x80\x80\x40")],
)
def test_signed_varint_is_gos_putvarint(value, encoded):
    assert encode_svarint(value) == encoded
    assert decode_svarint(encoded, 0) == (value, len(encoded))


def test_value_is_length_prefixed_identity_then_data():
    assert encode_value(b"id", b"data") == b"\x04id\x08data"
    long_identity = b"i" * 64
    raw = encode_value(long_identity, b"")
    assert raw == b"\x80\x01" + long_identity + b"\x00"
    assert decode_value(raw) == (long_identity, b"")
    assert decode_value(b"\x04id\x08data") == (b"id", b"data")


@pytest.mark.parametrize("raw", [b"", b"\x04i", b"\x04id", b"\x04id\x08dat", b"\x04id\x08datax", b"\x01", b"\xff\xff"])
def test_malformed_value_is_corrupted_data(raw):
    with pytest.raises(CorruptedData):
        decode_value(raw)


# -- content addresses ---------------------------------------------------------------------


def test_value_record_id_by_hand():
    key, identity = b"tables/a.parquet", b"\x01" * 32
    by_hand = hashlib.sha256(hashlib.sha256(key).digest() + hashlib.sha256(identity).digest()).digest()
    assert value_record_id(key, identity) == by_hand
    # written out once, so a change of the formula cannot go unnoticed
    assert value_record_id(b"a", b"x").hex() == hashlib.sha256(
        bytes.fromhex("ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb")
        + bytes.fromhex("2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881")
    ).hexdigest()


def test_file_id_by_hand():
    ids = [value_record_id(b"a", b"1"), value_record_id(b"b", b"2")]
    assert file_id(ids) == hashlib.sha256(ids[0] + ids[1]).hexdigest()
    assert file_id(iter(ids)) == file_id(ids)
    assert EMPTY_FILE_ID == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


# -- Entry protobuf ------------------------------------------------------------------------


def test_entry_protobuf_bytes_by_hand():
    entry = Entry(
        physical_address="data/ab",
        size=300,
        mtime=1700000000,
        checksum="e1",
        content_type="text/plain",
        metadata={"b": "2", "a": "1"},
        address_is_full=False,
    )
    expected = (
        b"\x0a\x07data/ab"  # 1 address
        + b"\x12\x06\x08\x80\xe2\xcf\xaa\x06"  # 2 last_modified {seconds}
        + b"\x18\xac\x02"  # 3 size
        + b"\x22\x02e1"  # 4 e_tag
        + b"\x2a\x06\x0a\x01a\x12\x011"  # 5 metadata a=1 (sorted)
        + b"\x2a\x06\x0a\x01b\x12\x012"  # 5 metadata b=2
        + b"\x30\x01"  # 6 address_type RELATIVE
        + b"\x3a\x0atext/plain"  # 7 content_type
    )
    assert encode_entry(entry) == expected
    assert decode_entry(expected) == entry


def test_entry_round_trip_full_address_and_empty_fields():
    entry = Entry("s3://bucket/x", 0, 0, "", "", {}, True)
    assert decode_entry(encode_entry(entry)) == entry


def test_entry_decoder_ignores_unknown_fields_and_nanos():
    data = encode_entry(Entry("a", 1, 5, "c")) + b"\x40\x07" + b"\x4a\x03xyz"
    data = data.replace(b"\x12\x02\x08\x05", b"\x12\x04\x08\x05\x10\x09")
    assert decode_entry(data) == Entry("a", 1, 5, "c")


def test_record_to_entry_round_trip():
    entry = Entry("data/1", 12, 1700000000, "abc", "text/csv", {"k": "v"})
    record = entry_to_record(b"dir/file.csv", entry)
    assert record.key == b"dir/file.csv"
    assert record_to_entry(record) == entry


# -- entry identity ------------------------------------------------------------------------


def _int64(value: int) -> bytes:
    return b"\x02\x08" + value.to_bytes(8, "big", signed=True)


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"\x01" + _int64(len(raw)) + raw


def test_entry_identity_is_lakefs_stream_spelled_out():
    """lakeFS's ``catalog.EntryToValue``: int64 size, string ETag, string map of the user
    metadata (keys sorted), then the content type as a string when it is not empty."""
    entry = Entry("data/1", 5, 100, "abc", "text/plain", {"y": "2", "x": "1"})
    stream = (
        _int64(5)
        + _string("abc")
        + b"\x04" + _int64(2) + _string("x") + _string("1") + _string("y") + _string("2")
        + _string("text/plain")
    )
    assert entry_identity(entry) == hashlib.sha256(stream).digest()
    assert len(entry_identity(entry)) == 32
    # no content type: nothing is written for it (lakeFS's MarshalStringOpt)
    bare = Entry("data/1", 5, 100, "abc", "", {})
    assert entry_identity(bare) == hashlib.sha256(_int64(5) + _string("abc") + b"\x04" + _int64(0)).digest()


def test_entry_identity_of_lakefs_range_records_by_value():
    """The identities lakeFS stored in its range.sst (tests/data/lakefs_files), computed from
    the entries' size and ETag alone (they have no metadata and no content type)."""
    assert entry_identity(Entry("b0c968736d8f42a2b1c6284835f08226", 11, 1628163584, "664c688b4ea9c56730daacfc3d70aeed", "")).hex() == (
        "56fef3921aa6e7fd62bbe23b2f69db3f9049a54b6f2c7bd886b7eb1a6ca3ab3e"
    )
    assert entry_identity(Entry("fdf87fcf9ec849f98514ddb7e041ad56", 4, 1628163573, "eb4585ad9fe0426781ed7c49252f8225", "")).hex() == (
        "6039b184d29379328b5364bb041b9926b4b388dbc326b7dd57f70cefd77b961e"
    )


@pytest.mark.parametrize("entry", [
    Entry("a", 1 << 63, 0, "c", "t"),
    Entry("a", -(1 << 63) - 1, 0, "c", "t"),
    Entry("a", 1, 0, "bad \udcff", "t"),
    Entry("a", 1, 0, "c", "t", {"k": "bad \udcff"}),
    Entry("a", 1, 0, "c", "bad \udcff"),
])
def test_entry_identity_rejects_what_lakefs_could_not_encode(entry):
    with pytest.raises(InvalidArgument):
        entry_identity(entry)
    with pytest.raises(InvalidArgument):
        entry_to_record(b"key", entry)


def test_entry_identity_ignores_address_and_mtime_only():
    base = Entry("data/1", 5, 100, "abc", "text/plain", {"x": "1"})
    same = [
        Entry("data/OTHER", 5, 999, "abc", "text/plain", {"x": "1"}),
        Entry("s3://elsewhere/1", 5, 100, "abc", "text/plain", {"x": "1"}, address_is_full=True),
    ]
    different = [
        Entry("data/1", 6, 100, "abc", "text/plain", {"x": "1"}),
        Entry("data/1", 5, 100, "abd", "text/plain", {"x": "1"}),
        Entry("data/1", 5, 100, "abc", "text/csv", {"x": "1"}),
        Entry("data/1", 5, 100, "abc", "text/plain", {"x": "2"}),
        Entry("data/1", 5, 100, "abc", "text/plain", {}),
        Entry("data/1", 5, 100, "abc", "text/plain", {"x": "1", "y": ""}),
        Entry("data/1", 5, 100, "abc", "", {"x": "1"}),
    ]
    for entry in same:
        assert entry_identity(entry) == entry_identity(base)
    identities = {entry_identity(e) for e in different} | {entry_identity(base)}
    assert len(identities) == len(different) + 1
    # metadata order never matters
    assert entry_identity(Entry("a", 1, 1, "c", "t", {"a": "1", "b": "2"})) == entry_identity(
        Entry("a", 1, 1, "c", "t", {"b": "2", "a": "1"})
    )


# -- metarange records ---------------------------------------------------------------------


def test_range_data_matches_lakefs_bytes():
    # the data of the one record of lakeFS's metarange.sst, byte for byte
    lakefs = b"\n\x08a/b/c/no\x12\ta/b/c/yes\x18\xa6\t \x02"
    decoded = decode_range_data(lakefs)
    assert (decoded.min_key, decoded.max_key, decoded.estimated_size, decoded.count) == (
        b"a/b/c/no", b"a/b/c/yes", 1190, 2,
    )
    info = RangeInfo("a" * 64, b"a/b/c/no", b"a/b/c/yes", 2, 1190)
    assert encode_range_data(info) == lakefs
    raw = range_info_to_value(info)
    assert raw == b"\x80\x01" + b"a" * 64 + encode_svarint(len(lakefs)) + lakefs
    assert value_to_range_info(b"a/b/c/yes", raw) == info
    with pytest.raises(CorruptedData):
        value_to_range_info(b"a/b/c/zzz", raw)


# -- keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key, shown", [(b"", "b''"), (b"bad\xff\xfekey", "b'bad\\xff\\xfekey'")])
def test_bad_keys_are_invalid_argument_naming_the_key(key, shown):
    with pytest.raises(InvalidArgument) as info:
        validate_key(key)
    assert shown in str(info.value)
    with pytest.raises(InvalidArgument):
        entry_to_record(key, Entry("a", 1, 1, "c"))


def test_non_bytes_key_is_invalid_argument():
    with pytest.raises(InvalidArgument, match="must be bytes"):
        validate_key("text")  # type: ignore[arg-type]
    validate_key("ünïcode/ok".encode())


# -- decode_entry: the hand-inlined decoder against the generic one --------------------------
#
# ``reference_decode_entry`` is the generic field-by-field protobuf walk that decode_entry falls
# back to (decode_entry as it was before it was hand-inlined): whatever the fast path returns or
# raises must be what the generic walk returns or raises.

reference_decode_entry = encoding._decode_entry_generic


def outcome(decode, data) -> tuple:
    """What ``decode(data)`` does, comparable: every field (metadata in order) or the error."""
    try:
        e = decode(data)
    except Exception as error:  # noqa: BLE001 - any difference must show
        return ("error", type(error), str(error))
    return ("ok", type(e), e.physical_address, type(e.size), e.size, type(e.mtime), e.mtime, e.checksum,
            e.content_type, type(e.metadata), list(e.metadata.items()), e.address_is_full)


def assert_same_as_reference(data) -> None:
    assert outcome(decode_entry, data) == outcome(reference_decode_entry, data), data


def _uvarint(value: int, padding: int = 0) -> bytes:
    """Protobuf varint (negative: 64-bit two's complement), with ``padding`` redundant bytes."""
    value &= (1 << 64) - 1 if value < 0 else -1
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    if padding:  # same value in more bytes: ... 0x80 | last, 0x80, ..., 0x00
        out[-1] |= 0x80
        out += b"\x80" * (padding - 1) + b"\x00"
    return bytes(out)


_texts = st.text(max_size=12) | st.text(max_size=300) | st.sampled_from(["", "ü", "日本語", "🙂" * 40, "a" * 127, "b" * 128])
_int64s = st.integers(-(2**63), 2**63 - 1) | st.sampled_from(
    [0, 1, 127, 128, 2**14 - 1, 2**14, 2**21, 2**28 - 1, 2**28, 2**35 - 1, 2**35, 2**63 - 1, -1, -(2**63)]
)
entries = st.builds(
    Entry,
    physical_address=_texts,
    size=_int64s,
    mtime=_int64s | st.integers(0, 2**34),
    checksum=_texts,
    content_type=_texts,
    metadata=st.dictionaries(_texts, _texts, max_size=4),
    address_is_full=st.booleans(),
)


@st.composite
def _strings(draw) -> bytes:
    """The payload of a string field: UTF-8, now and then not."""
    if draw(st.integers(0, 15)) == 0:
        return draw(st.binary(max_size=6))
    return draw(_texts).encode("utf-8")


@st.composite
def _fields(draw, known: dict) -> bytes:
    """One protobuf field: a known one (``known``: tag -> payload strategy) or an unknown one of
    any wire type, the tag sometimes in more bytes than needed."""
    padding = draw(st.sampled_from([0] * 12 + [1, 2]))
    kind = draw(st.integers(0, 3))
    if kind and known:
        key = draw(st.sampled_from(sorted(known)))
        payload = draw(known[key])
        if key & 7 == 2:
            return _uvarint(key, padding) + _uvarint(len(payload), draw(st.sampled_from([0] * 8 + [1]))) + payload
        return _uvarint(key, padding) + payload
    field = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 2047, 2**29 - 1]))
    wire_type = draw(st.sampled_from([0, 1, 2, 5, 0, 1, 2, 5, 3, 4, 6, 7]))
    tag = _uvarint(field << 3 | wire_type, padding)
    if wire_type == 0:
        return tag + _uvarint(draw(st.integers(0, 2**64 - 1)))
    if wire_type == 1:
        return tag + draw(st.binary(min_size=8, max_size=8))
    if wire_type == 5:
        return tag + draw(st.binary(min_size=4, max_size=4))
    if wire_type == 2:
        payload = draw(st.binary(max_size=20))
        return tag + _uvarint(len(payload)) + payload
    return tag + draw(st.binary(max_size=3))  # groups and wire types 6, 7: unsupported


def _message(known: dict, max_size: int):
    return st.lists(_fields(known), max_size=max_size).map(b"".join)


_varints = st.integers(-(2**63), 2**64 - 1).map(_uvarint)
_timestamps = _message({0x08: _varints, 0x10: st.integers(0, 999_999_999).map(_uvarint)}, 3)
_metadata_items = _message({0x0A: _strings(), 0x12: _strings()}, 3)
entry_messages = _message(
    {0x0A: _strings(), 0x12: _timestamps, 0x18: _varints, 0x22: _strings(), 0x2A: _metadata_items,
     0x30: st.integers(0, 3).map(_uvarint) | _varints, 0x3A: _strings()},
    12,
)


def _split_fields(data: bytes) -> list[bytes]:
    """The raw bytes of each top-level field of a valid message."""
    chunks = []
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = encoding.decode_uvarint(data, pos)
        assert key & 7 in (0, 2)
        value, pos = encoding.decode_uvarint(data, pos)
        if key & 7 == 2:
            pos += value
        chunks.append(data[start:pos])
    return chunks


@settings(max_examples=300, deadline=None)
@given(entry=entries)
def test_decode_entry_round_trips_by_its_fast_path(entry):
    # encode_entry's output (and lakeFS's, below) never needs the generic decoder
    with mock.patch.object(encoding, "_decode_entry_generic", side_effect=AssertionError("fast path not taken")):
        decoded = decode_entry(encode_entry(entry))
    assert decoded == entry
    assert type(decoded) is Entry
    assert list(decoded.metadata.items()) == sorted(entry.metadata.items())


@settings(max_examples=100, deadline=None)
@given(entry=entries, data=st.data())
def test_decode_entry_any_field_order(entry, data):
    chunks = _split_fields(encode_entry(entry))
    shuffled = b"".join(data.draw(st.permutations(chunks)))
    assert decode_entry(shuffled) == entry
    assert_same_as_reference(shuffled)


def test_decode_entry_fast_path_takes_lakefs_bytes():
    lakefs = (  # a record of tests/data/lakefs_files/range.sst: Timestamp with nanos
        b'\n b0c968736d8f42a2b1c6284835f08226\x12\x0c\x08\x80\x9c\xaf\x88\x06\x10\xcb\x94\xd3\xe0\x01'
        b'\x18\x0b" 664c688b4ea9c56730daacfc3d70aeed0\x01'
    )
    with mock.patch.object(encoding, "_decode_entry_generic", side_effect=AssertionError("fast path not taken")):
        decoded = decode_entry(lakefs)
    assert decoded == Entry("b0c968736d8f42a2b1c6284835f08226", 11, 1628163584, "664c688b4ea9c56730daacfc3d70aeed", "")
    assert_same_as_reference(lakefs)


def test_decode_entry_fast_path_skips_unknown_fields():
    entry = Entry("data/a", 5, 1700000000, "c", "t", {"k": "v"})
    unknown = (
        b"\x40\x96\x01"  # 8 varint
        + b"\x49" + b"\x01" * 8  # 9 fixed64
        + b"\x52\x03xyz"  # 10 bytes
        + b"\x5d\x01\x02\x03\x04"  # 11 fixed32
        + b"\xa2\x06\x01z"  # 100 bytes: a tag of two bytes
    )
    data = unknown[:3] + encode_entry(entry) + unknown[3:]
    with mock.patch.object(encoding, "_decode_entry_generic", side_effect=AssertionError("fast path not taken")):
        assert decode_entry(data) == entry
    assert_same_as_reference(data)


@settings(max_examples=500, deadline=None)
@given(data=entry_messages)
def test_decode_entry_agrees_with_reference_on_random_messages(data):
    # unknown fields of every wire type, repeated and shuffled fields, odd timestamps and
    # metadata items, redundant varint bytes, bad UTF-8, unsupported wire types
    assert_same_as_reference(data)


@settings(max_examples=60, deadline=None)
@given(data=entry_messages | entries.map(encode_entry))
def test_decode_entry_every_truncation_is_the_references(data):
    for end in range(len(data)):
        assert_same_as_reference(data[:end])


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=40))
def test_decode_entry_agrees_with_reference_on_any_bytes(data):
    assert_same_as_reference(data)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x12\x00",  # empty Timestamp: mtime 0
        b"\x12\x02\x08\x05\x12\x00",  # an empty Timestamp after one does not reset mtime
        b"\x12\x02\x08\x05\x12\x02\x08\x07",  # last wins
        b"\x12\x04\x10\x01\x08\x05",  # nanos before seconds
        b"\x12\x02\x18\x01",  # an unknown Timestamp field
        b"\x12\x01\x08",  # a truncated Timestamp
        b"\x12\x02\x08\x80\x00\x00",  # a Timestamp whose varint runs out of it
        b"\x2a\x00",  # an empty metadata item: "" -> ""
        b"\x2a\x06\x12\x01v\x0a\x01k",  # value before key
        b"\x2a\x03\x0a\x01k\x2a\x03\x0a\x01k",  # the same key twice
        b"\x2a\x02\x0a\x05kkkkk",  # a metadata key running out of its item
        b"\x0a\x02\xff\xfe",  # not UTF-8
        b"\x0a\x05abc",  # a truncated string
        b"\x18" + b"\xff" * 9 + b"\x01",  # size -1
        b"\x18" + b"\xff" * 9 + b"\x7f",  # a 10-byte varint beyond 64 bits
        b"\x18" + b"\xff" * 10 + b"\x01",  # a varint of 11 bytes
        b"\x30\x02",  # address_type FULL
        b"\x30\x82\x00",  # ... in a redundant byte
        b"\x8a\x00\x01a",  # field 1 with its tag in two bytes
        b"\x09" + b"\x80" * 8 + b"\x0a\x01a",  # an unknown fixed64 field of high bytes
        b"\x0d\x01\x02\x03",  # a truncated fixed32
        b"\x0b\x0c",  # a group: unsupported
        b"\x0a",  # a tag alone
    ],
)
def test_decode_entry_edge_cases_match_reference(data):
    assert_same_as_reference(data)
    assert_same_as_reference(bytearray(data))
    assert_same_as_reference(memoryview(data))


def test_decoded_entry_is_a_plain_frozen_entry():
    # decode_entry builds Entry without its __init__: nothing may be skipped
    assert not hasattr(Entry, "__post_init__")
    entry = decode_entry(encode_entry(Entry("a", 1, 2, "c", "t", {"k": "v"}, True)))
    assert type(entry) is Entry
    assert entry == Entry("a", 1, 2, "c", "t", {"k": "v"}, True)
    assert hash(entry) == hash(Entry("a", 1, 2, "c", "t", {"k": "v"}, True))
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.size = 5  # type: ignore[misc]


@settings(max_examples=400, deadline=None)
@given(entries)
def test_entry_identity_equals_the_value_by_value_reference(entry):
    """The hand-inlined ``entry_identity`` is ``AddressWriter`` over size, ETag, metadata and
    optional content type, for any entry (sizes over the whole int64 range, any metadata)."""
    assert entry_identity(entry) == encoding.entry_identity_reference(entry)
