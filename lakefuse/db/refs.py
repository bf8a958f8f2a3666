"""``SqlRefStore``: the RefStore port (repositories, branches, tags, commits) on SQL.

Every method is one transaction.  Moving a branch is a conditional ``UPDATE`` whose ``WHERE``
names the whole expected state (commit, staging token, sealed tokens): with SQLite's
``BEGIN IMMEDIATE`` and PostgreSQL's row locks, of two concurrent movers exactly one matches;
the other updates no row and gets ``ConcurrentUpdate`` - never a lost update.

Deleting a branch or a repository also deletes the staged entries (and the change-feed
versions) of its staging and sealed tokens (same database, same transaction).

A staged write (``stage_on_branch``) checks the branch's state and upserts its rows in one
transaction, so it is ordered against the seal of the token it writes to, across processes:

- PostgreSQL: the check reads the branch row ``FOR SHARE``.  That lock conflicts with the
  seal's ``SELECT ... FOR UPDATE`` and with the ``FOR NO KEY UPDATE`` lock of the
  compare-and-swap's plain ``UPDATE`` (``FOR KEY SHARE`` would not stop the latter: a reset's
  swap could then drop a token under a write still landing in it).  So a seal or swap waits
  for the writes that passed the check, and a write arriving meanwhile waits for the seal and
  then reads the new state (READ COMMITTED re-reads a row it waited for).
- SQLite: write transactions are serialized by ``BEGIN IMMEDIATE``; check and write are in one.

Staged writes bump the token's change-feed version and stamp their rows with it and with
``Database.origin``, exactly as ``SqlStagingStore.set_many`` does (``lakefuse.db.staging``):
writes through a ref store and a staging store on one ``Database`` object are the same origin.

Deleting a repository locks its branch rows before deleting their staged rows, so a write in
progress finishes first (and cannot leave rows behind, nor deadlock with the delete).
"""

from __future__ import annotations

import json
from typing import Iterable, Iterator

from sqlalchemy import and_, bindparam, delete, exists, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from lakefuse.db import schema
from lakefuse.db.database import Database
from lakefuse.db.staging import StagingWriter, delete_tokens, key_bytes, staging_row
from lakefuse.errors import AlreadyExists, ConcurrentUpdate, RefNotFound, RepositoryNotFound
from lakefuse.graveler.model import BranchID, Commit, CommitID, RepositoryID, StagingToken, TagID, ValueRecord
from lakefuse.graveler.ports import Branch, Repository

_repos = schema.repositories
_branches = schema.branches
_tags = schema.tags
_commits = schema.commits

#: the branch-row read every read of a branch ends with (``CheckedReads``), built once: a
#: statement built per call costs SQLAlchemy its construction and cache key (about half of
#: the read on SQLite)
_GET_BRANCH = select(_branches.c.name, _branches.c.commit_id, _branches.c.staging_token,
                     _branches.c.sealed_tokens).where(_branches.c.repo == bindparam("repo"),
                                                      _branches.c.name == bindparam("name"))

#: ``stage_on_branch``'s check of the branch row (FOR SHARE on PostgreSQL), built once: the
#: stager runs it for every batch of closed files
_CHECK_BRANCH_FOR_STAGING = select(_branches.c.commit_id, _branches.c.staging_token, _branches.c.sealed_tokens).where(
    _branches.c.repo == bindparam("repo"), _branches.c.name == bindparam("name")).with_for_update(read=True)

_COMMIT_PAGE = 1000


def encode_tokens(tokens) -> str:
    """Canonical JSON of a token list: equal lists always give equal text (CAS compares it)."""
    return json.dumps([str(t) for t in tokens], separators=(",", ":"))


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _branch_of(row) -> Branch:
    return _branch(row.name, row.commit_id, row.staging_token, row.sealed_tokens)


def _branch(name: str, commit_id: str, staging_token: str, sealed_tokens: str) -> Branch:
    return Branch(
        id=BranchID(name),
        commit_id=CommitID(commit_id),
        staging_token=StagingToken(staging_token),
        sealed_tokens=tuple(StagingToken(t) for t in json.loads(sealed_tokens)),
    )


def _commit_of(row) -> Commit:
    return Commit(
        id=CommitID(row.id),
        metarange_id=row.metarange_id,
        parents=tuple(CommitID(p) for p in json.loads(row.parents)),
        message=row.message,
        committer=row.committer,
        creation_date=int(row.creation_date),
        metadata=json.loads(row.metadata),
        generation=int(row.generation),
    )


def _commit_row(repo_id: str, commit: Commit) -> dict:
    return {
        "repo": repo_id,
        "id": commit.id,
        "metarange_id": commit.metarange_id,
        "parents": _json([str(p) for p in commit.parents]),
        "message": commit.message,
        "committer": commit.committer,
        "creation_date": int(commit.creation_date),
        "metadata": _json(dict(commit.metadata)),
        "generation": int(commit.generation),
    }


