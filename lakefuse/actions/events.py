"""What a hook sees of the operation that triggers it: event types and the ``HookEvent``.

Owns the event vocabulary (``pre-commit``, ``post-commit``, ``pre-merge``, ``post-merge``, with
lakeFS's underscore spellings accepted as aliases) and the event value the version-control core
hands to the hooks object.  The runner reads events by attribute name, so the core may pass its
own type with the same attributes instead of this dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

PRE_COMMIT = "pre-commit"
POST_COMMIT = "post-commit"
PRE_MERGE = "pre-merge"
POST_MERGE = "post-merge"
EVENT_TYPES = (PRE_COMMIT, POST_COMMIT, PRE_MERGE, POST_MERGE)
PRE_EVENTS = (PRE_COMMIT, PRE_MERGE)

#: where action files live in a ref
ACTIONS_PREFIX = "_lakefs_actions/"

ActionFile = tuple[str, bytes]  # (path in the ref, content)


def normalize_event_type(name: object) -> str | None:
    """The canonical (hyphenated) event type of ``name``, or None if it is not one.
    ``pre_commit`` (the spelling of lakeFS's docs table) is accepted as ``pre-commit``."""
    if not isinstance(name, str):
        return None
    canonical = name.replace("_", "-")
    return canonical if canonical in EVENT_TYPES else None


@dataclass(frozen=True)
class HookEvent:
    """One commit or merge as the hooks see it.

    ``branch_id`` is the branch being committed to or merged into; ``source_ref`` is that branch
    for a commit and the merge source for a merge.  ``commit_id`` is set for post events (the
    new commit).  ``read_action_files`` returns the action files of the ref the event runs on
    (for a commit: the branch including its staged changes; for a merge: the source) as
    ``(path, content)`` pairs; an iterable of pairs is accepted too.  ``pre_run_id`` (post
    events, optional) names the run of the matching pre event, so its manifest gets the
    resulting commit ID; without it the runner pairs pre and post events of one thread.
    """

    event_type: str
    repository_id: str
    branch_id: str
    source_ref: str
    commit_message: str = ""
    committer: str = ""
    commit_metadata: Mapping[str, str] = field(default_factory=dict)
    commit_id: str | None = None
    read_action_files: Callable[[], Iterable[ActionFile]] | Iterable[ActionFile] | None = None
    pre_run_id: str | None = None
