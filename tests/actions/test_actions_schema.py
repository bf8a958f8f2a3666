"""Action file parsing and validation: the schema, Go durations, branch globs, `validate_file`."""

from __future__ import annotations

import pytest

from lakefuse.actions.duration import parse_go_duration
from lakefuse.actions.globs import branch_matches, compile_branch_pattern
from lakefuse.actions.schema import is_action_file, parse_action_file, select_action_files, validate_file
from lakefuse.errors import InvalidArgument

SEED_EXAMPLE = b"""\
name: Good files check
description: set of checks to verify that branch is good
on:
  pre-commit:
  pre-merge:
    branches:
      - main
hooks:
  - id: no_temp
    type: webhook
    description: checking no temporary files found
    properties:
      url: "https://your.domain.io/webhook?notmp=true?t=1za2PbkZK1bd4prMuTDr6BeEQwWYcX2R"
  - id: no_freeze
    type: webhook
    description: check production is not in dev freeze
    properties:
      url: "https://your.domain.io/webhook?nofreeze=true?t=1za2PbkZK1bd4prMuTDr6BeEQwWYcX2R"
"""

MINIMAL_HOOKS = b"""\
hooks:
  - id: check
    type: webhook
    properties:
      url: http://127.0.0.1:9/hook
"""


def parse(text: str | bytes, path: str = "_lakefs_actions/check.yaml"):
    return parse_action_file(path, text.encode() if isinstance(text, str) else text)


def reasons(text: str | bytes, path: str = "_lakefs_actions/check.yaml") -> str:
    with pytest.raises(InvalidArgument) as caught:
        parse(text, path)
    message = caught.value.message
    assert path in message, message
    assert "\n" not in message
    return message


def test_seed_example_parses():
    action = parse(SEED_EXAMPLE)
    assert action.name == "Good files check"
    assert action.description.startswith("set of checks")
    assert set(action.on) == {"pre-commit", "pre-merge"}
    assert [h.id for h in action.hooks] == ["no_temp", "no_freeze"]
    assert action.hooks[0].properties.timeout_seconds is None  # the runner's default (1m)
    assert action.triggered_by("pre-commit", "any-branch")
    assert action.triggered_by("pre-merge", "main")
    assert not action.triggered_by("pre-merge", "feature")
    assert not action.triggered_by("post-commit", "main")


def test_name_defaults_to_the_file_name():
    action = parse(b"on:\n  post-merge:\n" + MINIMAL_HOOKS, path="_lakefs_actions/sub/notify.yml")
    assert action.name == "notify.yml"
    assert action.on["post-merge"].branches == ()


def test_underscore_event_names_are_aliases():
    action = parse(b"on:\n  pre_commit:\n  post_merge:\n    branches: [main]\n" + MINIMAL_HOOKS)
    assert set(action.on) == {"pre-commit", "post-merge"}
    message = reasons(b"on:\n  pre_commit:\n  pre-commit:\n" + MINIMAL_HOOKS)
    assert "'pre-commit' is listed twice" in message


def test_yaml_11_booleans_are_strings():
    """`on` must stay a key (YAML 1.1 would read it as true) and `yes` a string value."""
    action = parse(b"on: {pre-commit: }\nhooks:\n  - id: on\n    type: webhook\n    properties:\n"
                   b"      url: http://h/x\n      query_params: {flag: yes, off: no, n: 3, b: true}\n")
    assert action.hooks[0].id == "on"
    assert dict(action.hooks[0].properties.query_params) == {
        "flag": ("yes",), "off": ("no",), "n": ("3",), "b": ("true",)}


def test_webhook_properties():
    action = parse(b"on: {pre-commit: }\nhooks:\n  - id: hk\n    type: webhook\n    properties:\n"
                   b"      url: https://h:8443/p?x=1\n      timeout: 1m30s\n"
                   b"      query_params:\n        disallow: [user_, private_]\n        prefix: public/\n")
    props = action.hooks[0].properties
    assert props.url == "https://h:8443/p?x=1"
    assert props.timeout_seconds == 90.0
    assert props.query_params == (("disallow", ("user_", "private_")), ("prefix", ("public/",)))


