"""``lakefuse branch create|list|show|delete|reset|revert`` and ``lakefuse tag
create|list|show|delete``."""

from __future__ import annotations

from lakefuse.cli.context import (
    COMMITTER_HELP,
    CliContext,
    committer_of,
    meta_pair,
    metadata_of,
    positive_int,
    ref_arg,
    ref_in_repository,
    repository_arg,
    require_branch,
    same_repository,
    validate_branch_name,
    validate_tag_name,
)
from lakefuse.cli.output import commit_dict, print_commit_details, print_fields, print_table, write_json
from lakefuse.errors import RefNotFound


def register(subparsers, ctx: CliContext) -> None:
    _register_branch(subparsers, ctx)
    _register_tag(subparsers, ctx)


def _register_branch(subparsers, ctx: CliContext) -> None:
    branch = subparsers.add_parser("branch", help="create, list, show, delete, reset and revert branches",
                                   description="Create, list, show, delete, reset and revert branches.")
    verbs = branch.add_subparsers(dest="branch_command", metavar="COMMAND", required=True)

    create = verbs.add_parser(
        "create", help="create a branch", description="Create a branch at the commit a ref points to.",
        epilog="example: lakefuse branch create lakefs://sales/dev --source lakefs://sales/main")
    create.add_argument("branch", metavar="lakefs://REPO/BRANCH")
    create.add_argument("--source", "-s", required=True, metavar="lakefs://REPO/REF",
                        help="where the branch starts: a branch, tag, commit ID or ref expression")
    create.add_argument("--json", action="store_true", help="print the branch as JSON")
    create.set_defaults(func=lambda args: cmd_branch_create(ctx, args))

    listing = verbs.add_parser("list", help="list branches", description="List the branches of a repository.")
    listing.add_argument("repository", metavar="lakefs://REPO")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=lambda args: cmd_branch_list(ctx, args))

    show = verbs.add_parser("show", help="show a branch",
                            description="Show a branch: its head commit and whether it has uncommitted changes.")
    show.add_argument("branch", metavar="lakefs://REPO/BRANCH")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=lambda args: cmd_branch_show(ctx, args))

    delete = verbs.add_parser("delete", help="delete a branch",
                              description="Delete a branch and its uncommitted changes (not the default branch).")
    delete.add_argument("branch", metavar="lakefs://REPO/BRANCH")
    delete.set_defaults(func=lambda args: cmd_branch_delete(ctx, args))

    reset = verbs.add_parser(
        "reset", help="drop uncommitted changes",
        description="Drop the uncommitted changes of a branch: all of them, or those under a path prefix.",
        epilog="example: lakefuse branch reset lakefs://sales/dev/tables/")
    reset.add_argument("branch", metavar="lakefs://REPO/BRANCH[/PREFIX]")
    reset.set_defaults(func=lambda args: cmd_branch_reset(ctx, args))

    revert = verbs.add_parser(
        "revert", help="undo a commit with a new commit",
        description="Add a commit to the branch that undoes the changes COMMIT_REF made relative to its "
                    "parent (its parent number -m N for a merge commit).",
        epilog="example: lakefuse branch revert lakefs://sales/main main~1")
    revert.add_argument("branch", metavar="lakefs://REPO/BRANCH")
    revert.add_argument("commit_ref", metavar="COMMIT_REF",
                        help="the commit to revert: a ref (main~1, a commit ID) or lakefs://REPO/REF")
    revert.add_argument("-m", "--parent-number", type=positive_int, metavar="N",
                        help="for a merge commit: which parent to revert to (1-based)")
    revert.add_argument("--message", help="commit message (default: Revert \"...\")")
    revert.add_argument("--meta", action="append", type=meta_pair, metavar="KEY=VALUE", help="commit metadata")
    revert.add_argument("--committer", help=COMMITTER_HELP)
    revert.add_argument("--allow-empty", action="store_true", help="commit even if the revert changes nothing")
    revert.add_argument("--json", action="store_true", help="print the new commit as JSON")
    revert.set_defaults(func=lambda args: cmd_branch_revert(ctx, args))


def _register_tag(subparsers, ctx: CliContext) -> None:
    tag = subparsers.add_parser("tag", help="create, list, show and delete tags",
                                description="Create, list, show and delete tags.")
    verbs = tag.add_subparsers(dest="tag_command", metavar="COMMAND", required=True)

    create = verbs.add_parser("create", help="create a tag", description="Tag the commit a ref points to.",
                              epilog="example: lakefuse tag create lakefs://sales/v1 lakefs://sales/main")
    create.add_argument("tag", metavar="lakefs://REPO/TAG")
    create.add_argument("ref", metavar="lakefs://REPO/REF", help="a branch, tag, commit ID or ref expression")
    create.add_argument("-f", "--force", action="store_true", help="move the tag if it exists")
    create.add_argument("--json", action="store_true", help="print the tag as JSON")
    create.set_defaults(func=lambda args: cmd_tag_create(ctx, args))

    listing = verbs.add_parser("list", help="list tags", description="List the tags of a repository.")
    listing.add_argument("repository", metavar="lakefs://REPO")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=lambda args: cmd_tag_list(ctx, args))

    show = verbs.add_parser("show", help="show a tag and its commit", description="Show a tag and its commit.")
    show.add_argument("tag", metavar="lakefs://REPO/TAG")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=lambda args: cmd_tag_show(ctx, args))

    delete = verbs.add_parser("delete", help="delete a tag", description="Delete a tag.")
    delete.add_argument("tag", metavar="lakefs://REPO/TAG")
    delete.set_defaults(func=lambda args: cmd_tag_delete(ctx, args))


# --------------------------------------------------------------------------------------------
# branch


