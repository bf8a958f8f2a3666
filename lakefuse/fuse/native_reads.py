"""``BindingReads``: the registry of handles whose READs lakefuse's pyfuse3 answers itself.

Owns the three calls scripts/build_pyfuse3.py adds to pyfuse3 for this
(``native_read_add``, ``native_read_remove``, ``native_reads_answered``).  Which handles are
registered, and when they are taken back, is ``lakefuse.fs.native_reads``'s.
"""

from __future__ import annotations

import pyfuse3


def binding_reads() -> BindingReads | None:
    """The registry of this pyfuse3, or None for a stock pyfuse3 (every READ reaches the
    handler)."""
    if not hasattr(pyfuse3, "native_read_add"):
        return None
    return BindingReads()


class BindingReads:
    """``add(fh, fd, size)``: the binding answers READs of ``fh`` from ``fd`` when the bytes are
    cached; ``remove(fh)``: no longer (before ``fd`` is closed); ``answered()``: how many READs
    it answered so far."""

    def __init__(self):
        self.add = pyfuse3.native_read_add
        self.remove = pyfuse3.native_read_remove
        self.answered = pyfuse3.native_reads_answered