@pytest.mark.parametrize("text, expected", [
    ("1m30s", 90e9), ("500ms", 0.5e9), ("2h", 7200e9), ("1.5s", 1.5e9), (".5s", 0.5e9), ("5.s", 5e9),
    ("1h2m3.5s", 3723.5e9), ("300us", 300e3), ("300\u00b5s", 300e3), ("7ns", 7), ("0", 0), ("-1s", -1e9),
    ("+2m", 120e9),
])
def test_go_durations(text, expected):
    assert parse_go_duration(text) == expected


@pytest.mark.parametrize("text", ["", "1", "1 s", "s", "1x", "1m30", "1.2.3s", "--1s", ".s", "1s ", "one", "1e3s"])
def test_go_duration_junk_is_rejected(text):
    with pytest.raises(ValueError):
        parse_go_duration(text)


@pytest.mark.parametrize("timeout, reason", [
    ("10", "missing unit"), ("1x", "unknown unit"), ("fast", "invalid duration"), ("0s", "must be positive"),
    ("-5s", "must be positive"), ("30", "missing unit"),
])
def test_bad_timeouts_name_the_file_and_reason(timeout, reason):
    text = f"on: {{pre-commit: }}\nhooks:\n  - id: hk\n    type: webhook\n    properties:\n" \
           f"      url: http://h/x\n      timeout: \"{timeout}\"\n"
    assert reason in reasons(text)


def test_numeric_timeout_is_a_type_error():
    text = "on: {pre-commit: }\nhooks:\n  - id: hk\n    type: webhook\n    properties: {url: 'http://h', timeout: 30}\n"
    assert "'timeout' must be a Go duration string" in reasons(text)


@pytest.mark.parametrize("body, reason", [
    ("", "the file is empty"),
    ("- a\n- b\n", "must hold a mapping, not a list"),
    ("hooks: [\n", "invalid YAML"),
    ("name: a\nname: b\n", "duplicate key 'name'"),
    ("hooks: []\n", "missing 'on'"),
    ("on: {}\nhooks: []\n", "'on' lists no events"),
    ("on: [pre-commit]\nhooks: []\n", "'on' must be a mapping"),
    ("on: {pre-push: }\n", "unknown event 'pre-push'"),
    ("on: {pre-commit: }\n", "missing 'hooks'"),
    ("on: {pre-commit: }\nhooks: []\n", "'hooks' is empty"),
    ("on: {pre-commit: }\nhooks: {id: hk}\n", "'hooks' must be a list"),
    ("on: {pre-commit: {branches: main}}\n", "'branches' must be a list"),
    ("on: {pre-commit: {branches: ['[a']}}\n", "malformed branch pattern '[a'"),
    ("on: {pre-commit: {branch: [main]}}\n", "unknown key 'branch'"),
    ("on: {pre-commit: }\nhook: []\n", "unknown key 'hook'"),
    ("name: 5\non: {pre-commit: }\n", "'name' must be a string, not an integer"),
    ("on: {pre-commit: }\nhooks: [{type: webhook, properties: {url: 'http://h'}}]\n", "missing 'id'"),
    ("on: {pre-commit: }\nhooks: [{id: hk, properties: {url: 'http://h'}}]\n", "missing 'type'"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: lua, properties: {}}]\n", "unsupported hook type 'lua'"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: airflow, properties: {}}]\n", "unsupported hook type 'airflow'"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook}]\n", "missing 'properties'"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {}}]\n", "missing 'properties.url'"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {url: 'ftp://h/x'}}]\n", "http:// or https://"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {url: '/relative'}}]\n", "http:// or https://"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {url: 'http://h:99999/'}}]\n", "invalid url"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {url: 7}}]\n", "'url' must be a string"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {url: 'http://h', headers: {}}}]\n",
     "unknown key 'headers'"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {url: 'http://h', query_params: [a]}}]\n",
     "'query_params' must be a mapping"),
    ("on: {pre-commit: }\nhooks: [{id: hk, type: webhook, properties: {url: 'http://h', query_params: {a: {b: c}}}}]\n",
     "query param 'a' must be a string or a list of strings"),
    ("on: {pre-commit: }\nhooks: [{id: [1], type: webhook, properties: {url: 'http://h'}}]\n",
     "'id' must be a non-empty string"),
])
def test_schema_errors_name_the_file_and_reason(body, reason):
    assert reason in reasons(body)


