"""Import sources and export destinations: URIs, and the guard against touching a location a
repository owns.

Owns ``normalize_location`` (a plain path, ``local:///abs/path`` or ``s3://bucket/prefix``,
spelled like a storage namespace) and ``check_outside_namespaces``: a source or destination that
is, contains or lies inside the storage namespace of any repository is refused before anything
is written.  Importing from a namespace would make one repository point at objects another's
garbage collection may delete; exporting into one would mix foreign files into its data.
Local paths are compared after resolving symlinks.
"""

from __future__ import annotations

import os
from typing import Iterable

from lakefuse.block.namespace import normalize_namespace, parse_namespace
from lakefuse.errors import InvalidArgument


def normalize_location(uri: str) -> str:
    """The canonical spelling of a location (``local:///abs/path`` or ``s3://bucket/prefix``)."""
    return normalize_namespace(uri)


def _comparable(uri: str) -> str:
    scheme, location = parse_namespace(uri)
    if scheme == "local":
        location = os.path.realpath(location)
    return f"{scheme}://{location.rstrip('/')}"


def overlaps(left: str, right: str) -> bool:
    """True if one location is the other or contains it."""
    a, b = _comparable(left), _comparable(right)
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def check_outside_namespaces(uri: str, repositories: Iterable, what: str) -> None:
    """``InvalidArgument`` if ``uri`` overlaps the storage namespace of any repository."""
    for repo in repositories:
        if overlaps(uri, repo.storage_namespace):
            raise InvalidArgument(
                f"{what} {uri} overlaps the storage namespace {repo.storage_namespace} of repository {repo.id!r}; "
                "choose a location outside every repository's storage namespace"
            )


def nested_namespaces(namespace: str, repositories: Iterable, own_id: str) -> list[str]:
    """Key prefixes (relative to ``namespace``, ending in ``/``) of other repositories'
    namespaces that lie inside it: garbage collection must never list them."""
    own = _comparable(namespace)
    prefixes = []
    for repo in repositories:
        if repo.id == own_id:
            continue
        other = _comparable(repo.storage_namespace)
        if other.startswith(own + "/"):
            prefixes.append(other[len(own) + 1 :].rstrip("/") + "/")
    return sorted(prefixes)


def key_prefix(prefix: str | None) -> str:
    """An import prefix as a key prefix: empty, or ending in ``/`` (``raw`` -> ``raw/``)."""
    if not prefix:
        return ""
    if not isinstance(prefix, str) or prefix.startswith("/") or "\0" in prefix:
        raise InvalidArgument(f"invalid import prefix {prefix!r}: a relative path like 'tables/events/'")
    segments = prefix.rstrip("/").split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise InvalidArgument(f"invalid import prefix {prefix!r}: empty, '.' or '..' path segment")
    return prefix.rstrip("/") + "/"
