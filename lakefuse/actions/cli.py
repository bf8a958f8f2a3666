"""The ``lakefuse actions`` CLI verbs: ``validate``, ``runs list``, ``runs show``.

Owns argument parsing and printing for actions; the work is done by ``schema`` and ``runs``.
``add_actions_commands(subparsers, app_factory)`` adds the ``actions`` command to the main
parser's subparsers.  Every leaf parser sets ``func``: call ``args.func(args)``, it prints to
stdout and returns the exit code (0); errors are raised as ``lakefuse.errors`` exceptions for
the main program to print and turn into an exit code.

Assumption about the composition root: ``app_factory()`` (called only by ``runs`` verbs,
``validate`` works offline) returns an object with ``block_for_repository(repository_id) ->
BlockAdapter`` rooted at the repository's storage namespace (raising ``RepositoryNotFound``
for an unknown repository).  The CLI does not close the app.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Protocol

from lakefuse.actions.runs import RunManifest, RunStore, check_run_id
from lakefuse.actions.schema import validate_file
from lakefuse.block.base import BlockAdapter
from lakefuse.errors import InvalidArgument

REPOSITORY_URI_SCHEME = "lakefs://"
DEFAULT_LIST_AMOUNT = 100


class RepositoryStorage(Protocol):
    """What the actions CLI needs of the composition root."""

    def block_for_repository(self, repository_id: str) -> BlockAdapter: ...


def add_actions_commands(subparsers: argparse._SubParsersAction,
                         app_factory: Callable[[], RepositoryStorage]) -> argparse.ArgumentParser:
    actions = subparsers.add_parser("actions", help="validate action files and inspect hook runs",
                                    description="Validate action files and inspect hook runs.")
    verbs = actions.add_subparsers(dest="actions_command", metavar="COMMAND", required=True)

    validate = verbs.add_parser("validate", help="check an action file locally",
                                description="Check a local action file against the action file schema.")
    validate.add_argument("file", metavar="FILE", help="path of a local YAML action file")
    validate.set_defaults(func=lambda args: cmd_validate(args.file))

    runs = verbs.add_parser("runs", help="list and show hook runs", description="List and show hook runs.")
    runs_verbs = runs.add_subparsers(dest="runs_command", metavar="COMMAND", required=True)

    listing = runs_verbs.add_parser("list", help="list runs, newest first",
                                    description="List the action runs of a repository, newest first.")
    listing.add_argument("repository", metavar="lakefs://REPO", help="repository URI")
    listing.add_argument("--branch", help="only runs of this branch")
    listing.add_argument("--commit", help="only runs of this commit (ID or prefix)")
    listing.add_argument("--amount", type=_positive_int, default=DEFAULT_LIST_AMOUNT,
                         help=f"how many runs at most (default {DEFAULT_LIST_AMOUNT})")
    listing.add_argument("--after", metavar="RUN_ID", help="start after this run ID (paging)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=lambda args: cmd_runs_list(
        app_factory, args.repository, branch=args.branch, commit=args.commit, amount=args.amount,
        after=args.after, as_json=args.json))

    show = runs_verbs.add_parser("show", help="show a run and its hook logs",
                                 description="Show one run's manifest and the log of each of its hooks.")
    show.add_argument("repository", metavar="lakefs://REPO", help="repository URI")
    show.add_argument("run_id", metavar="RUN_ID")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=lambda args: cmd_runs_show(app_factory, args.repository, args.run_id,
                                                      as_json=args.json))
    return actions


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parse_repository_uri(uri: str) -> str:
    """``lakefs://repo`` (trailing ``/`` allowed) -> ``repo``."""
    if not uri.startswith(REPOSITORY_URI_SCHEME):
        raise InvalidArgument(f"invalid repository URI {uri!r}: expected lakefs://REPO")
    repository_id = uri[len(REPOSITORY_URI_SCHEME):].rstrip("/")
    if not repository_id or "/" in repository_id:
        raise InvalidArgument(f"invalid repository URI {uri!r}: expected lakefs://REPO")
    return repository_id


