"""Go duration strings (``time.ParseDuration``) as used by action files: ``1m30s``, ``500ms``.

Owns the one parser of durations in action files.  The grammar is Go's: an optional sign, then
one or more ``<decimal number><unit>`` terms, units ``ns us µs μs ms s m h``; ``"0"`` alone is
allowed; anything else (no unit, unknown unit, spaces, empty) is rejected.
"""

from __future__ import annotations

_UNIT_NANOSECONDS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign
    "\u03bcs": 1_000,  # Greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_MAX_NANOSECONDS = 2**63 - 1  # Go's time.Duration is an int64 of nanoseconds
_DIGITS = "0123456789"


def parse_go_duration(text: str) -> int:
    """The duration ``text`` in nanoseconds (may be negative); ``ValueError`` with the reason
    if it is not a Go duration string."""
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string, got {type(text).__name__}")
    original, rest = text, text
    negative = False
    if rest[:1] in ("-", "+"):
        negative = rest[0] == "-"
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise ValueError(f"invalid duration {original!r}")
    total = 0
    while rest:
        if rest[0] not in _DIGITS and rest[0] != ".":
            raise ValueError(f"invalid duration {original!r}")
        i = 0
        while i < len(rest) and rest[i] in _DIGITS:
            i += 1
        whole_digits, rest = rest[:i], rest[i:]
        fraction_digits = ""
        if rest[:1] == ".":
            i = 1
            while i < len(rest) and rest[i] in _DIGITS:
                i += 1
            fraction_digits, rest = rest[1:i], rest[i:]
        if not whole_digits and not fraction_digits:
            raise ValueError(f"invalid duration {original!r}")
        i = 0
        while i < len(rest) and rest[i] != "." and rest[i] not in _DIGITS:
            i += 1
        unit, rest = rest[:i], rest[i:]
        if not unit:
            raise ValueError(f"missing unit in duration {original!r}")
        scale = _UNIT_NANOSECONDS.get(unit)
        if scale is None:
            raise ValueError(f"unknown unit {unit!r} in duration {original!r}")
        term = int(whole_digits or "0") * scale
        if fraction_digits:  # truncated to whole nanoseconds, as Go does
            term += int(fraction_digits) * scale // 10 ** len(fraction_digits)
        total += term
        if total > _MAX_NANOSECONDS:
            raise ValueError(f"duration {original!r} out of range")
    return -total if negative else total


def format_seconds(seconds: float) -> str:
    """A short human form of a duration in seconds, Go-style: ``300ms``, ``1.5s``, ``1m30s``."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds < 60:
        return f"{seconds:g}s"
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    return text + (f"{secs:g}s" if secs else "")
