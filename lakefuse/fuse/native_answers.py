"""``binding_answers``: the registries of what lakefuse's pyfuse3 answers itself: OPENs of
commit and tag files (``native_open_*``) and LOOKUPs of names a directory does not have
(``native_names_*``).

Owns the calls scripts/build_pyfuse3.py adds to pyfuse3 for this.  What is registered, and
when it is taken back, is ``lakefuse.fs.native_answers``'s.
"""

from __future__ import annotations

import pyfuse3


def binding_answers() -> BindingAnswers | None:
    """The registries of this pyfuse3, or None for a pyfuse3 without them (every OPEN and
    LOOKUP reaches its handler)."""
    if not hasattr(pyfuse3, "native_open_add") or not hasattr(pyfuse3, "native_names_add"):
        return None
    return BindingAnswers()


class BindingAnswers:
    """``add(ino, path, size, read_ahead)``: the binding answers read-only OPENs of ``ino``
    with the file at ``path`` as the kernel's backing file; ``remove(ino)``: no longer.
    ``add_names(ino, names, timeout[, expires[, record]])``: it answers LOOKUPs in directory
    ``ino`` of a name not in ``names`` with a negative entry (until ``expires``, a
    ``time.monotonic()`` time, if given), recording the names it answered so if ``record``
    (as many as ``record_most(n)`` allows in all); ``remove_names(ino)``: no longer, and the
    recorded names.  ``insert_name(ino, name)``: ``name`` goes to the handler from now on;
    whether it was recorded (None for a build of pyfuse3 without it, whose registrations
    cannot expire either).  ``record_most`` is None for a build that records nothing.
    ``opens_answered()`` and
    ``misses_answered()`` count what it answered so far."""

    def __init__(self):
        self.add = pyfuse3.native_open_add
        self.remove = pyfuse3.native_open_remove
        self.add_names = pyfuse3.native_names_add
        self.remove_names = pyfuse3.native_names_remove
        self.insert_name = getattr(pyfuse3, "native_names_insert", None)
        self.record_most = getattr(pyfuse3, "native_names_record_most", None)
        self.opens_answered = pyfuse3.native_opens_answered
        self.misses_answered = pyfuse3.native_misses_answered
