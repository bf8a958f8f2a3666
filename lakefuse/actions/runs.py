"""Run results: run IDs, the run manifest, hook logs, and where they live in a storage namespace.

Owns the layout (as lakeFS)::

    _lakefs/actions/log/<runID>/<hookRunID>.log   the execution log of one hook
    _lakefs/actions/log/<runID>/run.manifest      JSON: the run and every hook executed in it

Run IDs sort newest first: 17 decimal digits of (10^17 - 1 - microseconds since the epoch)
followed by 6 random hex digits; within one process they strictly decrease even when the clock
stands still or steps back.  Hook run IDs are ``<action index>_<hook index>`` (``0000_0001``),
so a run's logs list in execution order.  Hook logs are written before the manifest: a run
listed is a run finished.  ``RunStore`` needs nothing but a ``BlockAdapter`` rooted at the
repository's storage namespace.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Iterator

from lakefuse.block.base import BlockAdapter
from lakefuse.errors import CorruptedData, InvalidArgument, ObjectNotFound

LOG_PREFIX = "_lakefs/actions/log/"
MANIFEST_NAME = "run.manifest"
MANIFEST_FORMAT = 1

_RUN_ID_TIME_DIGITS = 17
_RUN_ID_MAX_MICROS = 10**_RUN_ID_TIME_DIGITS - 1
_RUN_ID_PATTERN = re.compile(r"^[0-9]{17}[0-9a-f]{6}$")
_HOOK_RUN_ID_PATTERN = re.compile(r"^[0-9]{4,}_[0-9]{4,}$")

_run_id_lock = threading.Lock()
_last_inverse_micros = _RUN_ID_MAX_MICROS + 1


def new_run_id(now: float | None = None) -> str:
    """A new run ID; IDs made later sort first."""
    global _last_inverse_micros
    micros = int((time.time() if now is None else now) * 1_000_000)
    inverse = min(max(_RUN_ID_MAX_MICROS - micros, 0), _RUN_ID_MAX_MICROS)
    with _run_id_lock:
        if inverse >= _last_inverse_micros:
            inverse = max(_last_inverse_micros - 1, 0)
        _last_inverse_micros = inverse
    return f"{inverse:0{_RUN_ID_TIME_DIGITS}d}{secrets.token_hex(3)}"


def hook_run_id(action_index: int, hook_index: int) -> str:
    return f"{action_index:04d}_{hook_index:04d}"


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not _RUN_ID_PATTERN.match(run_id):
        raise InvalidArgument(f"invalid run ID {run_id!r}")
    return run_id


def manifest_key(run_id: str) -> str:
    return f"{LOG_PREFIX}{check_run_id(run_id)}/{MANIFEST_NAME}"


def hook_log_key(run_id: str, hook_run: str) -> str:
    if not _HOOK_RUN_ID_PATTERN.match(hook_run):
        raise InvalidArgument(f"invalid hook run ID {hook_run!r}")
    return f"{LOG_PREFIX}{check_run_id(run_id)}/{hook_run}.log"


def format_time(epoch_seconds: float, *, fraction: bool = True) -> str:
    """RFC 3339 in UTC: ``2021-02-28T14:03:31.250Z`` (or without the milliseconds)."""
    moment = datetime.fromtimestamp(epoch_seconds, timezone.utc)
    if fraction:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


PASSED = "passed"
FAILED = "failed"


@dataclass
class HookRunRecord:
    """One executed hook.  ``log_key`` is relative to the storage namespace."""

    hook_run_id: str
    action_name: str
    action_file: str
    hook_id: str
    hook_type: str
    status: str  # PASSED / FAILED
    start_time: str
    end_time: str
    log_key: str
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == PASSED


@dataclass
class RunManifest:
    """One run: an event that triggered at least one action (or hit a broken action file).

    ``commit_id``: for post-commit/merge/revert the new commit; for pre-commit/merge/revert the
    commit that resulted, filled in after the operation succeeded (empty while unknown or if the
    operation was aborted); for branch creation and tag events the commit the branch or tag
    points at; empty otherwise.  ``branch_id`` is empty and ``tag_id`` set for tag events.
    ``error``: why the run failed before any hook ran (a broken action file)."""

    run_id: str
    event_type: str
    event_time: str
    repository_id: str
    branch_id: str
    source_ref: str
    commit_message: str
    committer: str
    commit_metadata: dict[str, str]
    commit_id: str
    start_time: str
    end_time: str
    passed: bool
    hooks: list[HookRunRecord] = field(default_factory=list)
    error: str | None = None
    format: int = MANIFEST_FORMAT
    tag_id: str = ""

    @property
    def status(self) -> str:
        return PASSED if self.passed else FAILED

    def to_dict(self) -> dict:
        data = asdict(self)
        data["status"] = self.status
        return data

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False).encode("utf-8")

    @classmethod
    def from_dict(cls, data: dict) -> "RunManifest":
        data = dict(data)
        data.pop("status", None)
        hooks = [HookRunRecord(**hook) for hook in data.pop("hooks", [])]
        known = {name for name in cls.__dataclass_fields__}
        return cls(hooks=hooks, **{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_json(cls, raw: bytes, key: str = "") -> "RunManifest":
        try:
            return cls.from_dict(json.loads(raw))
        except (ValueError, TypeError, AttributeError) as exc:
            raise CorruptedData(f"unreadable run manifest {key or '(unnamed)'}: {exc}", key=key) from None


class RunStore:
    """Run manifests and hook logs of one repository, in its storage namespace."""

    def __init__(self, block: BlockAdapter):
        self.block = block

    # writes
    def put_hook_log(self, run_id: str, hook_run: str, log: bytes) -> str:
        key = hook_log_key(run_id, hook_run)
        self.block.put(key, log)
        return key

    def put_manifest(self, manifest: RunManifest) -> None:
        self.block.put(manifest_key(manifest.run_id), manifest.to_json())

    def set_commit_id(self, run_id: str, commit_id: str) -> RunManifest:
        """Record the commit a (pre-event) run's operation produced."""
        manifest = self.get_manifest(run_id)
        manifest.commit_id = commit_id
        self.put_manifest(manifest)
        return manifest

    # reads
    def get_manifest(self, run_id: str) -> RunManifest:
        key = manifest_key(run_id)
        try:
            raw = self.block.get(key)
        except ObjectNotFound:
            raise ObjectNotFound(f"action run {run_id!r} not found", run_id=run_id) from None
        return RunManifest.from_json(raw, key)

    def get_hook_log(self, run_id: str, hook_run: str) -> bytes:
        key = hook_log_key(run_id, hook_run)
        try:
            return self.block.get(key)
        except ObjectNotFound:
            raise ObjectNotFound(f"log of hook run {hook_run!r} of action run {run_id!r} not found",
                                 run_id=run_id, hook_run_id=hook_run) from None

    def list_runs(self, *, branch_id: str | None = None, commit_id: str | None = None,
                  after: str | None = None) -> Iterator[RunManifest]:
        """Runs newest first, optionally only those of one branch and/or of one commit (a
        commit ID prefix matches), starting after run ID ``after`` (for paging)."""
        start_after = ""
        if after:
            start_after = f"{LOG_PREFIX}{check_run_id(after)}/~"  # past every key of that run
        for stat in self.block.list(LOG_PREFIX, start_after=start_after):
            rest = stat.key[len(LOG_PREFIX):]
            run_id, _, name = rest.partition("/")
            if name != MANIFEST_NAME or not _RUN_ID_PATTERN.match(run_id):
                continue
            if after and run_id <= after:
                continue
            try:
                manifest = RunManifest.from_json(self.block.get(stat.key), stat.key)
            except ObjectNotFound:
                continue  # deleted while listing
            if branch_id is not None and manifest.branch_id != branch_id:
                continue
            if commit_id and not (manifest.commit_id or "").startswith(commit_id):
                continue
            yield manifest