def test_duplicate_hook_ids_and_all_reasons_reported():
    text = ("on: {pre-commit: , deploy: }\nhooks:\n"
            "  - {id: hk, type: webhook, properties: {url: 'http://h/1'}}\n"
            "  - {id: hk, type: webhook, properties: {url: 'http://h/2'}}\n")
    with pytest.raises(InvalidArgument) as caught:
        parse(text)
    errors = caught.value.details["errors"]
    assert any("duplicate hook id 'hk'" in e for e in errors)
    assert any("unknown event 'deploy'" in e for e in errors)


def test_bad_yaml_reports_the_line():
    message = reasons("on:\n  pre-commit:\nhooks:\n  - id: hk\n   type: webhook\n")
    assert "invalid YAML" in message and "line 5" in message


def test_not_utf8():
    assert "not UTF-8" in reasons(b"name: \xff\xfe\n")


@pytest.mark.parametrize("pattern, branch, expected", [
    ("main", "main", True), ("main", "main2", False), ("*", "anything", True), ("*", "a/b", False),
    ("release-*", "release-1.0", True), ("release-*", "release", False), ("feat-?", "feat-x", True),
    ("feat-?", "feat-xy", False), ("[a-c]*", "beta", True), ("[a-c]*", "dev", False), ("[^a-c]*", "dev", True),
    ("v[0-9].[0-9]", "v1.2", True), ("v[0-9].[0-9]", "v1x2", False), ("a\\*", "a*", True), ("a\\*", "ab", False),
    ("dev/*", "dev/x", True), ("*/*", "dev/x", True),
])
def test_branch_globs_follow_go_path_match(pattern, branch, expected):
    assert branch_matches(pattern, branch) is expected


@pytest.mark.parametrize("pattern", ["[", "[]", "[a", "a\\", "[-]", "[a-]", "[]a]"])
def test_malformed_branch_globs(pattern):
    with pytest.raises(ValueError):
        compile_branch_pattern(pattern)


def test_action_file_selection_is_sorted_and_ignores_other_files():
    files = [("_lakefs_actions/b.yaml", b""), ("_lakefs_actions/README.md", b""), ("_lakefs_actions/a.yml", b""),
             ("_lakefs_actions/.hidden.yaml", b""), ("_lakefs_actions/sub/c.YAML", b"")]
    assert [p for p, _ in select_action_files(files)] == [
        "_lakefs_actions/a.yml", "_lakefs_actions/b.yaml", "_lakefs_actions/sub/c.YAML"]
    assert not is_action_file("_lakefs_actions/notes.txt")


def test_validate_file(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_bytes(SEED_EXAMPLE)
    validate_file(str(good))
    bad = tmp_path / "bad.yaml"
    bad.write_text("on: {pre-commit: }\nhooks: [{id: hk, type: nope, properties: {}}]\n")
    with pytest.raises(InvalidArgument, match=r"invalid action file '.*bad\.yaml': .*unknown hook type 'nope'"):
        validate_file(str(bad))
    with pytest.raises(InvalidArgument, match=r"cannot read action file '.*missing\.yaml'"):
        validate_file(str(tmp_path / "missing.yaml"))
