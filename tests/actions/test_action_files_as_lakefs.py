"""Action files as lakeFS reads them (issue 15): hook IDs follow lakeFS's pattern, every event
type lakeFS knows is accepted, tag events take no branch filter, lua/airflow hooks are refused
as unsupported - through ``parse_action_file`` and through ``lakefuse actions validate``."""

from __future__ import annotations

import pytest

from lakefuse.actions.events import EVENT_SPECS, EVENT_TYPES, FIRED_EVENTS, normalize_event_type
from lakefuse.actions.schema import parse_action_file
from lakefuse.cli.main import main
from lakefuse.errors import InvalidArgument

PATH = "_lakefs_actions/check.yaml"

#: every event lakeFS's action files may name (pkg/graveler EventType constants)
LAKEFS_EVENTS = [
    "prepare-commit", "pre-commit", "post-commit", "pre-merge", "post-merge",
    "pre-create-branch", "post-create-branch", "pre-delete-branch", "post-delete-branch",
    "pre-create-tag", "post-create-tag", "pre-delete-tag", "post-delete-tag",
    "pre-revert", "post-revert", "pre-cherry-pick", "post-cherry-pick",
]


def action(hook_id: str = "check", on: str = "  pre-commit:\n", hook_type: str = "webhook") -> bytes:
    return (f"name: check\non:\n{on}hooks:\n  - id: {hook_id}\n    type: {hook_type}\n    properties:\n"
            f"      url: http://127.0.0.1:9/hook\n").encode()


def rejection(content: bytes, path: str = PATH) -> str:
    with pytest.raises(InvalidArgument) as caught:
        parse_action_file(path, content)
    message = caught.value.message
    assert message.startswith(f"invalid action file '{path}': ") and "\n" not in message
    return message


# ------------------------------------------------------------------------------ hook IDs

@pytest.mark.parametrize("hook_id", [
    "ab", "_a", "__", "no_temp", "no-temp", "Check2", "x1", "a" + "b" * 255,  # 256 characters: the longest
])
def test_hook_ids_lakefs_accepts(hook_id):
    (hook,) = parse_action_file(PATH, action(f'"{hook_id}"')).hooks
    assert hook.id == hook_id


@pytest.mark.parametrize("hook_id, why", [
    ("no temp", "a space"),
    (" check", "a leading space"),
    ("check ", "a trailing space"),
    ("1check", "a leading digit"),
    ("-check", "a leading hyphen"),
    ("a", "one character (the pattern needs at least 2)"),
    ("_", "one character"),
    ("a" + "b" * 256, "257 characters (at most 256)"),
    ("check.v2", "a dot"),
    ("chéck", "a non-ASCII letter"),
    ("check\n", "a trailing newline"),
])
def test_hook_ids_lakefs_rejects_are_rejected_naming_file_and_hook(hook_id, why):
    content = action('"' + hook_id.replace("\n", "\\n") + '"')
    message = rejection(content)
    assert f"hooks[0]: invalid hook id {hook_id!r}" in message, (why, message)
    assert "letter or '_'" in message


def test_invalid_hook_id_is_reported_with_the_other_errors():
    content = (b"on: {pre-commit: }\nhooks:\n"
               b"  - {id: good_one, type: webhook, properties: {url: 'http://h/1'}}\n"
               b"  - {id: 'bad one', type: webhook, properties: {url: 'ftp://h/2'}}\n")
    with pytest.raises(InvalidArgument) as caught:
        parse_action_file(PATH, content)
    errors = caught.value.details["errors"]
    assert any(e.startswith("hooks[1]: invalid hook id 'bad one'") for e in errors)
    assert any("must be an absolute http:// or https:// URL" in e for e in errors)


# ------------------------------------------------------------------------------ events

def test_the_event_vocabulary_is_lakefs_s():
    assert list(EVENT_TYPES) == LAKEFS_EVENTS
    assert set(FIRED_EVENTS) == set(LAKEFS_EVENTS) - {"pre-cherry-pick", "post-cherry-pick"}
    pre = {name for name, spec in EVENT_SPECS.items() if spec.pre}
    assert pre == {"prepare-commit"} | {e for e in LAKEFS_EVENTS if e.startswith("pre-")}