def _normalized(commit: Commit) -> Commit:
    """The commit as it reads back from the database (tuple parents, dict metadata)."""
    return Commit(
        id=commit.id,
        metarange_id=commit.metarange_id,
        parents=tuple(commit.parents),
        message=commit.message,
        committer=commit.committer,
        creation_date=int(commit.creation_date),
        metadata=dict(commit.metadata),
        generation=int(commit.generation),
    )


def _prefix_successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (None: none)."""
    chars = list(prefix)
    while chars and ord(chars[-1]) == 0x10FFFF:
        chars.pop()
    if not chars:
        return None
    last = ord(chars[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # skip surrogates: not encodable in UTF-8
        last = 0xE000
    chars[-1] = chr(last)
    return "".join(chars)


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


class SqlRefStore:
    """RefStore on a lakefuse ``Database`` (see ``lakefuse.graveler.ports.RefStore``)."""

    def __init__(self, database: Database):
        self._db = database
        self._writer = StagingWriter(database)

    @property
    def origin(self) -> str:
        """The origin ``stage_on_branch`` stamps on staged rows: the database's."""
        return self._db.origin

    # helpers ------------------------------------------------------------------------------
    @staticmethod
    def _repo_exists(conn: Connection, repo_id: str) -> bool:
        return conn.execute(select(exists().where(_repos.c.id == repo_id))).scalar_one()

    def _require_repo(self, conn: Connection, repo_id: str) -> None:
        if not self._repo_exists(conn, repo_id):
            raise RepositoryNotFound(f"repository {repo_id!r} not found")

    def _missing_branch(self, conn: Connection, repo_id: str, branch_id: str) -> Exception:
        if not self._repo_exists(conn, repo_id):
            return RepositoryNotFound(f"repository {repo_id!r} not found")
        return RefNotFound(f"branch {branch_id!r} not found in repository {repo_id!r}")

    @staticmethod
    def _drop_staging(conn: Connection, tokens: set[str]) -> None:
        delete_tokens(conn, tokens)

    # repositories -------------------------------------------------------------------------
    def create_repository(self, repo: Repository, initial_commit: Commit, branch: Branch) -> None:
        try:
            with self._db.write() as conn:
                if self._repo_exists(conn, repo.id):
                    raise AlreadyExists(f"repository {repo.id!r} already exists")
                conn.execute(
                    insert(_repos).values(
                        id=repo.id,
                        storage_namespace=repo.storage_namespace,
                        default_branch=repo.default_branch,
                        creation_date=int(repo.creation_date),
                    )
                )
                conn.execute(insert(_commits).values(**_commit_row(repo.id, initial_commit)))
                conn.execute(insert(_branches).values(**self._branch_row(repo.id, branch)))
        except IntegrityError:  # created concurrently by another process
            raise AlreadyExists(f"repository {repo.id!r} already exists") from None

    def get_repository(self, repo_id: RepositoryID) -> Repository:
        with self._db.read() as conn:
            row = conn.execute(select(_repos).where(_repos.c.id == repo_id)).one_or_none()
        if row is None:
            raise RepositoryNotFound(f"repository {repo_id!r} not found")
        return self._repository_of(row)

    def list_repositories(self) -> list[Repository]:
        with self._db.read() as conn:
            rows = conn.execute(select(_repos).order_by(_repos.c.id)).all()
        return [self._repository_of(row) for row in rows]

    def delete_repository(self, repo_id: RepositoryID) -> None:
        with self._db.write() as conn:
            self._require_repo(conn, repo_id)
            tokens: set[str] = set()
            for row in conn.execute(
                select(_branches.c.staging_token, _branches.c.sealed_tokens)
                .where(_branches.c.repo == repo_id)
                .with_for_update()
            ):
                tokens.add(row.staging_token)
                tokens.update(json.loads(row.sealed_tokens))
            self._drop_staging(conn, tokens)
            for table in (_branches, _tags, _commits):
                conn.execute(delete(table).where(table.c.repo == repo_id))
            conn.execute(delete(_repos).where(_repos.c.id == repo_id))

    @staticmethod
    def _repository_of(row) -> Repository:
        return Repository(
            id=RepositoryID(row.id),
            storage_namespace=row.storage_namespace,
            default_branch=BranchID(row.default_branch),
            creation_date=int(row.creation_date),
        )

    # branches -----------------------------------------------------------------------------
    @staticmethod
    def _branch_row(repo_id: str, branch: Branch) -> dict:
        return {
            "repo": repo_id,
            "name": branch.id,
            "commit_id": branch.commit_id,
            "staging_token": branch.staging_token,
            "sealed_tokens": encode_tokens(branch.sealed_tokens),
        }

    def create_branch(self, repo_id: RepositoryID, branch: Branch) -> None:
        try:
            with self._db.write() as conn:
                self._require_repo(conn, repo_id)
                conn.execute(insert(_branches).values(**self._branch_row(repo_id, branch)))
        except IntegrityError:
            raise AlreadyExists(f"branch {branch.id!r} already exists in repository {repo_id!r}") from None

    def get_branch(self, repo_id: RepositoryID, branch_id: BranchID) -> Branch:
        rows = self._db.rows(_GET_BRANCH, {"repo": repo_id, "name": branch_id})
        if not rows:
            with self._db.read() as conn:
                raise self._missing_branch(conn, repo_id, branch_id)
        return _branch(*rows[0])

    def list_branches(self, repo_id: RepositoryID) -> list[Branch]:
        with self._db.read() as conn:
            rows = conn.execute(
                select(_branches).where(_branches.c.repo == repo_id).order_by(_branches.c.name)
            ).all()
            if not rows:
                self._require_repo(conn, repo_id)
        return [_branch_of(row) for row in rows]

    def delete_branch(self, repo_id: RepositoryID, branch_id: BranchID) -> None:
        with self._db.write() as conn:
            row = conn.execute(
                select(_branches.c.staging_token, _branches.c.sealed_tokens).where(
                    _branches.c.repo == repo_id, _branches.c.name == branch_id
                )
            ).one_or_none()
            if row is None:
                raise self._missing_branch(conn, repo_id, branch_id)
            conn.execute(delete(_branches).where(_branches.c.repo == repo_id, _branches.c.name == branch_id))
            self._drop_staging(conn, {row.staging_token, *json.loads(row.sealed_tokens)})

    def seal_staging_token(self, repo_id: RepositoryID, branch_id: BranchID, new_token: StagingToken) -> Branch:
        with self._db.write() as conn:
            row = conn.execute(
                select(_branches)
                .where(_branches.c.repo == repo_id, _branches.c.name == branch_id)
                .with_for_update()
            ).one_or_none()
            if row is None:
                raise self._missing_branch(conn, repo_id, branch_id)
            current = _branch_of(row)
            sealed = Branch(
                id=current.id,
                commit_id=current.commit_id,
                staging_token=new_token,
                sealed_tokens=(current.staging_token, *current.sealed_tokens),
            )
            conn.execute(
                update(_branches)
                .where(_branches.c.repo == repo_id, _branches.c.name == branch_id)
                .values(staging_token=new_token, sealed_tokens=encode_tokens(sealed.sealed_tokens))
            )
        return sealed

    def compare_and_swap_branch(self, repo_id: RepositoryID, branch_id: BranchID, expected: Branch, new: Branch) -> None:
        with self._db.write() as conn:
            result = conn.execute(
                update(_branches)
                .where(
                    and_(
                        _branches.c.repo == repo_id,
                        _branches.c.name == branch_id,
                        _branches.c.commit_id == expected.commit_id,
                        _branches.c.staging_token == expected.staging_token,
                        _branches.c.sealed_tokens == encode_tokens(expected.sealed_tokens),
                    )
                )
                .values(
                    commit_id=new.commit_id,
                    staging_token=new.staging_token,
                    sealed_tokens=encode_tokens(new.sealed_tokens),
                )
            )
            if result.rowcount == 1:
                return
            found = conn.execute(
                select(exists().where(_branches.c.repo == repo_id, _branches.c.name == branch_id))
            ).scalar_one()
            if not found:
                raise self._missing_branch(conn, repo_id, branch_id)
        raise ConcurrentUpdate(f"branch {branch_id!r} of repository {repo_id!r} moved concurrently; retry")

    def stage_on_branch(
        self,
        repo_id: RepositoryID,
        branch_id: BranchID,
        expected: Branch,
        items: Iterable[tuple[bytes, ValueRecord | None]],
    ) -> bool:
        """See ``RefStore.stage_on_branch`` and the module docstring.  Rows are upserted in key
        order, so two writers staging overlapping keys cannot deadlock on PostgreSQL."""
        wanted = (expected.commit_id, expected.staging_token, encode_tokens(expected.sealed_tokens))
        with self._db.write() as conn:
            row = conn.execute(_CHECK_BRANCH_FOR_STAGING, {"repo": repo_id, "name": branch_id}).one_or_none()
            if row is None or tuple(row) != wanted:
                return False
            latest = {key_bytes(key): value for key, value in items}
            rows = [staging_row(expected.staging_token, key, latest[key]) for key in sorted(latest)]
            self._writer.write(conn, expected.staging_token, rows)
        return True

    # tags ---------------------------------------------------------------------------------
    def create_tag(self, repo_id: RepositoryID, tag_id: TagID, commit_id: CommitID, force: bool = False) -> None:
        statement = self._db.insert(_tags).values(repo=repo_id, name=tag_id, commit_id=commit_id)
        if force:
            statement = statement.on_conflict_do_update(
                index_elements=[_tags.c.repo, _tags.c.name], set_={"commit_id": statement.excluded.commit_id}
            )
        try:
            with self._db.write() as conn:
                self._require_repo(conn, repo_id)
                conn.execute(statement)
        except IntegrityError:
            raise AlreadyExists(f"tag {tag_id!r} already exists in repository {repo_id!r}") from None

    def get_tag(self, repo_id: RepositoryID, tag_id: TagID) -> CommitID:
        with self._db.read() as conn:
            commit_id = conn.execute(
                select(_tags.c.commit_id).where(_tags.c.repo == repo_id, _tags.c.name == tag_id)
            ).scalar_one_or_none()
            if commit_id is None:
                self._require_repo(conn, repo_id)
                raise RefNotFound(f"tag {tag_id!r} not found in repository {repo_id!r}")
        return CommitID(commit_id)

    def list_tags(self, repo_id: RepositoryID) -> list[tuple[TagID, CommitID]]:
        with self._db.read() as conn:
            rows = conn.execute(
                select(_tags.c.name, _tags.c.commit_id).where(_tags.c.repo == repo_id).order_by(_tags.c.name)
            ).all()
            if not rows:
                self._require_repo(conn, repo_id)
        return [(TagID(row.name), CommitID(row.commit_id)) for row in rows]

    def delete_tag(self, repo_id: RepositoryID, tag_id: TagID) -> None:
        with self._db.write() as conn:
            deleted = conn.execute(delete(_tags).where(_tags.c.repo == repo_id, _tags.c.name == tag_id)).rowcount
            if not deleted:
                self._require_repo(conn, repo_id)
                raise RefNotFound(f"tag {tag_id!r} not found in repository {repo_id!r}")

    # commits ------------------------------------------------------------------------------
    def add_commit(self, repo_id: RepositoryID, commit: Commit) -> None:
        statement = self._db.insert(_commits).values(**_commit_row(repo_id, commit)).on_conflict_do_nothing(
            index_elements=[_commits.c.repo, _commits.c.id]
        )
        with self._db.write() as conn:
            self._require_repo(conn, repo_id)
            if conn.execute(statement).rowcount == 1:
                return
            existing = conn.execute(
                select(_commits).where(_commits.c.repo == repo_id, _commits.c.id == commit.id)
            ).one()
        if _commit_of(existing) != _normalized(commit):
            raise AlreadyExists(f"commit {commit.id!r} already exists in repository {repo_id!r} with other content")

    def get_commit(self, repo_id: RepositoryID, commit_id: CommitID) -> Commit:
        with self._db.read() as conn:
            row = conn.execute(
                select(_commits).where(_commits.c.repo == repo_id, _commits.c.id == commit_id)
            ).one_or_none()
            if row is None:
                self._require_repo(conn, repo_id)
                raise RefNotFound(f"commit {commit_id!r} not found in repository {repo_id!r}")
        return _commit_of(row)

    def find_commits_by_prefix(self, repo_id: RepositoryID, prefix: str, limit: int = 10) -> list[CommitID]:
        query = select(_commits.c.id).where(_commits.c.repo == repo_id)
        if prefix:
            # The range bounds give the index scan; LIKE keeps the meaning obvious.
            query = query.where(_commits.c.id >= prefix, _commits.c.id.like(_like_escape(prefix) + "%", escape="\\"))
            successor = _prefix_successor(prefix)
            if successor is not None:
                query = query.where(_commits.c.id < successor)
        query = query.order_by(_commits.c.id).limit(max(0, int(limit)))
        with self._db.read() as conn:
            ids = [CommitID(commit_id) for commit_id in conn.execute(query).scalars()]
            if not ids:
                self._require_repo(conn, repo_id)
        # SQLite's LIKE ignores ASCII case; the range above already excluded other cases.
        return [commit_id for commit_id in ids if commit_id.startswith(prefix)]

    def list_commits(self, repo_id: RepositoryID) -> Iterator[Commit]:
        """Every commit of the repository, read in pages of ids (never all rows at once)."""
        with self._db.read() as conn:
            self._require_repo(conn, repo_id)
        return self._iter_commits(repo_id)

    def _iter_commits(self, repo_id: str) -> Iterator[Commit]:
        last: str | None = None
        while True:
            query = select(_commits).where(_commits.c.repo == repo_id)
            if last is not None:
                query = query.where(_commits.c.id > last)
            with self._db.read() as conn:
                rows = conn.execute(query.order_by(_commits.c.id).limit(_COMMIT_PAGE)).all()
            for row in rows:
                yield _commit_of(row)
            if len(rows) < _COMMIT_PAGE:
                return
            last = rows[-1].id
