"""lakeFS's typed identity stream (``lakefuse.graveler.ident``), byte by byte.

The expected streams are spelled out by hand from lakeFS's ``pkg/ident``: a type byte, an
int64 written as ``02 08`` and 8 big-endian bytes (also where it is a length), and so on."""

from __future__ import annotations

import hashlib

import pytest

from lakefuse.errors import InvalidArgument
from lakefuse.graveler.ident import AddressWriter, encode_int64


def int64(value: int) -> bytes:
    return b"\x02\x08" + value.to_bytes(8, "big", signed=True)


def string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return b"\x01" + int64(len(raw)) + raw


def digest(stream: bytes) -> bytes:
    return hashlib.sha256(stream).digest()


@pytest.mark.parametrize("value, encoded", [
    (0, "0208" "0000000000000000"),
    (1, "0208" "0000000000000001"),
    (-1, "0208" "ffffffffffffffff"),
    (1 << 62, "0208" "4000000000000000"),
    ((1 << 63) - 1, "0208" "7fffffffffffffff"),
    (-(1 << 63), "0208" "8000000000000000"),
])
def test_int64_is_type_byte_width_byte_and_big_endian_twos_complement(value, encoded):
    assert encode_int64(value).hex() == encoded
    assert AddressWriter().int64(value).identity() == digest(bytes.fromhex(encoded))


@pytest.mark.parametrize("value", [1 << 63, -(1 << 63) - 1, 1.0, "1", True, None])
def test_int64_rejects_what_is_not_a_64_bit_integer(value):
    with pytest.raises(InvalidArgument):
        AddressWriter().int64(value)


def test_string_is_type_1_then_utf8_length_then_bytes():
    assert AddressWriter().string("").identity() == digest(b"\x01" + int64(0))
    assert AddressWriter().string("héllo").identity() == digest(b"\x01" + int64(6) + "héllo".encode())


def test_string_opt_writes_nothing_for_the_empty_string():
    assert AddressWriter().string("a").string_opt("").identity() == AddressWriter().string("a").identity()
    assert AddressWriter().string("a").string_opt("b").identity() == digest(string("a") + string("b"))


def test_bytes_and_embedded_identity():
    identity = bytes(range(32))
    assert AddressWriter().byte_string(b"xy").identity() == digest(b"\x00" + int64(2) + b"xy")
    assert AddressWriter().embedded(identity).identity() == digest(b"\x05" + b"\x00" + int64(32) + identity)


def test_string_slice_keeps_order():
    assert AddressWriter().string_slice(["b", "a"]).identity() == digest(b"\x03" + int64(2) + string("b") + string("a"))
    assert AddressWriter().string_slice([]).identity() == digest(b"\x03" + int64(0))
    assert AddressWriter().string_slice(["a", "b"]).identity() != AddressWriter().string_slice(["b", "a"]).identity()


def test_string_map_sorts_keys_by_their_utf8_bytes():
    mapping = {"z": "1", "a": "2", "é": "3", "Z": "4", "\U0001f600": "5", "\uffff": "6"}
    expected_order = sorted(mapping, key=lambda key: key.encode("utf-8"))
    assert expected_order == ["Z", "a", "z", "é", "\uffff", "\U0001f600"]
    stream = b"\x04" + int64(len(mapping)) + b"".join(string(k) + string(mapping[k]) for k in expected_order)
    assert AddressWriter().string_map(mapping).identity() == digest(stream)
    assert AddressWriter().string_map({}).identity() == digest(b"\x04" + int64(0))


def test_values_chain_into_one_stream_and_hex_is_the_same_digest():
    writer = AddressWriter().string("commit:v1").int64(7).string_map({"k": "v"})
    stream = string("commit:v1") + int64(7) + b"\x04" + int64(1) + string("k") + string("v")
    assert writer.identity() == digest(stream)
    assert writer.hex_identity() == digest(stream).hex()


@pytest.mark.parametrize("value", [b"bytes", 5, None, "\udcff"])
def test_string_rejects_non_text(value):
    with pytest.raises(InvalidArgument):
        AddressWriter().string(value)