def _store(app_factory: Callable[[], RepositoryStorage], uri: str) -> RunStore:
    repository_id = parse_repository_uri(uri)
    return RunStore(app_factory().block_for_repository(repository_id))


def _out():
    return sys.stdout


def cmd_validate(path: str) -> int:
    validate_file(path)  # raises InvalidArgument naming the file and the reasons
    print(f"File validated successfully: '{path}'", file=_out())
    return 0


def cmd_runs_list(app_factory: Callable[[], RepositoryStorage], uri: str, *, branch: str | None = None,
                  commit: str | None = None, amount: int = DEFAULT_LIST_AMOUNT, after: str | None = None,
                  as_json: bool = False) -> int:
    if after:
        check_run_id(after)
    store = _store(app_factory, uri)
    manifests: list[RunManifest] = []
    for manifest in store.list_runs(branch_id=branch, commit_id=commit, after=after):
        manifests.append(manifest)
        if len(manifests) >= amount:
            break
    out = _out()
    if as_json:
        json.dump([_summary(m) for m in manifests], out, indent=2)
        out.write("\n")
        return 0
    rows = [("RUN ID", "EVENT", "BRANCH", "COMMIT", "START TIME", "END TIME", "STATUS")]
    rows += [(m.run_id, m.event_type, m.branch_id or "-", m.commit_id[:16] or "-", m.start_time, m.end_time,
              m.status) for m in manifests]
    _print_table(rows, out)
    return 0


def _summary(manifest: RunManifest) -> dict[str, Any]:
    data = manifest.to_dict()
    data.pop("hooks")
    return data


def cmd_runs_show(app_factory: Callable[[], RepositoryStorage], uri: str, run_id: str, *,
                  as_json: bool = False) -> int:
    check_run_id(run_id)
    store = _store(app_factory, uri)
    manifest = store.get_manifest(run_id)
    logs = {hook.hook_run_id: store.get_hook_log(run_id, hook.hook_run_id).decode("utf-8", "replace")
            for hook in manifest.hooks}
    out = _out()
    if as_json:
        data = manifest.to_dict()
        for hook in data["hooks"]:
            hook["log"] = logs[hook["hook_run_id"]]
        json.dump(data, out, indent=2)
        out.write("\n")
        return 0
    fields = [
        ("Run ID", manifest.run_id), ("Event", manifest.event_type), ("Repository", manifest.repository_id),
        ("Branch", manifest.branch_id or "-"), ("Source ref", manifest.source_ref),
        *([("Tag", manifest.tag_id)] if manifest.tag_id else []),
        ("Commit ID", manifest.commit_id or "-"), ("Commit message", manifest.commit_message),
        ("Committer", manifest.committer), ("Start time", manifest.start_time),
        ("End time", manifest.end_time), ("Status", manifest.status),
    ]
    if manifest.error:
        fields.append(("Error", manifest.error))
    width = max(len(name) for name, _ in fields) + 1
    for name, value in fields:
        out.write(f"{name + ':':<{width}} {value}\n")
    out.write(f"\nHooks ({len(manifest.hooks)}):\n")
    for hook in manifest.hooks:
        out.write(f"\n=== {hook.hook_run_id}  action '{hook.action_name}' ({hook.action_file})  "
                  f"hook '{hook.hook_id}'  {hook.status}  {hook.start_time} - {hook.end_time}\n")
        if hook.error:
            out.write(f"error: {hook.error}\n")
        out.write(f"log: {hook.log_key}\n")
        out.write(logs[hook.hook_run_id])
        if not logs[hook.hook_run_id].endswith("\n"):
            out.write("\n")
    return 0


def _print_table(rows: list[tuple[str, ...]], out) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() + "\n")