@pytest.mark.parametrize("event", LAKEFS_EVENTS)
def test_every_lakefs_event_is_accepted(event):
    parsed = parse_action_file(PATH, action(on=f"  {event}:\n"))
    assert set(parsed.on) == {event}
    assert parsed.triggered_by(event, "main")


@pytest.mark.parametrize("spelling, event", [
    ("pre_create_branch", "pre-create-branch"), ("post_delete_tag", "post-delete-tag"),
    ("prepare_commit", "prepare-commit"), ("pre-cherrypick", "pre-cherry-pick"),
    ("post-cherrypick", "post-cherry-pick"), ("pre_cherry_pick", "pre-cherry-pick"),
])
def test_event_aliases(spelling, event):
    assert normalize_event_type(spelling) == event
    assert set(parse_action_file(PATH, action(on=f"  {spelling}:\n")).on) == {event}


def test_one_event_spelled_two_ways_is_an_error():
    message = rejection(action(on="  pre-cherrypick:\n  pre-cherry-pick:\n"))
    assert "'pre-cherry-pick' is listed twice" in message


@pytest.mark.parametrize("event", ["pre-push", "post-create-repository", "pre-tag", "commit"])
def test_unknown_events_are_rejected(event):
    assert f"unknown event '{event}'" in rejection(action(on=f"  {event}:\n"))


@pytest.mark.parametrize("event", ["pre-create-tag", "post-create-tag", "pre-delete-tag", "post-delete-tag"])
def test_tag_events_take_no_branches(event):
    message = rejection(action(on=f"  {event}:\n    branches: [main]\n"))
    assert f"on.{event}: 'branches' is not supported for tag events" in message
    parsed = parse_action_file(PATH, action(on=f"  {event}:\n"))
    assert parsed.triggered_by(event, "")  # a tag event has no branch: the action always runs


@pytest.mark.parametrize("event", ["pre-create-branch", "post-delete-branch", "prepare-commit", "pre-revert"])
def test_branch_events_filter_on_branches(event):
    parsed = parse_action_file(PATH, action(on=f"  {event}:\n    branches: ['release-*']\n"))
    assert parsed.triggered_by(event, "release-1") and not parsed.triggered_by(event, "main")


# ------------------------------------------------------------------------------ hook types

@pytest.mark.parametrize("hook_type", ["lua", "airflow"])
def test_lakefs_hook_types_lakefuse_does_not_run_are_unsupported(hook_type):
    message = rejection(action(hook_type=hook_type), path="_lakefs_actions/export.yaml")
    assert f"hook 'check': unsupported hook type '{hook_type}': lakefuse runs only webhook hooks" in message


# ------------------------------------------------------------------------------ the CLI

def test_validate_through_the_cli_entry(tmp_path, capsys):
    every_event = tmp_path / "all.yaml"
    every_event.write_bytes(action(on="".join(f"  {event}:\n" for event in LAKEFS_EVENTS)))
    assert main(["actions", "validate", str(every_event)]) == 0
    out, err = capsys.readouterr()
    assert out == f"File validated successfully: '{every_event}'\n" and err == ""

    spaced = tmp_path / "spaced.yaml"
    spaced.write_bytes(action('"no temp"'))
    assert main(["actions", "validate", str(spaced)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"lakefuse: error: invalid action file '{spaced}': hooks[0]: invalid hook id 'no temp': an id "
                   "starts with a letter or '_' followed by 1 to 255 letters, digits, '-' or '_' (no spaces or "
                   "other characters)\n")

    lua = tmp_path / "lua.yaml"
    lua.write_bytes(action(hook_type="lua"))
    assert main(["actions", "validate", str(lua)]) == 2
    _, err = capsys.readouterr()
    assert err.startswith(f"lakefuse: error: invalid action file '{lua}': hook 'check': unsupported hook type 'lua'")
