"""Storage namespace URIs and the one factory that turns them into block adapters.

Accepted forms:

* ``local:///absolute/path`` or a plain path (relative paths and ``~`` are resolved to an
  absolute path) -> the ``local`` adapter; normalized to ``local:///absolute/path``.
* ``s3://bucket`` or ``s3://bucket/prefix`` -> the ``s3`` adapter; normalized without a
  trailing slash.

``open_namespace`` is the only place that picks an adapter class; boto3 is imported only when
an ``s3://`` namespace is opened.  URIs are taken literally (no percent-decoding).
"""

from __future__ import annotations

import os
import re

from lakefuse.block.base import BlockAdapter, TransferSettings, check_key
from lakefuse.config import S3Config
from lakefuse.errors import InvalidArgument

SCHEMES = ("local", "s3")
_URI_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://(.*)$", re.DOTALL)
_SCHEME_ONLY_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
# AWS rules plus the '_' / upper case some S3-compatible servers allow
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{1,61}[A-Za-z0-9]$")
_FORMS = "expected local:///absolute/path, a plain path, or s3://bucket/prefix"


def parse_namespace(uri: str) -> tuple[str, str]:
    """Split a storage namespace into ``(scheme, location)``: ``("local", "/abs/path")`` or
    ``("s3", "bucket")`` / ``("s3", "bucket/prefix")``.  Raises ``InvalidArgument``."""
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidArgument(f"empty storage namespace: {_FORMS}")
    if "\0" in uri:
        raise InvalidArgument(f"invalid storage namespace {uri!r}: contains NUL")
    match = _URI_RE.match(uri)
    if match is None:
        scheme_only = _SCHEME_ONLY_RE.match(uri)
        if scheme_only and scheme_only.group(1).lower() in SCHEMES:
            raise InvalidArgument(f"malformed storage namespace {uri!r}: {_FORMS}")
        return "local", os.path.normpath(os.path.abspath(os.path.expanduser(uri)))
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme == "local":
        if not rest.startswith("/"):
            raise InvalidArgument(
                f"malformed storage namespace {uri!r}: a local namespace is local:///absolute/path (three slashes)"
            )
        return "local", os.path.normpath("/" + rest.lstrip("/"))
    if scheme == "s3":
        return "s3", _parse_s3_location(uri, rest)
    raise InvalidArgument(f"unknown storage namespace scheme {scheme!r} in {uri!r}: {_FORMS}")


def _parse_s3_location(uri: str, rest: str) -> str:
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise InvalidArgument(f"malformed storage namespace {uri!r}: missing bucket (s3://bucket/prefix)")
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise InvalidArgument(
            f"malformed storage namespace {uri!r}: invalid bucket name {bucket!r} "
            "(3-63 letters, digits, '.', '-', '_')"
        )
    if "?" in prefix or "#" in prefix:
        raise InvalidArgument(f"malformed storage namespace {uri!r}: no query or fragment allowed")
    prefix = prefix.strip("/")
    if prefix:
        try:
            check_key(prefix)
        except InvalidArgument:
            raise InvalidArgument(
                f"malformed storage namespace {uri!r}: the prefix has an empty, '.', '..' or reserved segment"
            ) from None
        return f"{bucket}/{prefix}"
    return bucket


def namespace_uri(scheme: str, location: str) -> str:
    """The normalized URI of a parsed namespace (``local:///abs/path``, ``s3://bucket/prefix``)."""
    return f"{scheme}://{location}"


def normalize_namespace(uri: str) -> str:
    """``parse_namespace`` then ``namespace_uri``: the canonical spelling of a namespace."""
    return namespace_uri(*parse_namespace(uri))


def open_namespace(
    uri: str, s3_config: S3Config | None = None, transfer: TransferSettings | None = None
) -> BlockAdapter:
    """The block adapter rooted at storage namespace ``uri``.  ``s3_config`` defaults to the
    standard AWS chain with no custom endpoint; ``transfer`` tunes multipart (S3)."""
    scheme, location = parse_namespace(uri)
    if scheme == "local":
        from lakefuse.block.local import LocalBlockAdapter

        return LocalBlockAdapter(location, transfer=transfer)
    from lakefuse.block.s3 import S3BlockAdapter  # imports boto3

    bucket, _, prefix = location.partition("/")
    return S3BlockAdapter(bucket, prefix, s3_config=s3_config, transfer=transfer)
