"""Who owns what in a mount: ``Owners`` turns the owner an entry stores into the one the mount
shows, and the requester of a create or chown into the owner stored.

- An entry without a stored owner (written before lakefuse kept owners, or by the CLI, Spark or
  another lakeFS client), a directory implied by keys, a ref or a repository shows the default
  owner: ``--uid``/``--gid``, else the mounting user (what every entry showed before).
- ``--map-uid STORED:SHOWN`` (and ``--map-gid``) show a stored id as another: data written on a
  machine where a user had another uid.  Creating or chowning to SHOWN stores STORED again, so
  what the mount writes reads back the same elsewhere.
- ``--force-owner`` shows every entry as owned by the default owner whatever it stores (a mount
  of someone else's data that its user must be able to write); creates and chowns still store
  the requester's ids.
"""

from __future__ import annotations

import stat as stat_mode
from typing import Mapping

from lakefuse.posix import GID_KEY, UID_KEY


class Owners:
    def __init__(self, uid: int, gid: int, *, uid_map: Mapping[int, int] | None = None,
                 gid_map: Mapping[int, int] | None = None, force: bool = False):
        self.uid = uid
        self.gid = gid
        self._uid_map = dict(uid_map or {})
        self._gid_map = dict(gid_map or {})
        self._uid_back = {shown: stored for stored, shown in self._uid_map.items()}
        self._gid_back = {shown: stored for stored, shown in self._gid_map.items()}
        self.force = force

    def shown(self, uid: int | None, gid: int | None) -> tuple[int, int]:
        """The ``(uid, gid)`` stat shows for stored ids (None: not stored)."""
        if self.force:
            return self.uid, self.gid
        shown_uid = self.uid if uid is None else self._uid_map.get(uid, uid)
        shown_gid = self.gid if gid is None else self._gid_map.get(gid, gid)
        return shown_uid, shown_gid

    def stored_uid(self, uid: int) -> int:
        """The uid stored for a requester or chown target ``uid`` (as the mount shows ids)."""
        return self._uid_back.get(uid, uid)

    def stored_gid(self, gid: int) -> int:
        return self._gid_back.get(gid, gid)

    def new_entry(self, uid: int | None, gid: int | None, parent_mode: int, parent_gid: int) -> dict[str, str]:
        """The owner keys of an entry a requester ``uid``/``gid`` (as the mount shows ids; None:
        not known, nothing stored) makes in a directory of mode ``parent_mode`` and group
        ``parent_gid``: as Linux does, a set-group-ID directory gives its group."""
        if uid is None:
            return {}
        if parent_mode & stat_mode.S_ISGID:
            gid = parent_gid
        out = {UID_KEY: str(self.stored_uid(uid))}
        if gid is not None:
            out[GID_KEY] = str(self.stored_gid(gid))
        return out
