"""Invalid input to write_sstable (InvalidArgument) and invalid files (CorruptedData)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakefuse.errors import CorruptedData, InvalidArgument
from lakefuse.graveler.sstable import SSTableReader, write_sstable
from lakefuse.graveler.sstable import checksum
from lakefuse.graveler.sstable.format import decode_footer
from sstable_helpers import random_items


# ----------------------------------------------------------------------------- writing
@pytest.mark.parametrize(
    "items, offending, kind",
    [
        ([(b"b", b"1"), (b"a", b"2")], "b'a'", "out-of-order"),
        ([(b"a", b"1"), (b"c", b"2"), (b"b", b"3")], "b'b'", "out-of-order"),
        ([(b"a", b"1"), (b"a", b"2")], "b'a'", "duplicate"),
        ([(b"a", b"1"), (b"ab", b"2"), (b"ab", b"3")], "b'ab'", "duplicate"),
        ([(b"", b"1")], "b''", "empty"),
        ([(b"a", b"1"), (b"", b"2")], "b''", "empty"),
    ],
)
def test_bad_keys_raise_invalid_argument_naming_the_key(tmp_path, items, offending, kind):
    path = tmp_path / "bad.sst"
    with pytest.raises(InvalidArgument) as info:
        write_sstable(str(path), items)
    assert offending in info.value.message
    assert kind in info.value.message
    assert not path.exists()  # no half-written table left behind


def test_unsorted_key_late_in_a_big_table_removes_partial_file(tmp_path):
    items = random_items(5000)
    items[4000], items[4001] = items[4001], items[4000]
    path = tmp_path / "late.sst"
    with pytest.raises(InvalidArgument, match="item 4001"):
        write_sstable(str(path), items)
    assert not path.exists()


@pytest.mark.parametrize("item", [("a", b"1"), (b"a", "1"), (b"a", None), (b"a",), 42])
def test_non_bytes_items_raise_invalid_argument(tmp_path, item):
    with pytest.raises(InvalidArgument):
        write_sstable(str(tmp_path / "t.sst"), [item])


@pytest.mark.parametrize(
    "properties",
    [{"rocksdb.num.entries": b"1"}, {"": b"x"}, {"type": "ranges"}, {b"type": b"ranges"}],
)
def test_bad_properties_raise_invalid_argument(tmp_path, properties):
    with pytest.raises(InvalidArgument):
        write_sstable(str(tmp_path / "t.sst"), [(b"a", b"1")], properties)


def test_bad_compression_name(tmp_path):
    with pytest.raises(InvalidArgument, match="compression"):
        write_sstable(str(tmp_path / "t.sst"), [(b"a", b"1")], compression="brotli")


# ----------------------------------------------------------------------------- reading
@pytest.fixture(scope="module")
def good_table(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("good") / "good.sst"
    write_sstable(str(path), random_items(400, seed=2), {"type": b"ranges"},
                  compression="none", block_size=1024)
    return path.read_bytes()


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "too short"),
        (b"not an sstable", "too short"),
        (b"\x00" * 4096, "bad magic"),
        (bytes(range(256)) * 10, "bad magic"),
    ],
)
def test_garbage_is_corrupted_data(data, reason):
    with pytest.raises(CorruptedData, match=reason):
        SSTableReader.from_bytes(data)


@pytest.mark.parametrize("cut", [1, 8, 52, 53, 54, 100, 1000])
def test_truncated_file_is_corrupted_data(good_table, cut):
    with pytest.raises(CorruptedData):
        SSTableReader.from_bytes(good_table[:-cut]).items()


def test_truncated_head_is_corrupted_data(good_table):
    with pytest.raises(CorruptedData):
        SSTableReader.from_bytes(good_table[1000:]).items()


def test_open_names_the_path(tmp_path):
    path = tmp_path / "garbage.sst"
    path.write_bytes(b"x" * 100)
    with pytest.raises(CorruptedData) as info:
        SSTableReader.open(str(path))
    assert str(path) in info.value.message
    assert "\n" not in info.value.message


def test_unsupported_format_version_is_corrupted_data(good_table):
    patched = good_table[:-12] + struct.pack("<I", 6) + good_table[-8:]
    with pytest.raises(CorruptedData, match="format_version 6"):
        SSTableReader.from_bytes(patched)


def _with_block_type(data: bytes, offset: int, size: int, kind: int) -> bytes:
    """Set the compression type of a block and re-seal its checksum."""
    typed = data[offset : offset + size] + bytes([kind])
    trailer = bytes([kind]) + struct.pack("<I", checksum.block_checksum(typed))
    return data[: offset + size] + trailer + data[offset + size + 5 :]


def test_unknown_compression_is_corrupted_data(good_table):
    reader = SSTableReader.from_bytes(good_table)
    offset, size = reader._index_handles[0]
    patched = _with_block_type(good_table, offset, size, 0x42)
    with pytest.raises(CorruptedData, match="compression type 66"):
        SSTableReader.from_bytes(patched).items()


def test_undecodable_compressed_block_is_corrupted_data(good_table):
    reader = SSTableReader.from_bytes(good_table)
    offset, size = reader._index_handles[0]
    patched = _with_block_type(good_table, offset, size, 1)  # claims Snappy, holds raw bytes
    with pytest.raises(CorruptedData):
        SSTableReader.from_bytes(patched).items()


def test_bad_block_checksum_is_corrupted_data(good_table):
    if not checksum.can_verify_fast():
        pytest.skip("google-crc32c (C) is not installed: block checksums are not verified")
    footer = decode_footer(good_table)
    assert footer.checksum_type == 1  # CRC32C
    flipped = bytearray(good_table)
    flipped[100] ^= 0x01  # inside the first data block
    reader = SSTableReader.from_bytes(bytes(flipped))
    with pytest.raises(CorruptedData, match="checksum mismatch"):
        reader.items()
    with pytest.raises(CorruptedData, match="checksum mismatch"):
        reader.get(reader._index_keys[0])
    # the same table read without verification decodes (to a slightly different value)
    assert len(SSTableReader.from_bytes(bytes(flipped), verify_checksums=False).items()) == 400


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), verify=st.booleans())
def test_random_damage_raises_only_corrupted_data(good_table, data, verify):
    damaged = bytearray(good_table)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(damaged) - 1))
        damaged[position] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        damaged = damaged[: data.draw(st.integers(0, len(damaged)))]
    try:
        reader = SSTableReader.from_bytes(bytes(damaged), verify_checksums=verify)
        reader.items()
        list(reader.iter_from(b"\x80"))
        reader.get(b"\x80")
        len(reader)
    except CorruptedData:
        pass
