"""lakeFS's content-address encoding (its ``pkg/ident``): the typed binary stream that SHA-256
turns into a commit ID and into an object entry's identity.

Owns, and nothing else does: how one value of each type is written into that stream.  Every
value starts with one type byte:

=====  ===================  ==========================================================
 byte   type                 what follows the type byte
=====  ===================  ==========================================================
 0      bytes                an int64 (the length), then the bytes
 1      string               an int64 (the UTF-8 length), then the UTF-8 bytes
 2      int64                the byte 8, then 8 bytes, big-endian two's complement
 3      string slice         an int64 (the count), then each item as a string
 4      string map           an int64 (the count), then per key in byte order:
                             the key as a string, the value as a string
 5      embedded identity    the embedded value's identity (32 bytes) as bytes
=====  ===================  ==========================================================

(so an int64 is always the 10 bytes ``02 08 <8 bytes>``, also where it is a length).  The
writers of commit IDs (``lakefuse.graveler.commits``) and of entry identities
(``lakefuse.graveler.committed.encoding``) use ``AddressWriter``; the entry identity has a
hand-inlined twin on the hot path that a test holds equal to it.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Iterable, Mapping

from lakefuse.errors import InvalidArgument

TYPE_BYTES = 0
TYPE_STRING = 1
TYPE_INT64 = 2
TYPE_STRING_SLICE = 3
TYPE_STRING_MAP = 4
TYPE_EMBEDDED_IDENTITY = 5

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

#: the whole encoding of an int64 but its 8 value bytes: type byte, then the width 8
INT64_PREFIX = bytes((TYPE_INT64, 8))
_INT64 = struct.Struct(">q")


def encode_int64(value: int) -> bytes:
    """The encoding of an int64 (type byte, width byte 8, 8 bytes big-endian)."""
    if value.__class__ is not int or not INT64_MIN <= value <= INT64_MAX:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"identity: expected an integer, got {value!r}")
        raise InvalidArgument(f"identity: {value} does not fit in a signed 64-bit integer")
    return INT64_PREFIX + _INT64.pack(value)


def _utf8(text: str) -> bytes:
    if not isinstance(text, str):
        raise InvalidArgument(f"identity: expected a string, got {text!r}")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"identity: {text!r} is not valid Unicode text") from None


class AddressWriter:
    """A SHA-256 over the typed stream: ``AddressWriter().string(a).int64(b).identity()``.

    Each method appends one value and returns the writer, as lakeFS's writer does."""

    __slots__ = ("_hash",)

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def byte_string(self, value: bytes) -> "AddressWriter":
        value = bytes(value)
        self._hash.update(bytes((TYPE_BYTES,)) + encode_int64(len(value)) + value)
        return self

    def string(self, value: str) -> "AddressWriter":
        raw = _utf8(value)
        self._hash.update(bytes((TYPE_STRING,)) + encode_int64(len(raw)) + raw)
        return self

    def string_opt(self, value: str) -> "AddressWriter":
        """``string(value)`` if ``value`` is not empty, else nothing at all."""
        return self.string(value) if value else self

    def int64(self, value: int) -> "AddressWriter":
        self._hash.update(encode_int64(value))
        return self

    def string_slice(self, values: Iterable[str]) -> "AddressWriter":
        items = list(values)
        self._hash.update(bytes((TYPE_STRING_SLICE,)) + encode_int64(len(items)))
        for item in items:
            self.string(item)
        return self

    def string_map(self, mapping: Mapping[str, str]) -> "AddressWriter":
        """The map's items in the byte order of their UTF-8 keys (for valid Unicode that is
        code-point order, which is Python's string order)."""
        self._hash.update(bytes((TYPE_STRING_MAP,)) + encode_int64(len(mapping)))
        for key in sorted(mapping):
            self.string(key).string(mapping[key])
        return self

    def embedded(self, identity: bytes) -> "AddressWriter":
        """An embedded value, by its identity (lakeFS's ``MarshalIdentifiable``)."""
        self._hash.update(bytes((TYPE_EMBEDDED_IDENTITY,)))
        return self.byte_string(identity)

    def identity(self) -> bytes:
        """The 32-byte SHA-256 of everything written so far."""
        return self._hash.digest()

    def hex_identity(self) -> str:
        """``identity()`` as 64 lowercase hex digits (a lakeFS content address)."""
        return self._hash.hexdigest()
