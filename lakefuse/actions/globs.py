"""Branch glob patterns of action files, with the semantics of Go's ``path.Match``.

Owns compiling a pattern (rejecting malformed ones up front) and matching a branch name:
``*`` any run of non-``/`` characters, ``?`` one non-``/`` character, ``[abc]`` / ``[a-z]`` /
``[^a-z]`` character classes (non-empty; ``^`` negates), ``\\`` escapes the next character.
The whole name must match.
"""

from __future__ import annotations

import re


def compile_branch_pattern(pattern: str) -> re.Pattern[str]:
    """A regular expression equivalent to the glob; ``ValueError`` if the glob is malformed."""
    if not isinstance(pattern, str):
        raise ValueError(f"branch pattern must be a string, got {type(pattern).__name__}")
    parts: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            while i < n and pattern[i] == "*":
                i += 1
            parts.append("[^/]*")
            continue
        if char == "?":
            parts.append("[^/]")
        elif char == "\\":
            if i + 1 >= n:
                raise ValueError(f"malformed branch pattern {pattern!r}: trailing backslash")
            i += 1
            parts.append(re.escape(pattern[i]))
        elif char == "[":
            regex, i = _compile_class(pattern, i + 1)
            parts.append(regex)
            continue
        else:
            parts.append(re.escape(char))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


def _compile_class(pattern: str, i: int) -> tuple[str, int]:
    """Compile the class whose body starts at ``pattern[i]``; return the regex and the index
    after the closing ``]``."""
    n = len(pattern)
    negate = i < n and pattern[i] == "^"
    if negate:
        i += 1
    ranges: list[tuple[str, str]] = []
    while True:
        if i < n and pattern[i] == "]" and ranges:
            i += 1
            break
        low, i = _class_char(pattern, i)
        high = low
        if i < n and pattern[i] == "-":
            high, i = _class_char(pattern, i + 1)
        ranges.append((low, high))
    items = "".join(re.escape(lo) if lo == hi else f"{re.escape(lo)}-{re.escape(hi)}"
                    for lo, hi in ranges if lo <= hi)
    if not items:  # only empty ranges such as z-a
        return ("." if negate else "(?!)"), i
    return f"[{'^' if negate else ''}{items}]", i


def _class_char(pattern: str, i: int) -> tuple[str, int]:
    if i >= len(pattern):
        raise ValueError(f"malformed branch pattern {pattern!r}: unterminated character class")
    char = pattern[i]
    if char in "-]":
        raise ValueError(f"malformed branch pattern {pattern!r}: unescaped {char!r} in character class")
    if char == "\\":
        if i + 1 >= len(pattern):
            raise ValueError(f"malformed branch pattern {pattern!r}: trailing backslash")
        return pattern[i + 1], i + 2
    return char, i + 1


def branch_matches(pattern: str | re.Pattern[str], branch: str) -> bool:
    compiled = pattern if isinstance(pattern, re.Pattern) else compile_branch_pattern(pattern)
    return compiled.fullmatch(branch) is not None
