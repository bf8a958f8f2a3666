"""``lakefuse commit|log|show|diff|merge``: the version-control verbs.

``commit`` takes a ``lakefs://repo/branch`` URI or a path inside a lakefuse mount (then the
mount itself commits, see ``mount_control``).  ``diff`` prints ``+ path`` (added), ``~ path``
(changed) and ``- path`` (removed): two refs compare their commits, one branch shows its
uncommitted changes.  ``merge SOURCE DEST`` merges like ``lakectl merge``; conflicts list the
conflicting paths after the error line and exit 5.
"""

from __future__ import annotations

import argparse

from lakefuse.cli.context import (
    COMMITTER_HELP,
    CliContext,
    committer_of,
    meta_pair,
    metadata_of,
    positive_int,
    ref_arg,
    require_branch,
    same_repository,
)
from lakefuse.cli.output import (
    commit_dict,
    difference_dict,
    print_commit,
    print_commit_details,
    print_difference,
    write_json,
)
from lakefuse.errors import InvalidArgument

MERGE_STRATEGIES = ("dest-wins", "source-wins")


def register(subparsers, ctx: CliContext) -> None:
    commit = subparsers.add_parser(
        "commit", help="commit the uncommitted changes of a branch",
        description="Commit the uncommitted changes of a branch.  BRANCH is lakefs://REPO/BRANCH or a "
                    "directory inside a branch of a lakefuse mount (the mount commits; only -m applies).",
        epilog='example: lakefuse commit lakefs://sales/dev -m "add b"')
    commit.add_argument("branch", metavar="lakefs://REPO/BRANCH|MOUNT_PATH")
    commit.add_argument("-m", "--message", required=True, help="commit message")
    commit.add_argument("--meta", action="append", type=meta_pair, metavar="KEY=VALUE",
                        help="commit metadata (repeatable)")
    commit.add_argument("--allow-empty", action="store_true", help="commit even without changes")
    commit.add_argument("--committer", help=COMMITTER_HELP)
    commit.add_argument("--json", action="store_true", help="print the new commit as JSON")
    commit.set_defaults(func=lambda args: cmd_commit(ctx, args))

    log = subparsers.add_parser(
        "log", help="show history",
        description="Show the history of a ref, newest first: every commit reachable from it (merged "
                    "branches' commits too), each once, by creation time, like 'git log'.",
        epilog="example: lakefuse log lakefs://sales/main~1 --amount 5")
    log.add_argument("ref", metavar="lakefs://REPO/REF")
    log.add_argument("-n", "--amount", type=positive_int, metavar="N", help="show at most N commits")
    log.add_argument("--first-parent", action="store_true",
                     help="follow only the first parent of merge commits (the branch's own line of history)")
    # the default since --first-parent exists; still accepted so older scripts keep working
    log.add_argument("--all-parents", action="store_true", help=argparse.SUPPRESS)
    log.add_argument("--json", action="store_true", help="print JSON")
    log.set_defaults(func=lambda args: cmd_log(ctx, args))

    show = subparsers.add_parser("show", help="show a commit", description="Show the commit a ref points to.")
    show.add_argument("ref", metavar="lakefs://REPO/REF")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=lambda args: cmd_show(ctx, args))

    diff = subparsers.add_parser(
        "diff", help="show differences",
        description="Show what differs from LEFT to RIGHT ('+' added, '~' changed, '-' removed), or with one "
                    "branch only, its uncommitted changes.  A path after the ref limits the diff to that prefix.",
        epilog="examples: lakefuse diff lakefs://sales/main lakefs://sales/dev; lakefuse diff lakefs://sales/dev")
    diff.add_argument("left", metavar="lakefs://REPO/LEFT[/PREFIX]")
    diff.add_argument("right", metavar="lakefs://REPO/RIGHT", nargs="?")
    diff.add_argument("--json", action="store_true", help="print JSON")
    diff.set_defaults(func=lambda args: cmd_diff(ctx, args))

    merge = subparsers.add_parser(
        "merge", help="merge a ref into a branch",
        description="Merge SOURCE (any ref) into the branch DEST with a merge commit.",
        epilog="example: lakefuse merge lakefs://sales/dev lakefs://sales/main --strategy source-wins")
    merge.add_argument("source", metavar="lakefs://REPO/SOURCE")
    merge.add_argument("dest", metavar="lakefs://REPO/DEST_BRANCH")
    merge.add_argument("--strategy", choices=MERGE_STRATEGIES,
                       help="resolve conflicts with the destination's or the source's version")
    merge.add_argument("-m", "--message", help="commit message (default: Merge 'SOURCE' into 'DEST')")
    merge.add_argument("--meta", action="append", type=meta_pair, metavar="KEY=VALUE", help="commit metadata")
    merge.add_argument("--committer", help=COMMITTER_HELP)
    merge.add_argument("--json", action="store_true", help="print the merge commit as JSON")
    merge.set_defaults(func=lambda args: cmd_merge(ctx, args))


