"""``lakefs://<repo>/<ref>/<path>`` URIs: parsing and formatting.

The ref part is a ref expression (``main``, ``v1.2``, ``main~2^2``, a commit ID); it never
contains ``/``.  The path is everything after the ref, may be empty, and keeps its slashes.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakefuse.errors import InvalidArgument

SCHEME = "lakefs://"


@dataclass(frozen=True)
class LakefsURI:
    repository: str
    ref: str | None = None
    path: str | None = None

    def __str__(self) -> str:
        out = SCHEME + self.repository
        if self.ref is not None:
            out += "/" + self.ref
            if self.path:
                out += "/" + self.path
        return out

    def require_ref(self) -> "LakefsURI":
        if not self.ref:
            raise InvalidArgument(f"{self}: a ref is required (lakefs://<repo>/<ref>)")
        return self

    def require_repository_only(self) -> "LakefsURI":
        if self.ref is not None:
            raise InvalidArgument(f"{self}: expected a repository URI (lakefs://<repo>)")
        return self


def parse_uri(text: str) -> LakefsURI:
    """Parse a ``lakefs://`` URI; anything else is InvalidArgument with a one-line reason."""
    if not isinstance(text, str) or not text.startswith(SCHEME):
        raise InvalidArgument(f"not a lakefs:// URI: {text!r} (expected lakefs://<repo>[/<ref>[/<path>]])")
    rest = text[len(SCHEME):]
    if not rest or rest.startswith("/"):
        raise InvalidArgument(f"{text!r}: missing repository name")
    repo, sep, tail = rest.partition("/")
    if not sep or tail == "":
        return LakefsURI(repo)
    ref, sep, path = tail.partition("/")
    if not ref:
        raise InvalidArgument(f"{text!r}: empty ref")
    return LakefsURI(repo, ref, path if sep else None)
