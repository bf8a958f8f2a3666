"""``Graveler``: the version-control operations of lakefuse, on keys (``bytes``) and opaque
``ValueRecord`` values, over the three ports (``RefStore``, ``StagingStore``, one
``CommittedStore`` per storage namespace) and an optional hooks object.

Owns: repositories, branches, tags, staged writes, commit, reset, diff, log and the read path
of any ref.  What a record *means* (an object ``Entry``) is ``lakefuse.catalog``'s business;
how names and ref expressions read is ``refexpr``'s; commit IDs and the commit graph are
``commits``'; the merge table is ``merge``'s; merge and revert of a branch (``BranchMerger``:
the clean-destination check, the merge commit, the branch move, their hooks) are ``merging``'s;
overlaying staging on committed content is ``views``'; the ``Change`` type and the diffs are
``changes``'; the hook events and how they are fired (``HookDispatcher``) are ``hooks``' (which
event fires when is decided here and in ``merging``); the branch states last seen, which save
the branch-row read before a staged write or a read, and the re-checked read loop are
``branch_hints``'.

Consistency rules (see each method):

- A branch's visible content is its staging token, then its sealed tokens newest first, then
  its head commit.
- A staged write reads the branch, computes its rows (a delete first checks that its key is
  visible) and hands them to ``RefStore.stage_on_branch``, which writes them into the staging
  token in the same transaction that checks the branch is still in the state read - ordered, in
  the database, against seals and branch moves of every process.  If the branch moved, the
  write is computed again against the new state.  So a write lands whole in a token that is
  still the staging token, and a delete's existence check is still true when it lands.
- Commit seals the staging token: once the seal returns, no write of any process lands in the
  sealed token any more (writes arriving from then on go to the new token).  It then applies
  the sealed tokens to the head's metarange, adds the commit and compare-and-swaps the branch.
  Of two processes committing one branch at once the one that sealed last wins; the other
  gets ``ConcurrentUpdate`` and its sealed changes, still visible, go into the winner's commit
  (or stay staged for the next one).
- Point reads and listing pages on a branch re-check the branch when their answer came from
  the committed layer, or from a hinted state, and retry if a commit moved it (its staging rows
  may have been dropped under the read).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from functools import partial
from itertools import islice
from typing import Callable, Iterable, Iterator, Mapping

from lakefuse.errors import (
    AlreadyExists,
    ConcurrentUpdate,
    InvalidArgument,
    NoChanges,
    ObjectNotFound,
    ReadOnly,
    RefNotFound,
)
from lakefuse.graveler.branch_hints import BranchHints, CheckedReads, same_state
from lakefuse.graveler.changes import Change, EffectiveChanges, ListingPage, diff_metaranges, staged_vs_head
from lakefuse.graveler.commits import CommitGraph, new_commit
from lakefuse.graveler.committed.encoding import validate_key
from lakefuse.graveler.hooks import ActionFilesReader, HookDispatcher, HookEvent, Hooks
from lakefuse.graveler.merge import MergeStrategy
from lakefuse.graveler.merging import BranchMerger
from lakefuse.graveler.model import (
    BranchCursor,
    BranchID,
    Commit,
    CommitID,
    MetaRangeID,
    RepositoryID,
    StagingToken,
    TagID,
    ValueRecord,
)
from lakefuse.graveler.once import OncePerKey
from lakefuse.graveler.ports import Branch, CommittedStore, RefStore, Repository, StagingStore
from lakefuse.graveler.refexpr import (
    ResolvedRef,
    resolve_ref,
    validate_ref_name,
    validate_repository_name,
)
from lakefuse.graveler.views import RefView

log = logging.getLogger(__name__)

INITIAL_COMMIT_MESSAGE = "Repository created"
DEFAULT_BRANCH = "main"
SYSTEM_COMMITTER = "lakefuse"


def _new_token() -> StagingToken:
    return StagingToken(uuid.uuid4().hex)


def _show_key(key: bytes) -> str:
    return key.decode("utf-8", "replace")


def _check_text(value, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgument(f"{what} must be a non-empty string, got {value!r}")
    return value


class Graveler:
    """The version-control core.  ``committed_for(storage_namespace)`` returns the
    ``CommittedStore`` of a namespace (called once per namespace, then cached)."""

    def __init__(
        self,
        refs: RefStore,
        staging: StagingStore,
        committed_for: Callable[[str], CommittedStore],
        hooks: Hooks | None = None,
        *,
        clock: Callable[[], float] = time.time,
        commit_cache_size: int = 100_000,
        write_retries: int = 20,
        read_retries: int = 5,
        repository_cache_seconds: float = 5.0,
    ):
        self.refs = refs
        self.staging = staging
        self._branches = BranchHints(refs)  # see branch_hints: saves round trips, never trusted alone
        self._hooks = HookDispatcher(hooks, self._store_of)
        self.commits = CommitGraph(refs, commit_cache_size)
        self._committed: OncePerKey[str, CommittedStore] = OncePerKey(committed_for)
        self._clock = clock
        self._write_retries = write_retries
        self._read_retries = read_retries
        self._repo_cache: dict[str, tuple[float, Repository]] = {}
        self._repo_cache_seconds = repository_cache_seconds
        self._reads = CheckedReads(self._branches, self.commits, self.resolve, self._view_of, read_retries)
        self._merger = BranchMerger(  # shares the dispatcher: the hooks setter reaches it too
            refs=refs, commits=self.commits, staging=staging, store_of=self._store_of, hooks=self._hooks,
            repository=self._repo, resolve=self.resolve, branch_view=self._branch_view, new_token=_new_token,
            drop_tokens=self._drop_tokens, now=self._now)

    @property
    def hooks(self) -> Hooks | None:
        """The hooks object events are fired at (None: no hooks); may be replaced."""
        return self._hooks.hooks

    @hooks.setter
    def hooks(self, hooks: Hooks | None) -> None:
        self._hooks.hooks = hooks

    @property
    def action_files_reader(self) -> ActionFilesReader | None:
        """``(repository, view) -> [(path, bytes)]`` of the action files a hook event exposes
        (the catalog installs one)."""
        return self._hooks.action_files_reader

    @action_files_reader.setter
    def action_files_reader(self, reader: ActionFilesReader | None) -> None:
        self._hooks.action_files_reader = reader

    # ------------------------------------------------------------------------------------
    # plumbing

    def _now(self) -> int:
        return int(self._clock())

    def committed_store(self, storage_namespace: str) -> CommittedStore:
        return self._committed.get(storage_namespace)

    def _repo(self, repo_id: str) -> Repository:
        now = time.monotonic()
        cached = self._repo_cache.get(repo_id)
        if cached is not None and now - cached[0] < self._repo_cache_seconds:
            return cached[1]
        repo = self.refs.get_repository(RepositoryID(repo_id))
        self._repo_cache[repo_id] = (now, repo)
        return repo

    def repository(self, repo_id: str) -> Repository:
        """The repository, from a cache of a few seconds (repositories never change, only go)."""
        return self._repo(repo_id)

    def _store_of(self, repo: Repository) -> CommittedStore:
        return self.committed_store(repo.storage_namespace)

    def _branch_view(self, repo: Repository, branch: Branch, head: Commit | None = None) -> RefView:
        head = head or self.commits.get(repo.id, branch.commit_id)
        return RefView(self._store_of(repo), head.metarange_id, self.staging, (branch.staging_token, *branch.sealed_tokens))

    def _view_of(self, repo: Repository, resolved: ResolvedRef) -> RefView:
        if resolved.branch is not None:
            return self._branch_view(repo, resolved.branch, resolved.commit)
        return RefView(self._store_of(repo), resolved.commit.metarange_id)

    def _drop_tokens(self, tokens: Iterable[StagingToken]) -> None:
        for token in tokens:
            try:
                self.staging.drop(token)
            except Exception:  # the rows are unreachable anyway; never fail the operation
                log.exception("dropping staging token %s failed (ignored)", token)

    # ------------------------------------------------------------------------------------
    # repositories

    def create_repository(
        self,
        repo_id: str,
        storage_namespace: str,
        default_branch: str = DEFAULT_BRANCH,
        *,
        committer: str = SYSTEM_COMMITTER,
    ) -> Repository:
        """A repository with its default branch on an initial commit "Repository created"
        whose metarange is the empty one.  ``AlreadyExists`` for a taken name or a storage
        namespace another repository uses."""
        validate_repository_name(repo_id)
        validate_ref_name(default_branch, "branch")
        _check_text(storage_namespace, "storage namespace")
        for other in self.refs.list_repositories():
            if other.storage_namespace == storage_namespace and other.id != repo_id:
                raise AlreadyExists(
                    f"storage namespace {storage_namespace!r} is already used by repository {other.id!r}"
                )
        store = self.committed_store(storage_namespace)
        now = self._now()
        initial = new_commit(store.empty_metarange(), [], INITIAL_COMMIT_MESSAGE, committer, now)
        repo = Repository(
            id=RepositoryID(repo_id),
            storage_namespace=storage_namespace,
            default_branch=BranchID(default_branch),
            creation_date=now,
        )
        self.refs.create_repository(repo, initial, Branch(BranchID(default_branch), initial.id, _new_token()))
        self.commits.remember(repo.id, initial)
        return repo

    def get_repository(self, repo_id: str) -> Repository:
        return self.refs.get_repository(RepositoryID(repo_id))

    def list_repositories(self) -> list[Repository]:
        return self.refs.list_repositories()

    def delete_repository(self, repo_id: str) -> None:
        """Delete refs, commits and staged entries; stored objects and ranges stay."""
        self.refs.delete_repository(RepositoryID(repo_id))
        self._repo_cache.pop(repo_id, None)
        self._branches.forget(repo_id)
        self.commits.forget_repository(RepositoryID(repo_id))

    # ------------------------------------------------------------------------------------
    # refs

    def resolve(self, repo_id: str, ref: str) -> ResolvedRef:
        """Resolve a ref expression (see ``refexpr``)."""
        return resolve_ref(self.refs, RepositoryID(repo_id), ref, self.commits.get)

    def get_commit(self, repo_id: str, commit_id: str) -> Commit:
        return self.commits.get(RepositoryID(repo_id), CommitID(commit_id))

    def create_branch(self, repo_id: str, branch_id: str, source_ref: str) -> Branch:
        """A new branch at the commit ``source_ref`` resolves to (staged changes of a source
        branch are not carried over).  ``AlreadyExists`` if a branch or tag has the name.
        Fires pre-create-branch (its failure aborts: no branch) and post-create-branch, with
        the action files of the source commit."""
        validate_ref_name(branch_id, "branch")
        repo = self._repo(repo_id)
        if self._tag_exists(repo.id, branch_id):
            raise AlreadyExists(f"cannot create branch {branch_id!r}: a tag of that name exists in repository {repo_id!r}")
        if self._branch_exists(repo.id, branch_id):  # before the hooks: they must not see a doomed operation
            raise AlreadyExists(f"branch {branch_id!r} already exists in repository {repo_id!r}")
        source = self.resolve(repo_id, source_ref).commit
        event = partial(self._hooks.ref_event, repo=repo, at=source, branch_id=branch_id, source_ref=source_ref)
        self._hooks.fire_pre("pre-create-branch", event)
        branch = Branch(BranchID(branch_id), source.id, _new_token())
        self.refs.create_branch(repo.id, branch)
        self._hooks.fire_post("post-create-branch", event)
        return branch

    def get_branch(self, repo_id: str, branch_id: str) -> Branch:
        return self._branches.read(repo_id, branch_id)

    def branch_changes(
        self, repo_id: str, branch_id: str, since: BranchCursor | None, limit: int = 10_000
    ) -> tuple[BranchCursor, tuple[bytes, ...] | None]:
        """The change feed of a branch: ``(cursor now, keys)``, ``keys`` being the keys other
        writers (other origins than ``self.refs.origin``) staged on the branch after ``since``,
        bytewise sorted, or None when anything may have changed: no ``since``, the head or the
        staging token moved (commit, merge, revert, reset), a ``reset`` of a prefix, or more than
        ``limit`` keys.  Pass the returned cursor as ``since`` next time.  One branch read and one
        ``StagingStore.changes_since``; RefNotFound / RepositoryNotFound as ``get_branch``."""
        branch = self.refs.get_branch(RepositoryID(repo_id), BranchID(branch_id))
        same = (
            since is not None
            and since.commit_id == branch.commit_id
            and since.staging_token == branch.staging_token
        )
        if same:
            changes = self.staging.changes_since(
                branch.staging_token, since.version, limit, exclude_origin=self.refs.origin
            )
        else:  # only the version: limit 0 reads at most one row
            changes = self.staging.changes_since(branch.staging_token, 0, 0)
        cursor = BranchCursor(branch.commit_id, branch.staging_token, changes.version)
        return cursor, changes.keys if same else None

    def list_branches(self, repo_id: str) -> list[Branch]:
        return self.refs.list_branches(RepositoryID(repo_id))

    def delete_branch(self, repo_id: str, branch_id: str) -> None:
        """Delete a branch and its staged changes; the default branch cannot be deleted.  Fires
        pre-delete-branch (its failure aborts: the branch and its staged changes stay) and
        post-delete-branch, with the action files of the branch's head commit."""
        repo = self._repo(repo_id)
        if branch_id == repo.default_branch:
            raise InvalidArgument(f"cannot delete {branch_id!r}: it is the default branch of repository {repo_id!r}")
        branch = self.refs.get_branch(repo.id, BranchID(branch_id))
        head = self.commits.get(repo.id, branch.commit_id)
        event = partial(self._hooks.ref_event, repo=repo, at=head, branch_id=branch_id, source_ref=head.id, with_commit=False)
        self._hooks.fire_pre("pre-delete-branch", event)
        self.refs.delete_branch(repo.id, BranchID(branch_id))
        self._branches.forget(repo_id, branch_id)
        self._drop_tokens((branch.staging_token, *branch.sealed_tokens))
        self._hooks.fire_post("post-delete-branch", event)

    def _tag_exists(self, repo_id: RepositoryID, name: str) -> bool:
        try:
            self.refs.get_tag(repo_id, TagID(name))
            return True
        except RefNotFound:
            return False

    def _branch_exists(self, repo_id: RepositoryID, name: str) -> bool:
        try:
            self.refs.get_branch(repo_id, BranchID(name))
            return True
        except RefNotFound:
            return False

    def create_tag(self, repo_id: str, tag_id: str, ref: str, force: bool = False) -> CommitID:
        """Tag the commit ``ref`` resolves to.  ``AlreadyExists`` if the tag exists (unless
        ``force``) or a branch has the name.  Fires pre-create-tag (its failure aborts: no tag,
        or the old one when forcing) and post-create-tag, with the action files of the commit."""
        validate_ref_name(tag_id, "tag")
        repo = self._repo(repo_id)
        if self._branch_exists(repo.id, tag_id):
            raise AlreadyExists(f"cannot create tag {tag_id!r}: a branch of that name exists in repository {repo_id!r}")
        if not force and self._tag_exists(repo.id, tag_id):  # before the hooks: they must not see a doomed operation
            raise AlreadyExists(f"tag {tag_id!r} already exists in repository {repo_id!r}")
        commit = self.resolve(repo_id, ref).commit
        event = partial(self._hooks.ref_event, repo=repo, at=commit, source_ref=commit.id, tag_id=tag_id)
        self._hooks.fire_pre("pre-create-tag", event)
        self.refs.create_tag(repo.id, TagID(tag_id), commit.id, force=force)
        self._hooks.fire_post("post-create-tag", event)
        return commit.id

    def get_tag(self, repo_id: str, tag_id: str) -> CommitID:
        return self.refs.get_tag(RepositoryID(repo_id), TagID(tag_id))

    def list_tags(self, repo_id: str) -> list[tuple[TagID, CommitID]]:
        return self.refs.list_tags(RepositoryID(repo_id))

    def delete_tag(self, repo_id: str, tag_id: str) -> None:
        """Delete a tag (``RefNotFound`` if there is none).  Fires pre-delete-tag (its failure
        aborts: the tag stays) and post-delete-tag, with the action files of the tagged commit."""
        repo = self._repo(repo_id)
        commit_id = self.refs.get_tag(repo.id, TagID(tag_id))

        def event(event_type: str) -> HookEvent:
            commit = self.commits.get(repo.id, commit_id)
            return self._hooks.ref_event(event_type, repo, commit, source_ref=commit.id, tag_id=tag_id)

        self._hooks.fire_pre("pre-delete-tag", event)
        self.refs.delete_tag(repo.id, TagID(tag_id))
        self._hooks.fire_post("post-delete-tag", event)

    # ------------------------------------------------------------------------------------
    # reading

    def view(self, repo_id: str, ref: str) -> RefView:
        """A reader of ``ref`` as it is now (for bulk reads; a branch view does not follow
        later commits of the branch, use ``get`` / ``list_objects`` for re-checked reads)."""
        return self._view_of(self._repo(repo_id), self.resolve(repo_id, ref))

    def get(self, repo_id: str, ref: str, key: bytes) -> ValueRecord:
        """The record of ``key`` in ``ref`` (staged changes included on a branch).
        ``ObjectNotFound`` if absent or deleted."""
        record = self._reads.read(self._repo(repo_id), ref, lambda view: view.lookup(key))
        if record is None:
            raise ObjectNotFound(f"object {_show_key(key)!r} not found in {ref!r} of repository {repo_id!r}")
        return record

    def lookup_path(self, repo_id: str, ref: str, key: bytes,
                    children: bytes) -> tuple[ValueRecord | None, tuple[bytes, ValueRecord] | None]:
        """What a file system asks of a name, in one read (re-checked like ``get``): the
        record of ``key`` if there is one, else ``(None, first)`` with the first visible item
        under ``children`` (``key`` + "/": a directory, whose marker object is its first key
        when it has one), or ``(None, None)``."""
        def read(view: RefView):
            record, from_staging = view.lookup(key)
            if record is not None:
                return (record, None), from_staging
            return (None, next(view.list(children), None)), False

        return self._reads.read(self._repo(repo_id), ref, read)

    def list_objects(
        self,
        repo_id: str,
        ref: str,
        prefix: bytes = b"",
        delimiter: bytes = b"",
        after: bytes = b"",
        limit: int = 1000,
        markers: bool = False,
    ) -> ListingPage:
        """One page of at most ``limit`` items of ``RefView.list`` (see there)."""
        if limit < 1:
            raise InvalidArgument(f"listing limit must be >= 1, got {limit}")
        items = self._reads.read(self._repo(repo_id), ref, lambda view: (
            list(islice(view.list(prefix, delimiter, after, markers), limit + 1)), False))
        return ListingPage(items=items[:limit], has_more=len(items) > limit)

    def iter_objects(
        self, repo_id: str, ref: str, prefix: bytes = b"", delimiter: bytes = b"", after: bytes = b""
    ) -> Iterator[tuple[bytes, ValueRecord | None]]:
        """The whole listing, streamed page by page (each page re-checked like
        ``list_objects``)."""
        page_size = 1000
        while True:
            page = self.list_objects(repo_id, ref, prefix, delimiter, after, page_size)
            yield from page.items
            if not page.has_more:
                return
            after = page.next_after

    # ------------------------------------------------------------------------------------
    # staged writes

    def _staged_write(
        self, repo_id: str, branch_id: str, rows_for: Callable[[Repository, Branch], list[tuple[bytes, ValueRecord | None]]]
    ) -> list[tuple[bytes, ValueRecord | None]]:
        """Stage the rows ``rows_for(repo, branch)`` computes from the branch's state, checked
        against that state in the write's transaction; computed again if the branch moved.
        Returns the rows written."""
        repo = self._repo(repo_id)
        branch = self._writable_branch(repo, branch_id)  # maybe a hint: the write's transaction checks it
        for _attempt in range(self._write_retries):
            rows = rows_for(repo, branch)
            if rows:
                if self.refs.stage_on_branch(repo.id, branch.id, branch, rows):
                    return rows
                branch = self._branches.read(repo_id, branch_id)
                continue
            # nothing to write: the existence checks hold if the tokens they read are still the
            # branch's (a commit may have dropped one under them)
            current = self._branches.read(repo_id, branch_id)
            if same_state(current, branch):
                return rows
            branch = current
        raise ConcurrentUpdate(f"branch {branch_id!r} of repository {repo_id!r} keeps moving; nothing written, retry")

    def writable_branch(self, repo_id: str, ref: str) -> Branch:
        """The branch ``ref`` (as last seen by this process: a write checks it); ``ReadOnly``
        if it names a tag or commit, else ``RefNotFound``."""
        return self._writable_branch(self._repo(repo_id), ref)

    def _writable_branch(self, repo: Repository, ref: str) -> Branch:
        hint = self._branches.hint(repo.id, ref)
        if hint is not None:
            return hint
        try:
            return self._branches.read(repo.id, ref)
        except RefNotFound:
            try:
                resolved = self.resolve(repo.id, ref)
            except (RefNotFound, InvalidArgument):
                raise RefNotFound(f"branch {ref!r} not found in repository {repo.id!r}") from None
            raise ReadOnly(f"{ref!r} is {resolved.kind.with_article} of repository {repo.id!r}, not a branch: read-only") from None

    def set(self, repo_id: str, branch_id: str, record: ValueRecord) -> None:
        """Stage ``record`` (under ``record.key``) on a branch."""
        self.stage(repo_id, branch_id, [(record.key, record)])

    def delete(self, repo_id: str, branch_id: str, key: bytes) -> bool:
        """Stage the deletion of ``key``.  A key visible nowhere is left alone (no tombstone);
        returns whether something was deleted."""
        validate_key(key)

        def rows_for(repo: Repository, branch: Branch) -> list[tuple[bytes, ValueRecord | None]]:
            return [(key, None)] if self._branch_view(repo, branch).get(key) is not None else []

        return bool(self._staged_write(repo_id, branch_id, rows_for))

    def stage(self, repo_id: str, branch_id: str, changes: Iterable[tuple[bytes, ValueRecord | None]],
              deleted_exist: bool = False) -> None:
        """Stage several keys at once, all or nothing (``None`` deletes; deleting a key visible
        nowhere is skipped, unchecked with ``deleted_exist``: its tombstone changes nothing; a
        key given twice: the last one counts).  A directory rename is one call."""
        latest: dict[bytes, ValueRecord | None] = {}
        for key, record in changes:
            validate_key(key)
            if record is not None and (not isinstance(record, ValueRecord) or record.key != key):
                raise InvalidArgument(f"staged value for {_show_key(key)!r} must be a ValueRecord with that key")
            latest[key] = record  # a key given twice: the last one counts
        items = list(latest.items())
        if not items:
            return

        def rows_for(repo: Repository, branch: Branch) -> list[tuple[bytes, ValueRecord | None]]:
            if deleted_exist or all(record is not None for _key, record in items):
                return items
            view = self._branch_view(repo, branch)
            return [(key, record) for key, record in items if record is not None or view.get(key) is not None]

        self._staged_write(repo_id, branch_id, rows_for)

    def reset(self, repo_id: str, branch_id: str, prefix: bytes | None = None) -> None:
        """Drop the staged changes of a branch: all of them (a fresh staging token), or only
        the keys under ``prefix``."""
        repo = self._repo(repo_id)
        branch = self.refs.get_branch(repo.id, BranchID(branch_id))
        tokens = (branch.staging_token, *branch.sealed_tokens)
        if prefix:
            for token in tokens:
                self.staging.drop_prefix(token, prefix)
            return
        fresh = Branch(branch.id, branch.commit_id, _new_token(), ())
        self.refs.compare_and_swap_branch(repo.id, branch.id, branch, fresh)
        self._branches.saw(repo.id, fresh)
        self._drop_tokens(tokens)

    # ------------------------------------------------------------------------------------
    # diff

    def diff(self, repo_id: str, left_ref: str, right_ref: str, prefix: bytes = b"") -> Iterator[Change]:
        """Committed differences from ``left_ref`` to ``right_ref`` in key order (a branch
        stands for its head commit; staged changes are ``diff_uncommitted``'s).  Time follows
        the difference: equal ranges are skipped unread."""
        repo = self._repo(repo_id)
        left = self.resolve(repo_id, left_ref).commit
        right = self.resolve(repo_id, right_ref).commit
        return diff_metaranges(self._store_of(repo), left.metarange_id, right.metarange_id, prefix)

    def diff_uncommitted(self, repo_id: str, branch_id: str, prefix: bytes = b"") -> Iterator[Change]:
        """Staged changes of a branch against its head commit, in key order.  A staged entry
        with the committed identity, or a tombstone of an absent key, is not a change."""
        repo = self._repo(repo_id)
        branch = self.refs.get_branch(repo.id, BranchID(branch_id))
        return staged_vs_head(self._branch_view(repo, branch), prefix)

    def has_uncommitted(self, repo_id: str, branch_id: str) -> bool:
        return next(self.diff_uncommitted(repo_id, branch_id), None) is not None

    # ------------------------------------------------------------------------------------
    # history

    def log(self, repo_id: str, ref: str, amount: int | None = None, all_parents: bool = False) -> Iterator[Commit]:
        """History from ``ref``, newest first: first parents (git log --first-parent), or every
        ancestor (``all_parents``) by creation date.  At most ``amount`` commits."""
        head = self.resolve(repo_id, ref).commit
        history = self.commits.log(RepositoryID(repo_id), head, all_parents)
        return islice(history, amount) if amount is not None else history

    def merge_base(self, repo_id: str, left_ref: str, right_ref: str) -> Commit | None:
        left = self.resolve(repo_id, left_ref).commit
        right = self.resolve(repo_id, right_ref).commit
        return self.commits.merge_base(RepositoryID(repo_id), left, right)

    # ------------------------------------------------------------------------------------
    # commit

    def commit(
        self,
        repo_id: str,
        branch_id: str,
        message: str,
        committer: str,
        metadata: Mapping[str, str] | None = None,
        allow_empty: bool = False,
        make_durable: Callable[[], None] | None = None,
    ) -> Commit:
        """Commit the staged changes of a branch (see the module docstring for the procedure).
        ``make_durable`` is called once the changes are sealed, before anything is written:
        the data their values point at must then survive a crash of the machine.
        ``NoChanges`` if nothing changes and not ``allow_empty``; ``ConcurrentUpdate`` if the
        branch moved meanwhile (the changes stay staged); ``HookFailed`` from prepare-commit
        (fired before the staging token is sealed: writes its hooks make to the branch go into
        this commit; its failure leaves staging untouched) or pre-commit (fired on the sealed
        content; its failure leaves the changes staged, in sealed tokens)."""
        _check_text(message, "commit message")
        _check_text(committer, "committer")
        metadata = dict(metadata or {})
        repo = self._repo(repo_id)
        store = self._store_of(repo)
        branch = self.refs.get_branch(repo.id, BranchID(branch_id))
        if not allow_empty and all(
            self.staging.count(token) == 0 for token in (branch.staging_token, *branch.sealed_tokens)
        ):
            raise NoChanges(f"nothing to commit on branch {branch_id!r} of repository {repo_id!r}")

        event = self._hooks.commit_events(repo, branch_id, branch_id, message, committer, metadata)

        def prepare_event(event_type: str) -> HookEvent:
            prepared = self._branch_view(repo, branch)
            return event(event_type, view=prepared, changes=lambda: staged_vs_head(prepared))

        self._hooks.fire_pre("prepare-commit", prepare_event)

        sealed = self.refs.seal_staging_token(repo.id, BranchID(branch_id), _new_token())
        self._branches.saw(repo.id, sealed)
        head = self.commits.get(repo.id, sealed.commit_id)
        content = RefView(store, head.metarange_id, self.staging, sealed.sealed_tokens)
        self._hooks.fire_pre("pre-commit", partial(event, view=content, changes=lambda: staged_vs_head(content)))

        if make_durable is not None:
            make_durable()
        effective = EffectiveChanges(store, head.metarange_id, content.staged_changes())
        metarange = store.apply(head.metarange_id, effective)
        if not effective.count:
            metarange = head.metarange_id
        if metarange == head.metarange_id and not allow_empty:
            self._forget_sealed(repo.id, sealed)
            raise NoChanges(f"nothing to commit on branch {branch_id!r} of repository {repo_id!r}: staged entries equal the head")

        commit = new_commit(metarange, [head], message, committer, self._now(), metadata)
        self.refs.add_commit(repo.id, commit)
        self.commits.remember(repo.id, commit)
        try:
            moved = Branch(sealed.id, commit.id, sealed.staging_token, ())
            self.refs.compare_and_swap_branch(repo.id, BranchID(branch_id), sealed, moved)
            self._branches.saw(repo.id, moved)
        except ConcurrentUpdate:
            raise ConcurrentUpdate(
                f"commit on branch {branch_id!r} of repository {repo_id!r} lost a race with another update of the "
                "branch; the changes are still staged, retry"
            ) from None
        self._drop_tokens(sealed.sealed_tokens)

        self._hooks.fire_post("post-commit", partial(
            event, view=RefView(store, metarange), commit=commit,
            changes=lambda: diff_metaranges(store, head.metarange_id, metarange)))
        return commit

    def commit_metarange(self, repo_id: str, expected: Branch, metarange_id: MetaRangeID, message: str,
                         committer: str, metadata: Mapping[str, str] | None = None) -> Commit:
        """Commit a metarange built outside the staging area (a bulk import) on top of the
        head of ``expected``, and move the branch to it if the branch is still ``expected``
        (else ConcurrentUpdate: the caller rebuilds on the new head and retries).  The staging
        area is left as it is, and no hooks run."""
        repo = self.repository(repo_id)
        head = self.get_commit(repo_id, expected.commit_id)
        commit = new_commit(metarange_id, [head], message, committer, self._now(), metadata or {})
        self.refs.add_commit(repo.id, commit)
        self.commits.remember(repo.id, commit)
        self.refs.compare_and_swap_branch(repo.id, expected.id, expected, replace(expected, commit_id=commit.id))
        return commit

    def _forget_sealed(self, repo_id: RepositoryID, sealed: Branch) -> None:
        """The sealed tokens changed nothing: unlist and drop them (best effort)."""
        try:
            self.refs.compare_and_swap_branch(
                repo_id, sealed.id, sealed, Branch(sealed.id, sealed.commit_id, sealed.staging_token, ())
            )
        except ConcurrentUpdate:
            return
        self._drop_tokens(sealed.sealed_tokens)

    # ------------------------------------------------------------------------------------
    # merge and revert

    def merge(
        self,
        repo_id: str,
        dest_branch_id: str,
        source_ref: str,
        committer: str,
        message: str | None = None,
        metadata: Mapping[str, str] | None = None,
        strategy: str | MergeStrategy | None = None,
    ) -> Commit:
        """Merge the commit ``source_ref`` resolves to into a branch: a new commit with the
        destination head as first parent and the source as second (also when a fast-forward
        would do).  ``DirtyBranch`` if the destination has uncommitted changes, ``NoChanges``
        if the source is already contained in it, ``MergeConflict`` (nothing written) unless
        ``strategy`` ("dest-wins" / "source-wins") resolves the conflicts."""
        _check_text(committer, "committer")
        return self._merger.merge(repo_id, dest_branch_id, source_ref, committer, message, metadata, strategy)

    def revert(
        self,
        repo_id: str,
        branch_id: str,
        ref: str,
        committer: str,
        parent_number: int | None = None,
        message: str | None = None,
        metadata: Mapping[str, str] | None = None,
        allow_empty: bool = False,
    ) -> Commit:
        """A new commit on the branch undoing the changes the commit ``ref`` made relative to
        its parent (``parent_number`` N, like ``git revert -m N``; required for merge
        commits).  Three-way merge with base = that commit, source = its parent, destination =
        the branch head; conflicts raise ``MergeConflict``, nothing written.  Fires pre-revert
        (its failure aborts: the branch does not move) and post-revert, with the action files of
        the branch."""
        _check_text(committer, "committer")
        return self._merger.revert(repo_id, branch_id, ref, committer, parent_number, message, metadata, allow_empty)
