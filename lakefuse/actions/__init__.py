"""Actions and hooks: YAML action files under ``_lakefs_actions/`` whose webhooks run on the
events lakeFS defines (commits, merges, branch and tag creation and deletion, reverts), and the
run results they leave in the storage namespace.

Modules: ``events`` (event types, ``HookEvent``), ``schema`` (action file parsing and
validation), ``globs`` (branch patterns), ``duration`` (Go durations), ``webhook`` (the HTTP
POST, through urllib3, with a total deadline), ``runs`` (run IDs, manifests, logs: ``RunStore``), ``runner``
(``ActionsRunner``, the hooks object of the core), ``cli`` (``lakefuse actions ...``).
"""

from lakefuse.actions.events import (
    ACTIONS_PREFIX,
    EVENT_TYPES,
    POST_COMMIT,
    POST_MERGE,
    PRE_COMMIT,
    PRE_MERGE,
    HookEvent,
)
from lakefuse.actions.runner import ActionsRunner
from lakefuse.actions.runs import HookRunRecord, RunManifest, RunStore, new_run_id
from lakefuse.actions.schema import ActionDefinition, parse_action_file, validate_file

__all__ = [
    "ACTIONS_PREFIX", "EVENT_TYPES", "POST_COMMIT", "POST_MERGE", "PRE_COMMIT", "PRE_MERGE",
    "ActionDefinition", "ActionsRunner", "HookEvent", "HookRunRecord", "RunManifest", "RunStore",
    "new_run_id", "parse_action_file", "validate_file",
]
