"""``binding_answers``: the registries of what lakefuse's pyfuse3 answers itself: OPENs of
commit and tag files (``native_open_*``), of unmodified branch files (``native_branch_*``) and
LOOKUPs of names a directory does not have (``native_names_*``).

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
    ``add_branch_file(ino, path, size, read_ahead, expires)``: it answers read-only OPENs of
    ``ino`` itself, reading the file at ``path`` for their READs, until ``expires``;
    ``remove_branch_file(ino)``: no longer (the handles it opened stay its own);
    ``take_branch_file(ino)``: no longer, and the handles it opened are the handlers' from now
    on: ``(how many, the descriptor they read, now the caller's, its size)`` or None; their
    handle number is ``branch_fh_bit | ino``.  These three are None for a
    build without them.  ``opens_answered()`` and
    ``misses_answered()`` count what it answered so far."""

    def __init__(self):
        self.add = pyfuse3.native_open_add
        self.remove = pyfuse3.native_open_remove
        self.add_names = pyfuse3.native_names_add
        self.remove_names = pyfuse3.native_names_remove
        self.insert_name = getattr(pyfuse3, "native_names_insert", None)
        self.record_most = getattr(pyfuse3, "native_names_record_most", None)
        self.add_branch_file = getattr(pyfuse3, "native_branch_open_add", None)
        self.remove_branch_file = getattr(pyfuse3, "native_branch_open_remove", None)
        self.take_branch_file = getattr(pyfuse3, "native_branch_take", None)
        self.branch_fh_bit = pyfuse3.native_branch_fh_bit() if hasattr(pyfuse3, "native_branch_fh_bit") else 0
        self.opens_answered = pyfuse3.native_opens_answered
        self.misses_answered = pyfuse3.native_misses_answered
