"""The events the core raises and how they reach the hooks object: ``HookEvent`` (what a hook
sees of an operation), the ``Hooks`` protocol (one optional callback per lakeFS event type) and
``HookDispatcher``, which builds the events of an operation and fires them.

Owns: the pre/post rule (a pre hook's failure aborts the operation with ``HookFailed``, a post
hook's failure is logged only), building an event only when a hook wants it, and exposing the
action files of the event's content through the ``action_files_reader`` the catalog installs.
*When* an operation fires which event is ``graveler``'s business (see each ``Graveler``
method); what lakeFS actions do with an event is ``lakefuse.actions``'.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Protocol

from lakefuse.errors import HookFailed, LakefuseError
from lakefuse.graveler.changes import Change, no_changes
from lakefuse.graveler.model import BranchID, Commit, CommitID, RepositoryID, TagID
from lakefuse.graveler.ports import CommittedStore, Repository
from lakefuse.graveler.views import RefView

log = logging.getLogger(__name__)

#: ``(repository, view) -> [(path, bytes)]`` of the action files a hook event exposes
ActionFilesReader = Callable[[Repository, RefView], Iterable[tuple[str, bytes]]]


@dataclass(frozen=True)
class HookEvent:
    """What a hook sees of an operation (the event types are lakeFS's, see ``Hooks``).

    ``view`` reads the content the event is about and ``changes()`` lists what the operation
    changes:

    - prepare-commit: the branch as it is (head + staged changes), before staging is sealed;
      changes: staged vs head.
    - pre-commit: the head overlaid with the sealed staged changes, exactly what the commit will
      contain (its staging rows are dropped once the commit is done: use the view while the hook
      runs); changes: staged vs head.
    - pre-merge: the source commit; changes: source vs merge base.
    - pre-revert: the branch head; changes: what the revert changes.
    - post-commit/merge/revert: the new commit; changes: new commit vs the previous head.
    - branch and tag events: the commit the branch or tag points at (create-branch: the source
      commit; delete-branch: the deleted branch's head); changes: none.

    ``source_ref`` (as in lakeFS): commit, revert: the branch; merge: the source ref as given;
    create-branch: the source ref as given; delete-branch and tag events: the commit ID.
    ``commit``: post-commit/merge/revert: the new commit; create-branch and tag events: the
    commit the branch or tag points at; else None (``commit_id`` follows it).  ``tag_id``: tag
    events only (``branch_id`` is then empty).  ``commit_message``, ``committer`` and
    ``metadata`` are those of the commit being made (empty for branch and tag events).
    ``read_action_files()`` returns the ``(path, bytes)`` of the action files under
    ``_lakefs_actions/`` in ``view`` when the Graveler has an ``action_files_reader`` (the
    catalog installs one), else None.  Attribute names match
    ``lakefuse.actions.events.HookEvent``."""

    event_type: str  # "prepare-commit", "pre-commit", "post-commit", ..., "post-delete-tag", "post-revert"
    repository: Repository
    branch_id: BranchID
    source_ref: str
    commit_message: str
    committer: str
    metadata: Mapping[str, str]
    view: RefView
    changes: Callable[[], Iterator[Change]]
    commit: Commit | None = None
    read_action_files: Callable[[], Iterable[tuple[str, bytes]]] | None = None
    tag_id: TagID | None = None

    @property
    def repository_id(self) -> RepositoryID:
        return self.repository.id

    @property
    def commit_metadata(self) -> Mapping[str, str]:
        return self.metadata

    @property
    def commit_id(self) -> CommitID | None:
        return self.commit.id if self.commit else None


class Hooks(Protocol):
    """Optional callbacks, one per lakeFS event type (the type with ``_`` for ``-``), each
    called with a ``HookEvent``.  Pre events (``prepare_commit`` and ``pre_*``) raising abort
    the operation before anything is written (``HookFailed``; any other non-lakefuse exception
    is wrapped in one); ``post_*`` failures are logged only, the operation stands.  Any method
    may be missing.  ``pre_cherry_pick`` / ``post_cherry_pick`` are lakeFS events lakefuse
    never fires (it has no cherry-pick)."""

    def prepare_commit(self, event: HookEvent) -> None: ...

    def pre_commit(self, event: HookEvent) -> None: ...

    def post_commit(self, event: HookEvent) -> None: ...

    def pre_merge(self, event: HookEvent) -> None: ...

    def post_merge(self, event: HookEvent) -> None: ...

    def pre_create_branch(self, event: HookEvent) -> None: ...

    def post_create_branch(self, event: HookEvent) -> None: ...

    def pre_delete_branch(self, event: HookEvent) -> None: ...

    def post_delete_branch(self, event: HookEvent) -> None: ...

    def pre_create_tag(self, event: HookEvent) -> None: ...

    def post_create_tag(self, event: HookEvent) -> None: ...

    def pre_delete_tag(self, event: HookEvent) -> None: ...

    def post_delete_tag(self, event: HookEvent) -> None: ...

    def pre_revert(self, event: HookEvent) -> None: ...

    def post_revert(self, event: HookEvent) -> None: ...

    def pre_cherry_pick(self, event: HookEvent) -> None: ...

    def post_cherry_pick(self, event: HookEvent) -> None: ...


class HookDispatcher:
    """Builds and fires the hook events of the core's operations.  ``hooks`` (may be None, or
    replaced at any time) receives them; ``store_of(repository)`` is the committed store the
    content of branch and tag events is read from; ``action_files_reader`` (the catalog
    installs one) backs ``HookEvent.read_action_files``."""

    def __init__(self, hooks: Hooks | None, store_of: Callable[[Repository], CommittedStore]):
        self.hooks = hooks
        self.action_files_reader: ActionFilesReader | None = None
        self._store_of = store_of

    def event(self, **fields) -> HookEvent:
        reader = self.action_files_reader
        view = fields["view"]
        repo = fields["repository"]
        if reader is not None:
            fields["read_action_files"] = lambda: reader(repo, view)
        return HookEvent(**fields)

    def commit_events(self, repo: Repository, branch_id: str, source_ref: str, message: str, committer: str,
                      metadata: Mapping[str, str]) -> Callable[..., HookEvent]:
        """``make(event_type, view=..., changes=..., commit=None)``: the events of one operation
        that makes a commit (commit, merge, revert), which share everything but those."""

        def make(event_type: str, **fields) -> HookEvent:
            return self.event(event_type=event_type, repository=repo, branch_id=BranchID(branch_id),
                              source_ref=source_ref, commit_message=message, committer=committer,
                              metadata=dict(metadata), **fields)

        return make

    def ref_event(self, event_type: str, repo: Repository, at: Commit, *, branch_id: str = "", source_ref: str,
                  tag_id: str | None = None, with_commit: bool = True) -> HookEvent:
        """A branch or tag event: the action files are read from the commit ``at``; no commit is
        being made (empty message, committer and metadata)."""
        return self.event(event_type=event_type, repository=repo, branch_id=BranchID(branch_id),
                          source_ref=source_ref, commit_message="", committer="", metadata={},
                          view=RefView(self._store_of(repo), at.metarange_id), changes=no_changes,
                          commit=at if with_commit else None,
                          tag_id=TagID(tag_id) if tag_id is not None else None)

    def _hook_for(self, event_type: str):
        if self.hooks is None:
            return None
        return getattr(self.hooks, event_type.replace("-", "_"), None)

    def _prepared(self, event_type: str, make: Callable[[str], HookEvent]):
        """``(hook, event)`` of an event type that has a hook (the event built only then), or None."""
        hook = self._hook_for(event_type)
        return None if hook is None else (hook, make(event_type))

    def fire_pre(self, event_type: str, make: Callable[[str], HookEvent]) -> None:
        """Run the hook of a pre event (``make(event_type)`` builds the event, only if there is
        a hook): its failure aborts the caller (``HookFailed``)."""
        prepared = self._prepared(event_type, make)
        if prepared is None:
            return
        hook, event = prepared
        try:
            hook(event)
        except LakefuseError:
            raise
        except Exception as exc:  # a broken hook must not look like an internal error
            raise HookFailed(f"{event_type} hook failed: {exc}") from exc

    def fire_post(self, event_type: str, make: Callable[[str], HookEvent]) -> None:
        """Run the hook of a post event: its failure is logged, the operation stands."""
        prepared = self._prepared(event_type, make)
        if prepared is None:
            return
        hook, event = prepared
        try:
            hook(event)
        except Exception:
            target = f"tag {event.tag_id}" if event.tag_id else f"branch {event.branch_id}"
            log.exception("%s hook failed on %s of %s (ignored)", event_type, target, event.repository.id)
