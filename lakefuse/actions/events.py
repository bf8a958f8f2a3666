"""What a hook sees of the operation that triggers it: event types and the ``HookEvent``.

Owns the event vocabulary - every event type lakeFS knows, with its spellings - and the event
value the version-control core hands to the hooks object.  The runner reads events by attribute
name, so the core may pass its own type with the same attributes instead of this dataclass.

Event types are hyphenated as in lakeFS (``pre-create-branch``); lakeFS's older docs spell them
with underscores (``pre_create_branch``), accepted as aliases.  ``pre-cherrypick`` and
``post-cherrypick`` are accepted for lakeFS's ``pre-cherry-pick`` / ``post-cherry-pick``.

Each event type has a kind (``commit``: the operation makes a commit; ``branch``; ``tag``), is
a pre event (its failure aborts the operation) or a post event (its failure is reported only),
and the hooks object has one method per event type: the type with ``-`` turned into ``_``
(``pre_create_branch``).  ``FIRED_EVENTS`` are those some lakefuse operation fires; lakefuse
has no cherry-pick, so its two events are valid in action files but never fire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

PREPARE_COMMIT = "prepare-commit"
PRE_COMMIT = "pre-commit"
POST_COMMIT = "post-commit"
PRE_MERGE = "pre-merge"
POST_MERGE = "post-merge"
PRE_CREATE_BRANCH = "pre-create-branch"
POST_CREATE_BRANCH = "post-create-branch"
PRE_DELETE_BRANCH = "pre-delete-branch"
POST_DELETE_BRANCH = "post-delete-branch"
PRE_CREATE_TAG = "pre-create-tag"
POST_CREATE_TAG = "post-create-tag"
PRE_DELETE_TAG = "pre-delete-tag"
POST_DELETE_TAG = "post-delete-tag"
PRE_REVERT = "pre-revert"
POST_REVERT = "post-revert"
PRE_CHERRY_PICK = "pre-cherry-pick"
POST_CHERRY_PICK = "post-cherry-pick"

COMMIT_KIND = "commit"
BRANCH_KIND = "branch"
TAG_KIND = "tag"


@dataclass(frozen=True)
class EventSpec:
    """One event type: its ``kind``, whether it is a ``pre`` event, and for a post event of
    an operation that makes a commit, the pre event whose run gets the resulting commit ID."""

    name: str
    kind: str
    pre: bool
    pairs_with: str | None = None

    @property
    def method(self) -> str:
        """The name of the hooks object's method for this event."""
        return self.name.replace("-", "_")


EVENT_SPECS: dict[str, EventSpec] = {spec.name: spec for spec in (
    EventSpec(PREPARE_COMMIT, COMMIT_KIND, pre=True),
    EventSpec(PRE_COMMIT, COMMIT_KIND, pre=True),
    EventSpec(POST_COMMIT, COMMIT_KIND, pre=False, pairs_with=PRE_COMMIT),
    EventSpec(PRE_MERGE, COMMIT_KIND, pre=True),
    EventSpec(POST_MERGE, COMMIT_KIND, pre=False, pairs_with=PRE_MERGE),
    EventSpec(PRE_CREATE_BRANCH, BRANCH_KIND, pre=True),
    EventSpec(POST_CREATE_BRANCH, BRANCH_KIND, pre=False),
    EventSpec(PRE_DELETE_BRANCH, BRANCH_KIND, pre=True),
    EventSpec(POST_DELETE_BRANCH, BRANCH_KIND, pre=False),
    EventSpec(PRE_CREATE_TAG, TAG_KIND, pre=True),
    EventSpec(POST_CREATE_TAG, TAG_KIND, pre=False),
    EventSpec(PRE_DELETE_TAG, TAG_KIND, pre=True),
    EventSpec(POST_DELETE_TAG, TAG_KIND, pre=False),
    EventSpec(PRE_REVERT, COMMIT_KIND, pre=True),
    EventSpec(POST_REVERT, COMMIT_KIND, pre=False, pairs_with=PRE_REVERT),
    EventSpec(PRE_CHERRY_PICK, COMMIT_KIND, pre=True),
    EventSpec(POST_CHERRY_PICK, COMMIT_KIND, pre=False, pairs_with=PRE_CHERRY_PICK),
)}

#: every event type an action file may list, in lakeFS's order
EVENT_TYPES = tuple(EVENT_SPECS)
PRE_EVENTS = tuple(name for name, spec in EVENT_SPECS.items() if spec.pre)
POST_EVENTS = tuple(name for name, spec in EVENT_SPECS.items() if not spec.pre)
TAG_EVENTS = tuple(name for name, spec in EVENT_SPECS.items() if spec.kind == TAG_KIND)
#: the events some lakefuse operation fires (lakefuse has no cherry-pick)
FIRED_EVENTS = tuple(name for name in EVENT_TYPES if name not in (PRE_CHERRY_PICK, POST_CHERRY_PICK))

#: other spellings of event types (after ``_`` -> ``-``)
EVENT_ALIASES = {"pre-cherrypick": PRE_CHERRY_PICK, "post-cherrypick": POST_CHERRY_PICK}

#: where action files live in a ref
ACTIONS_PREFIX = "_lakefs_actions/"

ActionFile = tuple[str, bytes]  # (path in the ref, content)


def normalize_event_type(name: object) -> str | None:
    """The canonical (hyphenated) event type of ``name``, or None if it is not one.
    ``pre_commit`` (the spelling of lakeFS's docs table) is accepted as ``pre-commit``,
    ``pre-cherrypick`` as ``pre-cherry-pick``."""
    if not isinstance(name, str):
        return None
    canonical = name.replace("_", "-")
    canonical = EVENT_ALIASES.get(canonical, canonical)
    return canonical if canonical in EVENT_SPECS else None


@dataclass(frozen=True)
class HookEvent:
    """One operation as the hooks see it.

    ``branch_id`` is the branch committed to, merged into, reverted on, created or deleted
    (empty for tag events); ``source_ref`` is, as in lakeFS: the branch for a commit or revert,
    the merge source for a merge, the source ref for a branch creation, the deleted branch's head
    commit for a branch deletion, the tagged commit for tag events.  ``tag_id`` is set for tag
    events.  ``commit_id`` is the new commit for post-commit/merge/revert, the commit the new
    branch or the tag points at for branch creation and tag events, None otherwise.
    ``read_action_files`` returns the action files of the ref the event runs on as ``(path,
    content)`` pairs; an iterable of pairs is accepted too.  ``pre_run_id`` (post events,
    optional) names the run of the matching pre event, so its manifest gets the resulting commit
    ID; without it the runner pairs pre and post events of one thread.
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
    tag_id: str | None = None