def _check_message(message: str | None, option: str = "--message") -> None:
    if message is not None and not message.strip():
        raise InvalidArgument(f"{option} must not be empty")


def cmd_commit(ctx: CliContext, args) -> int:
    _check_message(args.message)
    if not args.branch.startswith("lakefs://"):
        from lakefuse.cli.mount_control import commit_mount_path

        return commit_mount_path(ctx, args)
    uri = ref_arg(args.branch)
    metadata = metadata_of(args.meta)
    committer = committer_of(ctx, args)
    catalog = ctx.catalog
    require_branch(catalog, uri.repository, uri.ref)
    commit = catalog.commit(uri.repository, uri.ref, args.message, committer, metadata, args.allow_empty)
    if args.json:
        write_json(commit_dict(commit))
        return 0
    ctx.out.write(f"Committed branch '{uri.ref}' of repository '{uri.repository}'\n")
    print_commit_details(commit, ctx.out)
    return 0


def cmd_log(ctx: CliContext, args) -> int:
    if args.first_parent and args.all_parents:
        raise InvalidArgument("--first-parent and --all-parents contradict each other")
    uri = ref_arg(args.ref)
    commits = ctx.catalog.log(uri.repository, uri.ref, args.amount, all_parents=not args.first_parent)
    out = ctx.out
    if args.json:
        write_json([commit_dict(commit) for commit in commits])
        return 0
    for commit in commits:
        print_commit(commit, out)
    return 0


def cmd_show(ctx: CliContext, args) -> int:
    uri = ref_arg(args.ref)
    resolved = ctx.catalog.resolve(uri.repository, uri.ref)
    commit = resolved.commit
    if args.json:
        write_json({**commit_dict(commit), "ref": uri.ref, "ref_type": resolved.kind.value})
        return 0
    print_commit_details(commit, ctx.out, extra=[("Ref", f"lakefs://{uri.repository}/{uri.ref} ({resolved.kind.value})")])
    return 0


def cmd_diff(ctx: CliContext, args) -> int:
    left = ref_arg(args.left, allow_path=True)
    if args.right is None:
        catalog = ctx.catalog
        resolved = catalog.resolve(left.repository, left.ref)
        if not resolved.writable:
            raise InvalidArgument(
                f"{left.ref!r} is {resolved.kind.with_article}: only a branch has uncommitted changes "
                "(give two refs to compare their commits)")
        differences = catalog.diff_uncommitted(left.repository, left.ref, left.path or "")
    else:
        right = ref_arg(args.right, allow_path=True)
        repository = same_repository(left, right)
        if left.path and right.path and left.path != right.path:
            raise InvalidArgument(f"different path prefixes {left.path!r} and {right.path!r}: give it once")
        differences = ctx.catalog.diff(repository, left.ref, right.ref, left.path or right.path or "")
    out = ctx.out
    if args.json:
        write_json([difference_dict(difference) for difference in differences])
        return 0
    for difference in differences:
        print_difference(difference, out)
    return 0


def cmd_merge(ctx: CliContext, args) -> int:
    source = ref_arg(args.source)
    dest = ref_arg(args.dest)
    repository = same_repository(source, dest)
    _check_message(args.message)
    metadata = metadata_of(args.meta)
    committer = committer_of(ctx, args)
    catalog = ctx.catalog
    require_branch(catalog, repository, dest.ref)
    commit = catalog.merge(repository, dest.ref, source.ref, committer, args.message, metadata, args.strategy)
    if args.json:
        write_json(commit_dict(commit))
        return 0
    ctx.out.write(f"Merged '{source.ref}' into '{dest.ref}'\n")
    print_commit_details(commit, ctx.out)
    return 0
