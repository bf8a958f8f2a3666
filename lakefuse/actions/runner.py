"""The hooks object the version-control core calls: runs the matching actions of an event.

Owns what happens on an event: read the action files of the ref (``event.read_action_files``),
parse all of them (one broken file fails the run, naming the file and the reason), pick the
actions triggered by the event type and branch, run them in file-path order (within an action
hooks run in order and stop at the first failure; every triggered action runs), write each
hook's log and then the run manifest to the repository's storage namespace, and raise
``HookFailed`` with a one-line message if anything failed.  The core aborts the operation when
a pre event (``prepare-commit``, ``pre-*``) raises and only reports a post event's failure.

One method per event type lakeFS knows (``lakefuse.actions.events.EVENT_SPECS``: the type with
``_`` for ``-``, e.g. ``pre_create_branch``); the event type comes from the method called
(``event.event_type`` is not read).  The webhook body is lakeFS's ``EventInfo``: ``event_type``,
``event_time``, ``action_name``, ``hook_id``, ``repository_id``, ``branch_id``, ``commit_message``
and ``committer`` always, ``source_ref``, ``tag_id``, ``commit_id`` and ``commit_metadata`` when
not empty.  Tag events have no branch: an action's ``branches`` filter cannot apply to them.

An event that triggers no action and meets no broken file creates no run (nothing is written).
After an operation that makes a commit (commit, merge, revert), the post event's ``commit_id`` is
recorded in the manifest of the pre event's run (found by ``event.pre_run_id`` or, failing that,
as the last pre event of the same repository, branch and kind on the calling thread: the core
runs pre, operation, post on one thread).  No lock is held while hooks run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable, Iterable

from lakefuse.actions.events import (
    COMMIT_KIND,
    EVENT_SPECS,
    POST_CHERRY_PICK,
    POST_COMMIT,
    POST_CREATE_BRANCH,
    POST_CREATE_TAG,
    POST_DELETE_BRANCH,
    POST_DELETE_TAG,
    POST_MERGE,
    POST_REVERT,
    PRE_CHERRY_PICK,
    PRE_COMMIT,
    PRE_CREATE_BRANCH,
    PRE_CREATE_TAG,
    PRE_DELETE_BRANCH,
    PRE_DELETE_TAG,
    PRE_MERGE,
    PRE_REVERT,
    PREPARE_COMMIT,
    ActionFile,
)
from lakefuse.actions.runs import (
    FAILED,
    PASSED,
    HookRunRecord,
    RunManifest,
    RunStore,
    format_time,
    hook_run_id,
    new_run_id,
)
from lakefuse.actions.schema import ActionDefinition, HookDefinition, parse_action_file, select_action_files
from lakefuse.actions.webhook import WebhookResponse, build_url, post_json
from lakefuse.block.base import BlockAdapter
from lakefuse.errors import HookFailed, InvalidArgument, LakefuseError

logger = logging.getLogger(__name__)

#: bytes of a failing response body quoted in the error message
ERROR_EXCERPT_BYTES = 512

#: pre events whose run gets the commit ID the operation made (from the matching post event)
_PAIRED_PRE_EVENTS = frozenset(spec.pairs_with for spec in EVENT_SPECS.values() if spec.pairs_with)


class ActionsRunner:
    """Runs action files' hooks for the core: one method per event type (``prepare_commit``,
    ``pre_commit``, ``post_commit``, ``pre_merge``, ..., ``pre_create_branch``, ...,
    ``post_delete_tag``, ``pre_revert``, ``post_revert``, ``pre_cherry_pick``,
    ``post_cherry_pick``); each returns the run's manifest, or None when no action was
    triggered, and raises ``HookFailed`` when a hook failed or an action file is broken.
    ``block_for_repo(repository_id)`` gives the repository's storage namespace;
    ``http_timeout_default`` (seconds) applies to hooks without a ``timeout``."""

    def __init__(self, block_for_repo: Callable[[str], BlockAdapter], clock: Callable[[], float] = time.time,
                 http_timeout_default: float = 60.0):
        if http_timeout_default <= 0:
            raise InvalidArgument(f"http_timeout_default must be positive, got {http_timeout_default}")
        self.block_for_repo = block_for_repo
        self.clock = clock
        self.http_timeout_default = float(http_timeout_default)
        self._pending_pre_runs = threading.local()

    # ---------------------------------------------------------------- the core's interface

    def prepare_commit(self, event) -> RunManifest | None:
        return self.handle(PREPARE_COMMIT, event)

    def pre_commit(self, event) -> RunManifest | None:
        return self.handle(PRE_COMMIT, event)

    def post_commit(self, event) -> RunManifest | None:
        return self.handle(POST_COMMIT, event)

    def pre_merge(self, event) -> RunManifest | None:
        return self.handle(PRE_MERGE, event)

    def post_merge(self, event) -> RunManifest | None:
        return self.handle(POST_MERGE, event)

    def pre_create_branch(self, event) -> RunManifest | None:
        return self.handle(PRE_CREATE_BRANCH, event)

    def post_create_branch(self, event) -> RunManifest | None:
        return self.handle(POST_CREATE_BRANCH, event)

    def pre_delete_branch(self, event) -> RunManifest | None:
        return self.handle(PRE_DELETE_BRANCH, event)

    def post_delete_branch(self, event) -> RunManifest | None:
        return self.handle(POST_DELETE_BRANCH, event)

    def pre_create_tag(self, event) -> RunManifest | None:
        return self.handle(PRE_CREATE_TAG, event)

    def post_create_tag(self, event) -> RunManifest | None:
        return self.handle(POST_CREATE_TAG, event)

    def pre_delete_tag(self, event) -> RunManifest | None:
        return self.handle(PRE_DELETE_TAG, event)

    def post_delete_tag(self, event) -> RunManifest | None:
        return self.handle(POST_DELETE_TAG, event)

    def pre_revert(self, event) -> RunManifest | None:
        return self.handle(PRE_REVERT, event)

    def post_revert(self, event) -> RunManifest | None:
        return self.handle(POST_REVERT, event)

    def pre_cherry_pick(self, event) -> RunManifest | None:
        return self.handle(PRE_CHERRY_PICK, event)

    def post_cherry_pick(self, event) -> RunManifest | None:
        return self.handle(POST_CHERRY_PICK, event)

    def handle(self, event_type: str, event) -> RunManifest | None:
        """Run ``event_type`` (a canonical event type) for ``event``, pairing pre and post runs
        of operations that make a commit."""
        spec = EVENT_SPECS.get(event_type)
        if spec is None:
            raise InvalidArgument(f"unknown event type {event_type!r}")
        if event_type in _PAIRED_PRE_EVENTS:
            return self._pre(event_type, event)
        if spec.pairs_with:
            return self._post(event_type, spec.pairs_with, event)
        return self.run(event_type, event)

    def store_for(self, repository_id: str) -> RunStore:
        return RunStore(self.block_for_repo(repository_id))

    # ---------------------------------------------------------------- pre/post pairing

    def _pending(self) -> dict:
        pending = getattr(self._pending_pre_runs, "runs", None)
        if pending is None:
            pending = self._pending_pre_runs.runs = {}
        return pending

    def _pre(self, event_type: str, event) -> RunManifest | None:
        slot = (str(event.repository_id), str(event.branch_id), event_type)
        self._pending().pop(slot, None)
        manifest = self.run(event_type, event)  # raises HookFailed: the operation is aborted
        if manifest is not None:
            self._pending()[slot] = manifest.run_id
        return manifest

    def _post(self, event_type: str, pre_event_type: str, event) -> RunManifest | None:
        slot = (str(event.repository_id), str(event.branch_id), pre_event_type)
        pending_run = self._pending().pop(slot, None)
        pre_run_id = getattr(event, "pre_run_id", None) or pending_run
        commit_id = getattr(event, "commit_id", None)
        if pre_run_id and commit_id:
            try:
                self.store_for(str(event.repository_id)).set_commit_id(pre_run_id, str(commit_id))
            except LakefuseError as exc:
                logger.warning("could not record commit %s in action run %s: %s", commit_id, pre_run_id, exc)
        return self.run(event_type, event)

    # ---------------------------------------------------------------- one run

    def run(self, event_type: str, event) -> RunManifest | None:
        """Run the actions ``event_type`` triggers; the manifest, or None if none ran."""
        spec = EVENT_SPECS[event_type]
        files = select_action_files(_action_files_of(event))
        if not files:
            return None
        branch_id = str(event.branch_id or "")
        actions: list[ActionDefinition] = []
        broken: list[str] = []
        for path, content in files:
            try:
                actions.append(parse_action_file(path, content))
            except InvalidArgument as exc:
                broken.append(exc.message)
        triggered = [] if broken else [a for a in actions if a.triggered_by(event_type, branch_id)]
        if not broken and not triggered:
            return None

        repository_id = str(event.repository_id)
        store = self.store_for(repository_id)
        event_time = self.clock()
        run_id = new_run_id(event_time)
        commit_unknown = spec.pre and spec.kind == COMMIT_KIND  # the commit does not exist yet
        manifest = RunManifest(
            run_id=run_id, event_type=event_type, event_time=format_time(event_time, fraction=False),
            repository_id=repository_id, branch_id=branch_id, source_ref=_source_ref(event),
            commit_message=str(getattr(event, "commit_message", "") or ""),
            committer=str(getattr(event, "committer", "") or ""),
            commit_metadata=_metadata(event),
            commit_id="" if commit_unknown else str(getattr(event, "commit_id", "") or ""),
            start_time=format_time(event_time), end_time="", passed=False,
            tag_id=str(getattr(event, "tag_id", "") or ""),
        )
        where = _target(manifest)
        failures: list[str] = []
        if broken:
            manifest.error = "; ".join(broken)
            failures.append(f"{event_type} actions failed: {manifest.error}")
        for action_index, action in enumerate(triggered):
            for hook_index, hook in enumerate(action.hooks):
                record = self._run_hook(store, manifest, event_time, action, hook, hook_run_id(action_index, hook_index))
                manifest.hooks.append(record)
                if not record.passed:
                    failures.append(f"{event_type} hook '{hook.id}' of action '{action.name}' failed: {record.error}")
                    break  # later hooks of this action do not run; other actions do
        manifest.passed = not failures
        manifest.end_time = format_time(self.clock())
        store.put_manifest(manifest)
        if failures:
            more = f" (and {len(failures) - 1} more failed)" if len(failures) > 1 else ""
            message = f"{failures[0]}{more} [run {run_id}]"
            logger.warning("action run %s of %s on %s failed: %s", run_id, event_type, where, "; ".join(failures))
            raise HookFailed(message, run_id=run_id, failures=failures, event_type=event_type)
        logger.info("action run %s of %s on %s passed (%d hooks)", run_id, event_type, where, len(manifest.hooks))
        return manifest

    def _run_hook(self, store: RunStore, manifest: RunManifest, event_time: float, action: ActionDefinition,
                  hook: HookDefinition, hook_run: str) -> HookRunRecord:
        started = self.clock()
        body = json.dumps(event_payload(manifest, action.name, hook.id), indent=2).encode("utf-8")
        url = build_url(hook.properties.url, hook.properties.query_params)
        timeout = hook.properties.timeout_seconds or self.http_timeout_default
        response = post_json(url, body, timeout)
        ended = self.clock()
        error = None if response.ok else failure_reason(response)
        log = _render_log(manifest.run_id, hook_run, action, hook, url, timeout, body, response, error)
        log_key = store.put_hook_log(manifest.run_id, hook_run, log)
        return HookRunRecord(
            hook_run_id=hook_run, action_name=action.name, action_file=action.path, hook_id=hook.id,
            hook_type=hook.type, status=PASSED if error is None else FAILED, start_time=format_time(started),
            end_time=format_time(ended), log_key=log_key, error=error,
        )


# -------------------------------------------------------------------- helpers


def _action_files_of(event) -> Iterable[ActionFile]:
    source = getattr(event, "read_action_files", None)
    if source is None:
        source = getattr(event, "action_files", None)
    if source is None:
        return ()
    if callable(source):
        source = source()
    return [(str(path), bytes(content)) for path, content in source]


def event_payload(manifest: RunManifest, action_name: str, hook_id: str) -> dict:
    """The JSON body a webhook gets: lakeFS's ``EventInfo`` (its field names and order; the
    optional fields left out when empty, as lakeFS's ``omitempty`` does)."""
    payload = {
        "event_type": manifest.event_type,
        "event_time": manifest.event_time,
        "action_name": action_name,
        "hook_id": hook_id,
        "repository_id": manifest.repository_id,
        "branch_id": manifest.branch_id,
    }
    optional = (("source_ref", manifest.source_ref), ("tag_id", manifest.tag_id), ("commit_id", manifest.commit_id))
    payload.update((name, value) for name, value in optional if value)
    payload["commit_message"] = manifest.commit_message
    payload["committer"] = manifest.committer
    if manifest.commit_metadata:
        payload["commit_metadata"] = manifest.commit_metadata
    return payload


