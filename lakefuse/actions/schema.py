"""Action files: parsing and validating the YAML under ``_lakefs_actions/`` into definitions.

Owns the action file schema and every message a user gets about a broken file.  A file is::

    name: Good files check            # optional, default: the file's base name
    description: ...                  # optional
    on:                               # required, at least one event
      pre-commit:                     # null value = every branch
      pre-merge:
        branches: [main, "release-*"] # Go path.Match globs; empty/absent = every branch
      post-create-tag:                # tag events take no 'branches' (a tag has no branch)
    hooks:                            # required, non-empty, run in this order
      - id: check                     # required, unique within the action, lakeFS's pattern
                                      # ^[_a-zA-Z][-_a-zA-Z0-9]{1,255}$
        type: webhook                 # required; the only type lakefuse runs
        description: ...              # optional
        properties:                   # required
          url: http://host/path       # required, http or https
          timeout: 1m30s              # optional Go duration, default: the runner's (1m)
          query_params:               # optional; a list value repeats the parameter
            prefix: public/
            disallow: [user_, private_]

Events: every event type lakeFS knows (``lakefuse.actions.events.EVENT_TYPES``: prepare-commit,
pre/post-commit, -merge, -create-branch, -delete-branch, -create-tag, -delete-tag, -revert,
-cherry-pick), hyphenated as in lakeFS's examples; lakeFS's ``pre_commit`` spelling and
``pre-cherrypick`` are accepted as aliases (the same event written two ways is an error).  Tag
events take no ``branches`` (as in lakeFS).  Hook IDs follow lakeFS's pattern.  Hook types other
than ``webhook`` that lakeFS has (``lua``, ``airflow``) are rejected as unsupported.  Unknown keys
are rejected at every level so that typos (``branch:``, ``hook:``) fail loudly instead of
silently matching nothing.
YAML 1.1 booleans ``on``/``off``/``yes``/``no`` are read as strings (``on:`` is a key here), and
duplicate mapping keys are errors.

Which files are action files: those under ``_lakefs_actions/`` whose name ends in ``.yaml`` or
``.yml`` and does not start with ``.``; other files there (a README) are ignored.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping
from urllib.parse import urlsplit

import yaml

from lakefuse.actions.duration import parse_go_duration
from lakefuse.actions.events import ACTIONS_PREFIX, EVENT_TYPES, TAG_EVENTS, ActionFile, normalize_event_type
from lakefuse.actions.globs import branch_matches, compile_branch_pattern
from lakefuse.errors import InvalidArgument

ACTION_FILE_SUFFIXES = (".yaml", ".yml")
WEBHOOK = "webhook"
HOOK_TYPES = (WEBHOOK,)
#: hook types lakeFS runs that lakefuse does not
UNSUPPORTED_HOOK_TYPES = ("lua", "airflow")
#: lakeFS's hook ID pattern (``reHookID``): a letter or ``_``, then 1-255 of ``[-_a-zA-Z0-9]``
HOOK_ID_PATTERN = re.compile(r"[_a-zA-Z][\-_a-zA-Z0-9]{1,255}")

_ACTION_KEYS = ("name", "description", "on", "hooks")
_EVENT_KEYS = ("branches",)
_HOOK_KEYS = ("id", "type", "description", "properties")
_WEBHOOK_KEYS = ("url", "timeout", "query_params")


@dataclass(frozen=True)
class WebhookProperties:
    url: str
    timeout_seconds: float | None = None  # None: the runner's default
    query_params: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (name, values) in file order


@dataclass(frozen=True)
class HookDefinition:
    id: str
    type: str
    description: str
    properties: WebhookProperties


@dataclass(frozen=True)
class EventFilter:
    """When an action runs for one event type: on every branch or on branches matching a glob."""

    branches: tuple[str, ...] = ()
    _compiled: tuple[re.Pattern[str], ...] = field(default=(), repr=False, compare=False)

    def matches(self, branch_id: str) -> bool:
        if not self.branches:
            return True
        patterns = self._compiled or tuple(compile_branch_pattern(b) for b in self.branches)
        return any(branch_matches(p, branch_id) for p in patterns)


@dataclass(frozen=True)
class ActionDefinition:
    path: str
    name: str
    description: str
    on: Mapping[str, EventFilter]  # canonical event type -> filter
    hooks: tuple[HookDefinition, ...]

    def triggered_by(self, event_type: str, branch_id: str) -> bool:
        event_filter = self.on.get(event_type)
        return event_filter is not None and event_filter.matches(branch_id)


# ------------------------------------------------------------------------------------ YAML


class _ActionFileLoader(yaml.SafeLoader):
    """Safe YAML with YAML 1.2 booleans (only true/false) and duplicate keys rejected."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable key: the base class reports it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


_ActionFileLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ActionFileLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _yaml_error_reason(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = [p for p in (exc.context, exc.problem) if p]
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return "invalid YAML: " + ": ".join(parts) + where
    return "invalid YAML: " + " ".join(str(exc).split())


# ------------------------------------------------------------------------------------ schema


def parse_action_file(path: str, content: bytes | str) -> ActionDefinition:
    """The action defined by one file; ``InvalidArgument`` naming ``path`` and every reason
    (one line, reasons separated by ``; ``, also in ``.details["errors"]``) otherwise."""

    def fail(reasons: list[str]) -> InvalidArgument:
        return InvalidArgument(f"invalid action file '{path}': " + "; ".join(reasons), path=path, errors=reasons)

    if isinstance(content, bytes):
        try:
            text = content.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise fail([f"not UTF-8 text (byte {exc.start})"]) from None
    else:
        text = content
    try:
        document = yaml.load(text, Loader=_ActionFileLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise fail([_yaml_error_reason(exc)]) from None
    errors: list[str] = []
    action = _parse_action(path, document, errors)
    if errors:
        raise fail(errors)
    assert action is not None
    return action


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def _unknown_keys(mapping: dict, allowed: tuple[str, ...], where: str, errors: list[str]) -> None:
    for key in mapping:
        if key not in allowed:
            errors.append(f"{where}unknown key {key!r} (allowed: {', '.join(allowed)})")


def _optional_text(mapping: dict, key: str, where: str, errors: list[str]) -> str:
    value = mapping.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        errors.append(f"{where}'{key}' must be a string, not {_type_name(value)}")
        return ""
    return value


def _parse_action(path: str, document: object, errors: list[str]) -> ActionDefinition | None:
    if document is None:
        errors.append("the file is empty")
        return None
    if not isinstance(document, dict):
        errors.append(f"the file must hold a mapping, not {_type_name(document)}")
        return None
    _unknown_keys(document, _ACTION_KEYS, "", errors)
    name = document.get("name")
    if name is None:
        name = posixpath.basename(path) or path
    elif not isinstance(name, str):
        errors.append(f"'name' must be a string, not {_type_name(name)}")
    elif not name.strip():
        errors.append("'name' must not be empty")
    description = _optional_text(document, "description", "", errors)
    on = _parse_on(document, errors)
    hooks = _parse_hooks(document, errors)
    return ActionDefinition(path=path, name=name, description=description, on=on, hooks=hooks)


def _parse_on(document: dict, errors: list[str]) -> dict[str, EventFilter]:
    if "on" not in document or document["on"] is None:
        errors.append("missing 'on': list the events that trigger the action "
                      f"({', '.join(EVENT_TYPES)})")
        return {}
    raw = document["on"]
    if not isinstance(raw, dict):
        errors.append(f"'on' must be a mapping of events, not {_type_name(raw)}")
        return {}
    if not raw:
        errors.append(f"'on' lists no events (expected some of {', '.join(EVENT_TYPES)})")
        return {}
    on: dict[str, EventFilter] = {}
    for name, spec in raw.items():
        event_type = normalize_event_type(name)
        if event_type is None:
            errors.append(f"on: unknown event {name!r} (expected one of {', '.join(EVENT_TYPES)})")
            continue
        if event_type in on:
            errors.append(f"on: event {event_type!r} is listed twice")
            continue
        event_filter = _parse_event_filter(f"on.{name}: ", spec, errors)
        if event_type in TAG_EVENTS and event_filter.branches:
            errors.append(f"on.{name}: 'branches' is not supported for tag events (a tag has no branch)")
        on[event_type] = event_filter
    return on


def _parse_event_filter(where: str, spec: object, errors: list[str]) -> EventFilter:
    if spec is None:
        return EventFilter()
    if not isinstance(spec, dict):
        errors.append(f"{where}must be empty or a mapping with 'branches', not {_type_name(spec)}")
        return EventFilter()
    _unknown_keys(spec, _EVENT_KEYS, where, errors)
    branches = spec.get("branches")
    if branches is None:
        return EventFilter()
    if not isinstance(branches, list):
        errors.append(f"{where}'branches' must be a list of glob patterns, not {_type_name(branches)}")
        return EventFilter()
    patterns, compiled = [], []
    for pattern in branches:
        if not isinstance(pattern, str) or not pattern:
            errors.append(f"{where}branch pattern {pattern!r} must be a non-empty string")
            continue
        try:
            compiled.append(compile_branch_pattern(pattern))
        except ValueError as exc:
            errors.append(f"{where}{exc}")
            continue
        patterns.append(pattern)
    return EventFilter(branches=tuple(patterns), _compiled=tuple(compiled))


def _parse_hooks(document: dict, errors: list[str]) -> tuple[HookDefinition, ...]:
    raw = document.get("hooks")
    if raw is None:
        errors.append("missing 'hooks': an action needs at least one hook")
        return ()
    if not isinstance(raw, list):
        errors.append(f"'hooks' must be a list, not {_type_name(raw)}")
        return ()
    if not raw:
        errors.append("'hooks' is empty: an action needs at least one hook")
        return ()
    hooks: list[HookDefinition] = []
    seen_ids: set[str] = set()
    for index, item in enumerate(raw):
        where = f"hooks[{index}]: "
        if not isinstance(item, dict):
            errors.append(f"{where}must be a mapping, not {_type_name(item)}")
            continue
        hook_id = item.get("id")
        if isinstance(hook_id, str) and hook_id:
            where = f"hook '{hook_id}': " if HOOK_ID_PATTERN.fullmatch(hook_id) else where
        _unknown_keys(item, _HOOK_KEYS, where, errors)
        if hook_id is None:
            errors.append(f"{where}missing 'id'")
        elif not isinstance(hook_id, str) or not hook_id:
            errors.append(f"{where}'id' must be a non-empty string, not {_type_name(hook_id)}")
            hook_id = None
        elif not HOOK_ID_PATTERN.fullmatch(hook_id):
            errors.append(f"{where}invalid hook id {hook_id!r}: an id starts with a letter or '_' followed by "
                          "1 to 255 letters, digits, '-' or '_' (no spaces or other characters)")
            hook_id = None
        elif hook_id in seen_ids:
            errors.append(f"{where}duplicate hook id {hook_id!r} (ids must be unique within an action)")
        else:
            seen_ids.add(hook_id)
        hook_type = item.get("type")
        if hook_type is None:
            errors.append(f"{where}missing 'type' (one of: {', '.join(HOOK_TYPES)})")
        elif hook_type in UNSUPPORTED_HOOK_TYPES:
            errors.append(f"{where}unsupported hook type {hook_type!r}: lakefuse runs only "
                          f"{', '.join(HOOK_TYPES)} hooks")
            hook_type = None
        elif hook_type not in HOOK_TYPES:
            errors.append(f"{where}unknown hook type {hook_type!r} (supported: {', '.join(HOOK_TYPES)})")
            hook_type = None
        description = _optional_text(item, "description", where, errors)
        properties = item.get("properties")
        if properties is None:
            errors.append(f"{where}missing 'properties'")
            continue
        if not isinstance(properties, dict):
            errors.append(f"{where}'properties' must be a mapping, not {_type_name(properties)}")
            continue
        if hook_type != WEBHOOK:
            continue
        webhook = _parse_webhook(where, properties, errors)
        if webhook is not None and hook_id is not None:
            hooks.append(HookDefinition(id=hook_id, type=hook_type, description=description, properties=webhook))
    return tuple(hooks)


def _parse_webhook(where: str, properties: dict, errors: list[str]) -> WebhookProperties | None:
    before = len(errors)
    _unknown_keys(properties, _WEBHOOK_KEYS, where + "properties: ", errors)
    url = properties.get("url")
    if url is None:
        errors.append(f"{where}missing 'properties.url'")
    elif not isinstance(url, str):
        errors.append(f"{where}'url' must be a string, not {_type_name(url)}")
    else:
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError on a bad port
        except ValueError as exc:
            errors.append(f"{where}invalid url {url!r}: {exc}")
        else:
            if parts.scheme not in ("http", "https") or not parts.hostname:
                errors.append(f"{where}url {url!r} must be an absolute http:// or https:// URL")
            elif parts.fragment:
                errors.append(f"{where}url {url!r} must not have a #fragment")
    timeout_seconds = None
    timeout = properties.get("timeout")
    if timeout is not None:
        if not isinstance(timeout, str):
            errors.append(f"{where}'timeout' must be a Go duration string such as '30s' or '1m30s', "
                          f"not {_type_name(timeout)}")
        else:
            try:
                nanoseconds = parse_go_duration(timeout)
            except ValueError as exc:
                errors.append(f"{where}timeout: {exc} (expected e.g. '500ms', '30s', '1m30s')")
            else:
                if nanoseconds <= 0:
                    errors.append(f"{where}timeout {timeout!r} must be positive")
                else:
                    timeout_seconds = nanoseconds / 1e9
    query_params = _parse_query_params(where, properties.get("query_params"), errors)
    if len(errors) > before:
        return None
    return WebhookProperties(url=url, timeout_seconds=timeout_seconds, query_params=query_params)


def _query_value(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    return None


def _parse_query_params(where: str, raw: object, errors: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        errors.append(f"{where}'query_params' must be a mapping, not {_type_name(raw)}")
        return ()
    params = []
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            errors.append(f"{where}query param name {name!r} must be a non-empty string")
            continue
        values = value if isinstance(value, list) else [value]
        texts = [_query_value(v) for v in values]
        if any(t is None for t in texts):
            errors.append(f"{where}query param {name!r} must be a string or a list of strings, "
                          f"not {_type_name(value)}")
            continue
        params.append((name, tuple(texts)))
    return tuple(params)


# ------------------------------------------------------------------------------------ files


def is_action_file(path: str) -> bool:
    """Whether a path found under ``_lakefs_actions/`` is an action file (``*.yaml``/``*.yml``,
    not hidden)."""
    name = posixpath.basename(path)
    return not name.startswith(".") and name.lower().endswith(ACTION_FILE_SUFFIXES)


def select_action_files(files: Iterable[ActionFile]) -> list[ActionFile]:
    """The action files among ``files`` sorted by path (the order actions run in).  Paths
    outside ``_lakefs_actions/`` are taken as relative to it (the core may strip the prefix)."""
    selected = [(path, content) for path, content in files if is_action_file(path)]
    return sorted(selected, key=lambda item: item[0])


def validate_file(path: str) -> None:
    """Check one local action file; ``InvalidArgument`` naming the file and the reasons."""
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except OSError as exc:
        raise InvalidArgument(f"cannot read action file '{path}': {exc.strerror or exc}", path=path) from None
    parse_action_file(path, content)


__all__ = [
    "ACTIONS_PREFIX", "ActionDefinition", "EventFilter", "HookDefinition", "WebhookProperties",
    "is_action_file", "parse_action_file", "select_action_files", "validate_file",
]