def cmd_branch_create(ctx: CliContext, args) -> int:
    target = ref_arg(args.branch)
    source = ref_arg(args.source)
    repo = same_repository(target, source)
    validate_branch_name(target.ref)
    catalog = ctx.catalog
    branch = catalog.create_branch(repo, target.ref, source.ref)
    if args.json:
        write_json({"id": branch.id, "commit_id": branch.commit_id, "source": source.ref})
        return 0
    ctx.out.write(f"Created branch '{branch.id}' at commit {branch.commit_id} (from '{source.ref}')\n")
    return 0


def cmd_branch_list(ctx: CliContext, args) -> int:
    name = repository_arg(args.repository)
    catalog = ctx.catalog
    repo = catalog.get_repository(name)
    branches = catalog.list_branches(name)
    if args.json:
        write_json([{"id": b.id, "commit_id": b.commit_id, "default": b.id == repo.default_branch} for b in branches])
        return 0
    print_table(("BRANCH", "COMMIT ID", ""),
                [(b.id, b.commit_id, "(default)" if b.id == repo.default_branch else "") for b in branches], ctx.out)
    return 0


def cmd_branch_show(ctx: CliContext, args) -> int:
    uri = ref_arg(args.branch)
    catalog = ctx.catalog
    branch = catalog.get_branch(uri.repository, uri.ref)
    commit = catalog.get_commit(uri.repository, branch.commit_id)
    dirty = next(iter(catalog.diff_uncommitted(uri.repository, uri.ref)), None) is not None
    if args.json:
        write_json({"id": branch.id, "commit_id": branch.commit_id, "has_uncommitted_changes": dirty,
                    "commit": commit_dict(commit)})
        return 0
    print_fields([
        ("Branch", f"lakefs://{uri.repository}/{branch.id}"),
        ("Commit ID", branch.commit_id),
        ("Commit message", commit.message.splitlines()[0] if commit.message else ""),
        ("Uncommitted changes", "yes" if dirty else "no"),
    ], ctx.out)
    return 0


def cmd_branch_delete(ctx: CliContext, args) -> int:
    uri = ref_arg(args.branch)
    ctx.catalog.delete_branch(uri.repository, uri.ref)
    ctx.out.write(f"Deleted branch '{uri.ref}' of repository '{uri.repository}'\n")
    return 0


def cmd_branch_reset(ctx: CliContext, args) -> int:
    uri = ref_arg(args.branch, allow_path=True)
    catalog = ctx.catalog
    catalog.get_branch(uri.repository, uri.ref)
    catalog.reset(uri.repository, uri.ref, uri.path or None)
    where = f" under '{uri.path}'" if uri.path else ""
    ctx.out.write(f"Dropped the uncommitted changes{where} of branch '{uri.ref}'\n")
    return 0


def cmd_branch_revert(ctx: CliContext, args) -> int:
    uri = ref_arg(args.branch)
    commit_ref = ref_in_repository(args.commit_ref, uri.repository)
    metadata = metadata_of(args.meta)
    committer = committer_of(ctx, args)
    if args.message is not None and not args.message.strip():
        from lakefuse.errors import InvalidArgument

        raise InvalidArgument("--message must not be empty")
    catalog = ctx.catalog
    require_branch(catalog, uri.repository, uri.ref)
    commit = catalog.revert(uri.repository, uri.ref, commit_ref, committer, args.parent_number, args.message,
                            metadata, args.allow_empty)
    if args.json:
        write_json(commit_dict(commit))
        return 0
    ctx.out.write(f"Reverted '{commit_ref}' on branch '{uri.ref}'\n")
    print_commit_details(commit, ctx.out)
    return 0


# --------------------------------------------------------------------------------------------
# tag


def cmd_tag_create(ctx: CliContext, args) -> int:
    tag = ref_arg(args.tag)
    target = ref_arg(args.ref)
    repo = same_repository(tag, target)
    validate_tag_name(tag.ref)
    commit_id = ctx.catalog.create_tag(repo, tag.ref, target.ref, force=args.force)
    if args.json:
        write_json({"id": tag.ref, "commit_id": commit_id})
        return 0
    ctx.out.write(f"Created tag '{tag.ref}' at commit {commit_id}\n")
    return 0


def cmd_tag_list(ctx: CliContext, args) -> int:
    name = repository_arg(args.repository)
    tags = ctx.catalog.list_tags(name)
    if args.json:
        write_json([{"id": tag_id, "commit_id": commit_id} for tag_id, commit_id in tags])
        return 0
    print_table(("TAG", "COMMIT ID"), tags, ctx.out)
    return 0


def cmd_tag_show(ctx: CliContext, args) -> int:
    uri = ref_arg(args.tag)
    catalog = ctx.catalog
    try:
        commit_id = catalog.get_tag(uri.repository, uri.ref)
    except RefNotFound:
        catalog.get_repository(uri.repository)  # RepositoryNotFound first, if that is what is wrong
        raise RefNotFound(f"tag {uri.ref!r} not found in repository {uri.repository!r}") from None
    commit = catalog.get_commit(uri.repository, commit_id)
    if args.json:
        write_json({"id": uri.ref, "commit_id": commit_id, "commit": commit_dict(commit)})
        return 0
    print_commit_details(commit, ctx.out, extra=[("Tag", f"lakefs://{uri.repository}/{uri.ref}")])
    return 0


def cmd_tag_delete(ctx: CliContext, args) -> int:
    uri = ref_arg(args.tag)
    ctx.catalog.delete_tag(uri.repository, uri.ref)
    ctx.out.write(f"Deleted tag '{uri.ref}' of repository '{uri.repository}'\n")
    return 0