def _source_ref(event) -> str:
    return str(getattr(event, "source_ref", "") or event.branch_id or "")


def _target(manifest: RunManifest) -> str:
    """What an event happened to, for log lines: ``repo/branch`` or ``repo tag v1``."""
    if manifest.tag_id:
        return f"{manifest.repository_id} tag {manifest.tag_id}"
    return f"{manifest.repository_id}/{manifest.branch_id}"


def _metadata(event) -> dict[str, str]:
    metadata = getattr(event, "commit_metadata", None) or {}
    return {str(k): str(v) for k, v in dict(metadata).items()}


def excerpt(body: bytes, limit: int = ERROR_EXCERPT_BYTES, truncated: bool = False) -> str:
    """A one-line quote of at most ``limit`` bytes of a response body."""
    text = " ".join(body[:limit].decode("utf-8", "replace").split())
    return text + ("..." if (len(body) > limit or truncated) and text else "")


def failure_reason(response: WebhookResponse) -> str:
    """Why a webhook call failed, one line: ``HTTP 403: <body excerpt>`` or the network error."""
    if response.error:
        return response.error
    quoted = excerpt(response.body, truncated=response.body_truncated)
    if quoted:
        return f"HTTP {response.status}: {quoted}"
    return f"HTTP {response.status} {response.reason}".strip()


def _render_log(run_id: str, hook_run: str, action: ActionDefinition, hook: HookDefinition, url: str,
                timeout: float, body: bytes, response: WebhookResponse, error: str | None) -> bytes:
    lines = [
        f"run: {run_id}",
        f"hook run: {hook_run}",
        f"action: {action.name} ({action.path})",
        f"hook: {hook.id} ({hook.type})",
        f"request: POST {url} (timeout {timeout:g}s)",
        "request body:",
        body.decode("utf-8"),
        "",
    ]
    if response.status is not None:
        lines.append(f"response: HTTP {response.status} {response.reason}".rstrip())
        lines.extend(f"  {name}: {value}" for name, value in response.headers)
        size_note = ", truncated" if response.body_truncated else ""
        lines.append(f"response body ({len(response.body)} bytes{size_note}):")
        lines.append(response.body.decode("utf-8", "replace"))
    else:
        lines.append("response: none")
    lines.append("")
    lines.append(f"elapsed: {response.elapsed_seconds * 1000:.0f} ms")
    lines.append(f"result: {PASSED}" if error is None else f"result: {FAILED}: {error}")
    return ("\n".join(lines) + "\n").encode("utf-8")
