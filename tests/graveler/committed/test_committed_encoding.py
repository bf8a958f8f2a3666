"""Encodings and identities of Graveler records, checked against values computed by hand."""

from __future__ import annotations

import hashlib

import pytest

from lakefuse.errors import CorruptedData, InvalidArgument
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


def test_entry_identity_by_hand():
    entry = Entry("data/1", 5, 100, "abc", "text/plain", {"y": "2", "x": "1"})

    def field(b: bytes) -> bytes:
        return len(b).to_bytes(8, "big") + b

    canonical = (
        b"lakefuse.entry.v1"
        + field(b"abc")
        + (5).to_bytes(8, "big")
        + field(b"text/plain")
        + (2).to_bytes(8, "big")
        + field(b"x") + field(b"1")
        + field(b"y") + field(b"2")
    )
    assert entry_identity(entry) == hashlib.sha256(canonical).digest()
    assert len(entry_identity(entry)) == 32


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
