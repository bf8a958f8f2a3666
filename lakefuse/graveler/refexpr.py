"""Names and ref expressions: what a repository, branch or tag may be called, and how a textual
ref (``main``, ``v1.0``, ``3fa9c1``, ``main~2^2``) turns into a commit.

Owns, and nothing else does:

- name validation (``validate_repository_name``, ``validate_ref_name``);
- parsing ref expressions (``parse_ref_expression``);
- resolving them against a ``RefStore`` (``resolve_ref``) into a ``ResolvedRef`` that says
  whether the ref is a writable branch or read-only (tag, commit, expression).

Resolution of the base name, first match wins: a full commit ID (64 lowercase hex), a branch,
a tag, a unique commit-ID prefix (4 to 63 lowercase hex; several matches -> ``AmbiguousRef``
listing them).  Then the modifiers apply left to right: ``^`` / ``^N`` (N-th parent, ``^0`` is
the commit itself), ``~`` / ``~N`` (N first-parent steps).

Branch and tag names (decision, stricter than lakeFS so that no name can be read as an
expression or a commit ID): 1-255 characters of ``[A-Za-z0-9_.-]``, starting with a letter, a
digit or ``_``; no ``..``; not ending with ``.`` or ``.lock``; and not 4-64 characters that are
all lowercase hex digits (``cafe``, ``2024``, a commit ID) because those would read as commit-ID
prefixes.  So ``~ ^ : / @ \\ * ? [`` whitespace and control characters never occur in names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from lakefuse.errors import AmbiguousRef, InvalidArgument, InvalidName, NameTooLong, RefNotFound
from lakefuse.graveler.model import Commit, CommitID, RepositoryID
from lakefuse.graveler.ports import Branch, RefStore

REPOSITORY_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
REF_NAME_MAX_LENGTH = 255
_REF_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_HEX_RE = re.compile(r"^[0-9a-f]+$")
FULL_COMMIT_ID_LENGTH = 64
MIN_COMMIT_PREFIX_LENGTH = 4
_MODIFIER_RE = re.compile(r"([~^])(\d*)")
_AMBIGUITY_CANDIDATES = 10


def validate_repository_name(name: str) -> str:
    """Return ``name`` if it is a valid repository name, else raise ``InvalidName``."""
    if not isinstance(name, str) or not REPOSITORY_NAME_RE.match(name):
        raise InvalidName(
            f"invalid repository name {name!r}: 3-63 characters of lowercase letters, digits and '-', "
            "starting with a letter or digit"
        )
    return name


def validate_ref_name(name: str, kind: str = "branch") -> str:
    """Return ``name`` if it may name a branch or tag (see module docstring), else raise
    ``InvalidName`` (``NameTooLong`` past 255 characters)."""
    if not isinstance(name, str) or not name:
        raise InvalidName(f"invalid {kind} name {name!r}: must be a non-empty string")
    if len(name) > REF_NAME_MAX_LENGTH:
        raise NameTooLong(f"invalid {kind} name: {len(name)} characters, at most {REF_NAME_MAX_LENGTH}")
    if not _REF_NAME_RE.match(name):
        raise InvalidName(
            f"invalid {kind} name {name!r}: use letters, digits, '_', '.' and '-', starting with a letter, "
            "digit or '_' (no '~', '^', ':', '/', spaces or control characters)"
        )
    if ".." in name or name.endswith(".") or name.endswith(".lock"):
        raise InvalidName(f"invalid {kind} name {name!r}: must not contain '..' or end with '.' or '.lock'")
    if MIN_COMMIT_PREFIX_LENGTH <= len(name) <= FULL_COMMIT_ID_LENGTH and _HEX_RE.match(name):
        raise InvalidName(
            f"invalid {kind} name {name!r}: 4-64 lowercase hex characters would read as a commit ID prefix"
        )
    return name


def is_commit_id(text: str) -> bool:
    return len(text) == FULL_COMMIT_ID_LENGTH and bool(_HEX_RE.match(text))


def _is_commit_prefix(text: str) -> bool:
    return MIN_COMMIT_PREFIX_LENGTH <= len(text) < FULL_COMMIT_ID_LENGTH and bool(_HEX_RE.match(text))


@dataclass(frozen=True, slots=True)
class RefExpression:
    """A parsed ref: a base name and modifiers ``("^", n)`` / ``("~", n)`` in order."""

    text: str
    base: str
    modifiers: tuple[tuple[str, int], ...]


def parse_ref_expression(text: str) -> RefExpression:
    """Split ``main~2^2`` into base ``main`` and modifiers ``(("~", 2), ("^", 2))``.
    Raises ``InvalidArgument`` for an empty base or a malformed modifier."""
    if not isinstance(text, str) or not text:
        raise InvalidArgument(f"invalid ref {text!r}: empty")
    cut = len(text)
    for marker in ("~", "^"):
        position = text.find(marker)
        if position >= 0:
            cut = min(cut, position)
    base, rest = text[:cut], text[cut:]
    if not base:
        raise InvalidArgument(f"invalid ref {text!r}: nothing before '{rest[:1]}'")
    if any(c.isspace() or ord(c) < 0x20 or c == "\x7f" for c in base):
        raise InvalidArgument(f"invalid ref {text!r}: contains whitespace or control characters")
    modifiers: list[tuple[str, int]] = []
    position = 0
    while position < len(rest):
        match = _MODIFIER_RE.match(rest, position)
        if match is None or match.end() == position:
            raise InvalidArgument(f"invalid ref {text!r}: unexpected {rest[position:]!r} (expected ~N or ^N)")
        op, digits = match.groups()
        modifiers.append((op, int(digits) if digits else 1))
        position = match.end()
    return RefExpression(text=text, base=base, modifiers=tuple(modifiers))


class RefKind(str, Enum):
    BRANCH = "branch"
    TAG = "tag"
    COMMIT = "commit"  # a full commit ID or a unique prefix
    EXPRESSION = "expression"  # anything with ~ or ^ modifiers

    @property
    def with_article(self) -> str:
        """``a tag``, ``an expression``: for messages."""
        return f"{'an' if self.value[0] in 'aeiou' else 'a'} {self.value}"


@dataclass(frozen=True, slots=True)
class ResolvedRef:
    """What a ref names.  ``branch`` is set only for a plain branch name: reading it includes
    its staging area, and only then is the ref writable."""

    expression: str
    kind: RefKind
    commit: Commit
    branch: Branch | None = None

    @property
    def writable(self) -> bool:
        return self.kind is RefKind.BRANCH

    @property
    def commit_id(self) -> CommitID:
        return self.commit.id


def resolve_ref(
    refs: RefStore,
    repo_id: RepositoryID,
    text: str,
    get_commit: Callable[[RepositoryID, CommitID], Commit] | None = None,
) -> ResolvedRef:
    """Resolve a ref expression (see module docstring).  ``get_commit`` lets the caller put a
    cache in front of ``refs.get_commit``.  Raises ``RefNotFound`` / ``AmbiguousRef`` /
    ``InvalidArgument`` (and ``RepositoryNotFound`` from the store)."""
    get = get_commit or refs.get_commit
    expression = parse_ref_expression(text)
    base = expression.base
    branch: Branch | None = None
    if is_commit_id(base):
        commit = get(repo_id, CommitID(base))
        kind = RefKind.COMMIT
    else:
        commit, kind, branch = _resolve_name(refs, repo_id, base, get)
    for op, count in expression.modifiers:
        commit = _step(repo_id, text, commit, op, count, get)
    if expression.modifiers:
        return ResolvedRef(expression=text, kind=RefKind.EXPRESSION, commit=commit)
    return ResolvedRef(expression=text, kind=kind, commit=commit, branch=branch)


def _resolve_name(refs: RefStore, repo_id: RepositoryID, name: str, get) -> tuple[Commit, RefKind, Branch | None]:
    try:
        branch = refs.get_branch(repo_id, name)
    except RefNotFound:
        pass
    else:
        return get(repo_id, branch.commit_id), RefKind.BRANCH, branch
    try:
        commit_id = refs.get_tag(repo_id, name)
    except RefNotFound:
        pass
    else:
        return get(repo_id, commit_id), RefKind.TAG, None
    if _is_commit_prefix(name):
        matches = refs.find_commits_by_prefix(repo_id, name, limit=_AMBIGUITY_CANDIDATES + 1)
        if len(matches) == 1:
            return get(repo_id, matches[0]), RefKind.COMMIT, None
        if len(matches) > 1:
            shown = matches[:_AMBIGUITY_CANDIDATES]
            more = " (and more)" if len(matches) > _AMBIGUITY_CANDIDATES else ""
            raise AmbiguousRef(
                f"ref {name!r} is an ambiguous commit ID prefix in repository {repo_id!r}: "
                f"matches {', '.join(shown)}{more}",
                candidates=shown,
            )
    raise RefNotFound(f"ref {name!r} not found in repository {repo_id!r} (no branch, tag or commit of that name)")


def _step(repo_id: RepositoryID, text: str, commit: Commit, op: str, count: int, get) -> Commit:
    if op == "^":
        if count == 0:
            return commit
        if count > len(commit.parents):
            raise RefNotFound(
                f"ref {text!r}: commit {commit.id[:12]} has {len(commit.parents)} parent(s), no parent {count}"
            )
        return get(repo_id, commit.parents[count - 1])
    for _ in range(count):
        if not commit.parents:
            raise RefNotFound(f"ref {text!r}: goes back past the initial commit {commit.id[:12]}")
        commit = get(repo_id, commit.parents[0])
    return commit
